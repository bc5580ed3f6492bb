//! Prints a random program: `cargo run -p vramkit-pytorch --example program -- SEED [streams] [pools] [tight] [no-empty-cache]`.
//! Pipe it into a built harness to see what PyTorch does with it.
use vramkit_pytorch::{random_program, Shape};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed = args.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let has = |w: &str| args.iter().any(|a| a == w);
    let shape = Shape {
        streams: has("streams"),
        pools: has("pools"),
        empty_cache: !has("no-empty-cache"),
        largest: if has("tight") { 2 << 30 } else { 3 << 30 },
        ..Shape::default()
    };
    print!("{}", random_program(seed, &shape));
}

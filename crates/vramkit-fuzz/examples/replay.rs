//! Runs inputs through a fuzz target outside libFuzzer, to debug a finding:
//!
//! ```text
//! cargo run -p vramkit-fuzz --example replay -- TARGET FILE...
//! ```
//!
//! For the `actions` target it first prints the preset and the actions the
//! input decodes to, ready to paste into a test.

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(name), files) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: replay TARGET FILE...");
        std::process::exit(2);
    };
    let Some(target) = vramkit_fuzz::targets::by_name(&name) else {
        eprintln!("no target {name:?}; targets: {:?}", vramkit_fuzz::targets::TARGETS.map(|(n, _)| n));
        std::process::exit(2);
    };
    for file in files {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        if name == "actions" {
            let (preset, actions) = vramkit_fuzz::targets::decode_actions(&data);
            println!("{file}: preset {preset:?}, {} actions:", actions.len());
            for action in &actions {
                println!("    Action::{action:?},");
            }
        }
        target(&data);
        println!("{file}: passes");
    }
}

//! A million cache-hit malloc+free pairs, for instruction counts:
//! `perf stat -e instructions target/release/examples/pairs [SIZE]`.

use vramkit_core::{AllocatorConfig, CachingAllocator, StreamId};
use vramkit_sim::SimDevice;

fn main() {
    let size: u64 = std::env::args().nth(1).map_or(4096, |s| s.parse().unwrap());
    let mut a = CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default());
    let p = a.malloc(size, StreamId(0)).unwrap();
    a.free(p).unwrap();
    let start = std::time::Instant::now();
    let n: u64 = std::env::args().nth(2).map_or(1_000_000, |s| s.parse().unwrap());
    for _ in 0..n {
        let p = a.malloc(std::hint::black_box(size), StreamId(0)).unwrap();
        a.free(p).unwrap();
    }
    println!("{:.1} ns per pair", start.elapsed().as_nanos() as f64 / n as f64);
}

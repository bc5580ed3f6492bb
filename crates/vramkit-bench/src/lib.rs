//! Benchmarks live in `benches/`; this crate exists so that they build
//! `vramkit-core` without the `validate` feature its own tests turn on.
//! It also makes the synthetic traces the benchmarks replay.

use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, HistoryConfig, Snapshot, StreamId};
use vramkit_sim::SimDevice;

/// A synthetic trace of about `events` entries: a training-loop-like mix of
/// small and large tensors on one stream, recorded by vramkit's own
/// allocator with history on (so it is a valid PyTorch-shaped snapshot).
pub fn synthetic_snapshot(events: usize, seed: u64) -> Snapshot {
    let mut a = CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default());
    a.record_history(Some(HistoryConfig { context: vramkit_core::ContextLevel::Never, ..HistoryConfig::default() }));
    let mut rng = vramkit_sim::XorShift::new(seed | 1);
    let mut next = || rng.next();
    let mut live: Vec<DeviceAddr> = Vec::new();
    // Each malloc adds one entry and each free two.
    while (a.stats().allocation.all.allocated as usize) * 3 < events {
        let r = next();
        if live.len() < 64 || (r % 8 < 4 && live.len() < 4096) {
            let size = match r % 16 {
                0..=9 => 1 + (r >> 8) % (256 << 10),
                10..=14 => (1 << 20) + (r >> 8) % (64 << 20),
                _ => (64 << 20) + (r >> 8) % (512 << 20),
            };
            live.push(a.malloc(size, StreamId(0)).expect("unlimited device"));
        } else {
            let i = (r >> 16) as usize % live.len();
            a.free(live.swap_remove(i)).unwrap();
        }
    }
    for p in live {
        a.free(p).unwrap();
    }
    a.snapshot()
}

//! Allocates on a simulated 1 GiB GPU until a fragmentation out-of-memory
//! error, then prints PyTorch's message with vramkit's diagnosis and
//! `memory_summary()`.
//!
//! `cargo run -p vramkit-core --example oom_demo`

use vramkit_core::{AllocatorConfig, CachingAllocator, StreamId};
use vramkit_sim::SimDevice;

const MIB: u64 = 1 << 20;

fn main() {
    let mut alloc = CachingAllocator::new(SimDevice::new(1024 * MIB), AllocatorConfig::pytorch_default());
    let s = StreamId(0);

    // Warm-up: six 150 MiB activations, freed; the cache keeps six segments.
    let warm: Vec<_> = (0..6).map(|_| alloc.malloc(150 * MIB, s).unwrap()).collect();
    warm.into_iter().for_each(|p| alloc.free(p).unwrap());
    // Next step: 140 MiB activations split those segments, leaving 10 MiB tails...
    let acts: Vec<_> = (0..6).map(|_| alloc.malloc(140 * MIB, s).unwrap()).collect();
    // ...which 8 MiB tensors that live on (optimizer state, say) then fill.
    let _kept: Vec<_> = (0..6).map(|_| alloc.malloc(8 * MIB, s).unwrap()).collect();
    acts.into_iter().for_each(|p| alloc.free(p).unwrap());

    let st = alloc.stats();
    println!(
        "reserved {} MiB, allocated {} MiB: {} MiB cached but unusable for large requests\n",
        st.reserved_bytes.all.current / MIB as i64,
        st.allocated_bytes.all.current / MIB as i64,
        (st.reserved_bytes.all.current - st.allocated_bytes.all.current) / MIB as i64,
    );
    match alloc.malloc(300 * MIB, s) {
        Ok(_) => println!("the 300 MiB request fit"),
        Err(err) => println!("torch.OutOfMemoryError: {err}\n"),
    }
    print!("{}", alloc.memory_summary(false));
}

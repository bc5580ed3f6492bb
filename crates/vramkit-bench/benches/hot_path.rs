//! Hot-path benchmarks: a malloc+free pair that hits the cache, and a mixed
//! sequence of real allocation sizes.
//!
//! `cargo bench -p vramkit-core --bench hot_path`

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, StreamId};
use vramkit_sim::SimDevice;

fn warm(size: u64) -> CachingAllocator<SimDevice> {
    let mut a = CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default());
    let p = a.malloc(size, StreamId(0)).unwrap();
    a.free(p).unwrap();
    a
}

fn cache_hit_pair(c: &mut Criterion) {
    let mut group = c.benchmark_group("cache_hit_pair");
    for (name, size) in [("small_512B", 512u64), ("small_64KiB", 64 << 10), ("large_4MiB", 4 << 20), ("large_100MiB", 100 << 20)] {
        let mut a = warm(size);
        group.bench_function(name, |b| {
            b.iter(|| {
                let p = a.malloc(black_box(size), StreamId(0)).unwrap();
                a.free(p).unwrap();
            })
        });
    }
    // With other live blocks around, so the free set and address map are not trivial.
    let mut a = warm(512);
    let mut keep = Vec::new();
    for i in 0..2000u64 {
        keep.push(a.malloc(512 + (i % 64) * 512, StreamId(0)).unwrap());
    }
    for p in keep.iter().step_by(2) {
        a.free(*p).unwrap();
    }
    group.bench_function("small_4KiB_among_1000_live", |b| {
        b.iter(|| {
            let p = a.malloc(black_box(4096), StreamId(0)).unwrap();
            a.free(p).unwrap();
        })
    });
    // Baseline in the same run: the system allocator, same sizes.
    for (name, size) in [("system_malloc_512B", 512usize), ("system_malloc_4MiB", 4 << 20)] {
        let layout = std::alloc::Layout::from_size_align(size, 512).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                let p = unsafe_free_alloc(layout);
                black_box(p);
            })
        });
    }
    group.finish();
}

/// One alloc+free through the global allocator (the baseline).
#[allow(unsafe_code)]
fn unsafe_free_alloc(layout: std::alloc::Layout) -> usize {
    // SAFETY: `layout` has a non-zero size; the pointer is freed with the
    // same layout at once and never dereferenced.
    unsafe {
        let p = std::alloc::alloc(layout);
        std::alloc::dealloc(p, layout);
        p as usize
    }
}

enum Op {
    Alloc(u64),
    Free(usize),
}

fn trace_ops() -> Vec<Op> {
    include_str!("data/cs336_bcrafton_ops.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (kind, n) = l.split_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            if kind == "a" {
                Op::Alloc(n)
            } else {
                Op::Free(n as usize)
            }
        })
        .collect()
}

fn mixed_trace_sizes(c: &mut Criterion) {
    let ops = trace_ops();
    let allocs = ops.iter().filter(|o| matches!(o, Op::Alloc(_))).count();
    let mut group = c.benchmark_group("mixed");
    group.throughput(criterion::Throughput::Elements(ops.len() as u64));
    group.bench_function("cs336_bcrafton_ops", |b| {
        b.iter_batched(
            || (CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default()), vec![DeviceAddr(0); allocs]),
            |(mut a, mut ptrs)| {
                let mut n = 0;
                for op in &ops {
                    match *op {
                        Op::Alloc(size) => {
                            ptrs[n] = a.malloc(size, StreamId(0)).unwrap();
                            n += 1;
                        }
                        Op::Free(i) => a.free(ptrs[i]).unwrap(),
                    }
                }
                a
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, cache_hit_pair, mixed_trace_sizes);
criterion_main!(benches);

//! Cache-hit malloc+free pairs, for instruction counts:
//! `valgrind --tool=callgrind target/release/examples/pairs [SIZE] [PAIRS] [core|shared|capi]`
//! (the difference of two runs with different PAIRS is the cost of a pair).
//! `core` times `CachingAllocator` itself, `shared` the `SharedAllocator`
//! front end, `capi` the C entry points PyTorch calls (simulated backend).

use vramkit_core::{AllocatorConfig, CachingAllocator, StreamId};
use vramkit_sim::SimDevice;

fn main() {
    let arg = |n: usize| std::env::args().nth(n);
    let size: u64 = arg(1).map_or(4096, |s| s.parse().unwrap());
    let n: u64 = arg(2).map_or(1_000_000, |s| s.parse().unwrap());
    let mut pair: Box<dyn FnMut()> = match arg(3).as_deref().unwrap_or("core") {
        "core" => {
            let mut a = CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default());
            Box::new(move || {
                let p = a.malloc(std::hint::black_box(size), StreamId(0)).unwrap();
                a.free(p).unwrap();
            })
        }
        "shared" => {
            let a = vramkit_capi::SharedAllocator::new(SimDevice::unlimited(), AllocatorConfig::pytorch_default(), 0);
            Box::new(move || {
                let p = a.malloc(std::hint::black_box(size), StreamId(0)).unwrap();
                a.free(p, size).unwrap();
            })
        }
        "capi" => capi_pair(size as usize),
        other => panic!("unknown front end {other}: core, shared or capi"),
    };
    pair();
    let start = std::time::Instant::now();
    for _ in 0..n {
        pair();
    }
    println!("{:.1} ns per pair", start.elapsed().as_nanos() as f64 / n as f64);
}

#[allow(unsafe_code)]
fn capi_pair(size: usize) -> Box<dyn FnMut()> {
    use vramkit_capi::ffi::{vramkit_free, vramkit_malloc, vramkit_select_backend};
    // SAFETY: a NUL-terminated literal; called before any other entry point.
    assert_eq!(unsafe { vramkit_select_backend(c"sim:8GiB".as_ptr()) }, 0);
    Box::new(move || {
        let p = vramkit_malloc(std::hint::black_box(size), 0, std::ptr::null_mut());
        vramkit_free(p, size, 0, std::ptr::null_mut());
    })
}

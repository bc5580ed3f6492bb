//! Boundary misuse mixed into long runs of ordinary calls: every mistake is
//! refused (or, for a wrong size, frees the block it names) and counted
//! exactly once, and the allocator stays whole: the blocks the caller still
//! holds stay live, the invariants hold, and nothing leaks. Plus the C entry
//! points given arguments no caller should pass (out-of-range devices,
//! sizes past any memory, a NaN fraction): NULL or nothing, never a crash.

use std::collections::BTreeMap;
use std::ffi::c_void;
use vramkit_capi::ffi::*;
use vramkit_capi::SharedAllocator;
use vramkit_core::{AllocatorConfig, DeviceAddr, StreamId};
use vramkit_sim::SimDevice;

struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn misuse_among_ordinary_calls_is_counted_once_and_corrupts_nothing() {
    let shared = SharedAllocator::new(SimDevice::new(2 << 30), AllocatorConfig::pytorch_default(), 0);
    let mut rng = XorShift(0x0dd_ba11);
    // Live blocks: address -> size asked.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    // Freed and not handed out again since.
    let mut freed: Vec<u64> = Vec::new();
    let mut misuse = 0;
    for _ in 0..3000 {
        let nth = |live: &BTreeMap<u64, u64>, i: u64| live.iter().nth(i as usize % live.len()).map(|(&a, &s)| (a, s));
        match rng.below(10) {
            0..=3 => {
                let limit = if rng.below(4) == 0 { 64 << 20 } else { 64 << 10 };
                let size = 1 + rng.below(limit);
                if let Ok(addr) = shared.malloc(size, StreamId(rng.below(2))) {
                    assert!(live.insert(addr.0, size).is_none(), "{addr} handed out twice");
                    freed.retain(|&f| f != addr.0);
                }
            }
            4..=5 if !live.is_empty() => {
                let (addr, size) = nth(&live, rng.below(1 << 20)).unwrap();
                shared.free(DeviceAddr(addr), size).unwrap();
                live.remove(&addr);
                freed.push(addr);
            }
            6 if !freed.is_empty() => {
                // Double free.
                let addr = freed[rng.below(freed.len() as u64) as usize];
                assert!(shared.free(DeviceAddr(addr), 8).unwrap_err().is_misuse());
                misuse += 1;
            }
            7 if !live.is_empty() => {
                // A pointer into a live block (not 512-aligned, so no block
                // starts there): unknown, nothing freed.
                let (addr, size) = nth(&live, rng.below(1 << 20)).unwrap();
                assert!(shared.free(DeviceAddr(addr + 256), size).unwrap_err().is_misuse());
                assert!(shared.record_stream(DeviceAddr(addr + 256), StreamId(1)).unwrap_err().is_misuse());
                misuse += 2;
            }
            8 if !live.is_empty() => {
                // A wrong size: frees the block and says so.
                let (addr, size) = nth(&live, rng.below(1 << 20)).unwrap();
                assert!(shared.free(DeviceAddr(addr), size ^ 1).unwrap_err().is_misuse());
                live.remove(&addr);
                freed.push(addr);
                misuse += 1;
            }
            _ => {
                assert!(shared.free(DeviceAddr(0), 1 + rng.below(100)).unwrap_err().is_misuse());
                misuse += 1;
            }
        }
        assert_eq!(shared.live_count(), live.len());
    }
    assert!(misuse > 300, "{misuse}");
    assert_eq!(shared.boundary_error_count(), misuse);
    for (&addr, &size) in &live {
        assert_eq!(shared.requested_size(DeviceAddr(addr)), Some(size), "a live block survived every mistake");
        shared.free(DeviceAddr(addr), size).unwrap();
    }
    shared
        .with_allocator(|alloc| {
            alloc.check_invariants().expect("invariants");
            alloc.empty_cache();
            assert_eq!(alloc.device().used_bytes(), 0, "nothing leaked");
        })
        .unwrap();
    assert_eq!(shared.boundary_error_count(), misuse);
}

const STREAM: *mut c_void = std::ptr::null_mut();

#[test]
fn arguments_no_caller_should_pass_return_null_or_nothing() {
    // SAFETY: a NUL-terminated literal.
    assert_eq!(unsafe { vramkit_select_backend(c"sim:4GiB".as_ptr()) }, 0);
    let d = 20;
    let keep = vramkit_malloc(4096, d, STREAM);
    assert!(!keep.is_null());
    for device in [-1, -7, 64, i32::MAX, i32::MIN] {
        assert!(vramkit_malloc(4096, device, STREAM).is_null(), "device {device}");
        vramkit_free(keep, 4096, device, STREAM); // wrong device: freed on d, counted
        let again = vramkit_malloc(4096, d, STREAM);
        assert_eq!(again, keep, "the block was freed on its own device and comes back from the cache");
        vramkit_reset_peak_stats(device);
        vramkit_set_memory_fraction(0.5, device);
        assert!(vramkit_memory_stats(device).is_null());
        assert!(vramkit_memory_summary(device, 0).is_null());
        assert_eq!(vramkit_record_history(device, 1, 10), -1);
    }
    // Sizes past any memory: the 1 EB refusal (raised before any
    // accounting, as in PyTorch) and an ordinary OOM (counted).
    assert!(vramkit_malloc(usize::MAX, d, STREAM).is_null());
    assert!(vramkit_malloc(1 << 40, d, STREAM).is_null());
    // Fractions that are not fractions change nothing.
    vramkit_set_memory_fraction(f64::NAN, d);
    vramkit_set_memory_fraction(-0.5, d);
    vramkit_set_memory_fraction(f64::INFINITY, d);
    let after = vramkit_malloc(1 << 30, d, STREAM);
    assert!(!after.is_null(), "no fraction limit was set");
    vramkit_free(after, 1 << 30, d, STREAM);
    vramkit_record_stream(std::ptr::null_mut(), STREAM);
    vramkit_free(keep, 4096, d, STREAM);
    let stats = vramkit_capi::process::memory_stats(d).unwrap();
    assert_eq!(stats["allocation.all.current"], 0);
    assert_eq!(stats["num_ooms"], 1);
}

//! Driver behaviour a real GPU shows only sometimes, forced through the
//! fake driver's knobs. Each test runs only in a child on the fake driver
//! started with its knob (see `fake_driver.rs`) and returns at once
//! anywhere else.

use crate::fake_driver::in_fake_child;
use vramkit_core::{AllocatorConfig, CachingAllocator, Device, StreamId};
use vramkit_cuda::CudaDevice;

fn knob(name: &str) -> Option<String> {
    in_fake_child().then(|| std::env::var(name).ok()).flatten()
}

/// `FAKE_CUDA_EVENT_LAG=1`: a block freed after `record_stream` stays out of
/// the pool until its event completes, as on a GPU still running a kernel.
#[test]
fn a_block_waits_for_its_event() {
    if knob("FAKE_CUDA_EVENT_LAG").as_deref() != Some("1") {
        return;
    }
    let device = CudaDevice::new(0).expect("the fake GPU");
    let mut alloc = CachingAllocator::new(device, AllocatorConfig::pytorch_default());
    let s = StreamId(0);
    let a = alloc.malloc(30 << 20, s).expect("a");
    alloc
        .record_stream(a, StreamId(0x2))
        .expect("record_stream");
    alloc.free(a).expect("free a");
    // The event answers "not ready" once: the block is not reused.
    let b = alloc.malloc(30 << 20, s).expect("b");
    assert_ne!(a, b, "a block was reused before its event completed");
    assert_eq!(alloc.stats().reserved_bytes.all.current, 60 << 20);
    alloc.free(b).expect("free b");
    // Now the event is complete: both blocks are back, the lower one first.
    let c = alloc.malloc(30 << 20, s).expect("c");
    assert_eq!(c, a.min(b));
    alloc.free(c).expect("free c");
    // empty_cache waits for a pending event and returns everything.
    let d = alloc.malloc(30 << 20, s).expect("d");
    alloc
        .record_stream(d, StreamId(0x2))
        .expect("record_stream d");
    alloc.free(d).expect("free d");
    alloc.empty_cache();
    assert_eq!(alloc.stats().reserved_bytes.all.current, 0);
    alloc.check_invariants().expect("invariants");
    assert_eq!(alloc.device().driver_failure_count(), 0);
}

/// `FAKE_CUDA_VMM=0`: without virtual memory management,
/// `expandable_segments:True` falls back to `cuMemAlloc` segments, as in
/// PyTorch.
#[test]
fn without_virtual_memory_expandable_segments_fall_back() {
    if knob("FAKE_CUDA_VMM").as_deref() != Some("0") {
        return;
    }
    let device = CudaDevice::new(0).expect("the fake GPU");
    assert!(!device.supports_virtual_memory());
    let config = AllocatorConfig::parse("expandable_segments:True").expect("settings");
    let mut alloc = CachingAllocator::new(device, config);
    let a = alloc.malloc(30 << 20, StreamId(0)).expect("a");
    let snapshot = alloc.snapshot();
    assert_eq!(snapshot.segments.len(), 1);
    assert!(!snapshot.segments[0].is_expandable);
    assert_eq!(alloc.device().reserved_range_count(), 0);
    alloc.free(a).expect("free a");
    alloc.empty_cache();
    assert_eq!(alloc.stats().reserved_bytes.all.current, 0);
}

/// `FAKE_CUDA_DEVICES=2`: each device index gets its own context and
/// memory; creating both and dropping them in either order balances every
/// retain.
#[test]
fn two_devices_are_independent() {
    if knob("FAKE_CUDA_DEVICES").as_deref() != Some("2") {
        return;
    }
    assert_eq!(CudaDevice::device_count(), Ok(2));
    let mut zero = CudaDevice::new(0).expect("device 0");
    let mut one = CudaDevice::new(1).expect("device 1");
    let a = zero.malloc(4 << 20, StreamId(0)).expect("on 0");
    let b = one.malloc(4 << 20, StreamId(0)).expect("on 1");
    assert_eq!(
        zero.mem_get_info().total_bytes - zero.mem_get_info().free_bytes,
        4 << 20
    );
    assert_eq!(
        one.mem_get_info().total_bytes - one.mem_get_info().free_bytes,
        4 << 20
    );
    zero.free(a, 4 << 20);
    assert_eq!(zero.mem_get_info().free_bytes, zero.total_bytes());
    drop(zero);
    one.free(b, 4 << 20);
    assert_eq!(one.driver_failure_count(), 0);
}

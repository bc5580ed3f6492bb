use crate::support::gpu;
use vramkit_core::{AllocatorConfig, CachingAllocator, StreamId};

#[test]
fn caching_allocator_on_a_real_gpu() {
    let Some(device) = gpu("caching_allocator_on_a_real_gpu") else { return };
    let mut alloc = CachingAllocator::new(device, AllocatorConfig::pytorch_default());
    let small = alloc.malloc(1000, StreamId(0)).expect("small");
    let large = alloc.malloc(30 << 20, StreamId(0)).expect("large");
    assert_eq!(alloc.stats().reserved_bytes.all.current as u64, (2 << 20) + (30 << 20));
    alloc.record_stream(large, StreamId(0x2)).expect("record_stream");
    alloc.free(small).expect("free small");
    alloc.free(large).expect("free large");
    // Cached, not returned; the same request reuses the cached block.
    let again = alloc.malloc(1000, StreamId(0)).expect("small again");
    assert_eq!(again, small);
    alloc.free(again).expect("free again");
    alloc.empty_cache();
    assert_eq!(alloc.stats().reserved_bytes.all.current, 0);
    assert_eq!(alloc.stats().allocated_bytes.all.current, 0);
    alloc.check_invariants().expect("invariants");
    assert_eq!(alloc.device().driver_failure_count(), 0);
}

#[test]
fn an_impossible_request_is_pytorchs_oom() {
    let Some(device) = gpu("an_impossible_request_is_pytorchs_oom") else { return };
    let total = device.total_bytes();
    let mut alloc = CachingAllocator::new(device, AllocatorConfig::pytorch_default());
    let error = alloc.malloc(total * 2, StreamId(0)).unwrap_err();
    let oom = error.as_oom().expect("an OutOfMemoryError");
    assert_eq!(oom.total_capacity_bytes, total);
    assert!(error.to_string().starts_with("CUDA out of memory. Tried to allocate"), "{error}");
    assert_eq!(alloc.stats().num_ooms, 1);
}

use crate::support::gpu;
use vramkit_core::{AllocatorConfig, CachingAllocator, Device, StreamId};
use vramkit_sim::SimDevice;

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

fn reserved<D: Device>(alloc: &CachingAllocator<D>) -> u64 {
    alloc.stats().reserved_bytes.all.current as u64
}

/// The same calls on `CachingAllocator<CudaDevice>` and on a
/// `CachingAllocator<SimDevice>` of the same capacity: with expandable
/// segments the two must reserve, map and place (relative to the segment
/// base) alike, and the GPU's mapped bytes must be what the allocator
/// counts as reserved.
#[test]
fn expandable_segments_grow_shrink_and_release_on_a_real_gpu() {
    let Some(device) = gpu("expandable_segments_grow_shrink_and_release_on_a_real_gpu") else { return };
    if !device.supports_virtual_memory() {
        eprintln!("skipped: this GPU has no virtual memory management");
        return;
    }
    let config = AllocatorConfig::parse("expandable_segments:True").expect("settings");
    let mut model = CachingAllocator::new(SimDevice::new(device.total_bytes()), config.clone());
    let mut alloc = CachingAllocator::new(device, config);
    let s = StreamId(0);

    // Grow: the second block follows the first in the same reservation.
    let a = alloc.malloc(30 << 20, s).expect("a");
    let b = alloc.malloc(30 << 20, s).expect("b");
    let small = alloc.malloc(1000, s).expect("small");
    let (ma, mb, _) = (model.malloc(30 << 20, s).unwrap(), model.malloc(30 << 20, s).unwrap(), model.malloc(1000, s).unwrap());
    assert_eq!(b, a.offset(30 << 20), "expandable segments grow in place");
    assert_eq!(b.0 - a.0, mb.0 - ma.0);
    assert_eq!(reserved(&alloc), reserved(&model));
    assert_eq!(alloc.device().mapped_bytes(), reserved(&alloc));
    assert_eq!(alloc.device().reserved_range_count(), 2, "one reservation per pool");
    assert_eq!(alloc.stats().num_device_alloc, model.stats().num_device_alloc);

    // Shrink: empty_cache unmaps the whole free pages behind `a`.
    alloc.free(b).expect("free b");
    model.free(mb).unwrap();
    alloc.empty_cache();
    model.empty_cache();
    assert_eq!(reserved(&alloc), reserved(&model));
    assert!(reserved(&alloc) < 60 << 20, "nothing was unmapped: {}", reserved(&alloc));
    assert_eq!(alloc.device().mapped_bytes(), reserved(&alloc));
    // The unmapped space is mapped again for the next request, at the same place.
    let again = alloc.malloc(30 << 20, s).expect("b again");
    assert_eq!(again, b);
    alloc.free(again).expect("free b again");

    // Release: with nothing live, every page and reservation goes back.
    alloc.free(a).expect("free a");
    alloc.free(small).expect("free small");
    alloc.empty_cache();
    assert_eq!(reserved(&alloc), 0);
    assert_eq!(alloc.device().mapped_bytes(), 0);
    assert_eq!(alloc.device().reserved_range_count(), 0);
    alloc.check_invariants().expect("invariants");
    assert_eq!(alloc.device().driver_failure_count(), 0);
}

/// Dropping the allocator, and so its `CudaDevice`, with memory in use,
/// cached, waiting on an event and (with expandable segments) mapped gives
/// every byte back to the driver.
#[test]
fn dropping_the_allocator_gives_back_everything() {
    let Some(probe) = gpu("dropping_the_allocator_gives_back_everything") else {
        return;
    };
    // The probe keeps the primary context retained, so nothing comes back
    // merely because the context was destroyed.
    let free_before = probe.mem_get_info().free_bytes;
    for conf in ["", "expandable_segments:True"] {
        let device = gpu("dropping_the_allocator_gives_back_everything")
            .expect("a second handle on the GPU");
        let mut alloc =
            CachingAllocator::new(device, AllocatorConfig::parse(conf).expect("settings"));
        let s = StreamId(0);
        let _in_use = alloc.malloc(30 << 20, s).expect("in use");
        let cached = alloc.malloc(1000, s).expect("cached");
        let pending = alloc.malloc(5 << 20, s).expect("pending");
        alloc
            .record_stream(pending, StreamId(0x2))
            .expect("record_stream");
        alloc.free(pending).expect("free pending");
        alloc.free(cached).expect("free cached");
        assert!(
            probe.mem_get_info().free_bytes < free_before,
            "{conf}: nothing was allocated"
        );
        drop(alloc);
        assert_eq!(
            probe.mem_get_info().free_bytes,
            free_before,
            "{conf}: memory kept after the drop"
        );
    }
    assert_eq!(probe.driver_failure_count(), 0);
}

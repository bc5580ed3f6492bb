use crate::support::gpu;
use vramkit_core::{Device, DeviceError};

#[test]
fn reserve_map_unmap_free_round_trip() {
    let Some(mut device) = gpu("reserve_map_unmap_free_round_trip") else { return };
    let page = device.allocation_granularity().expect("granularity");
    assert!(page.is_power_of_two() && page >= 4096, "granularity {page}");
    assert!(device.recommended_granularity().expect("recommended") >= page);

    let reserved = 8 * page;
    let base = device.reserve_address_range_aligned(reserved, 0).expect("reserve");
    assert_eq!(base.0 % page, 0);
    let free_before = device.mem_get_info().free_bytes;

    let first = device.map_page(base, page).expect("map page 0");
    let third = device.map_page(base.offset(2 * page), 2 * page).expect("map pages 2-3");
    assert_eq!((first.addr(), first.size_bytes()), (base, page));
    assert_eq!(third.addr(), base.offset(2 * page));
    let free_mapped = device.mem_get_info().free_bytes;
    assert!(
        free_mapped + 3 * page <= free_before + page,
        "mapping 3 pages used memory: {free_before} -> {free_mapped}"
    );

    // Mapping over a mapped page is refused and leaves nothing behind.
    assert!(device.map_page(base, page).is_err());

    device.unmap_page(first).expect("unmap page 0");
    // The unmapped hole can be mapped again.
    let again = device.map_page(base, page).expect("map page 0 again");
    device.unmap_page(again).expect("unmap page 0 again");
    device.unmap_page(third).expect("unmap pages 2-3");
    device.free_address_range(base, reserved).expect("free the range");
    assert_eq!(device.driver_failure_count(), 0);
}

/// 2 MiB: the small-pool page, a multiple of every granularity we accept.
const PAGE: u64 = 2 << 20;

#[test]
fn the_trait_maps_page_by_page_and_unmaps_any_run_of_pages() {
    let Some(mut device) = gpu("the_trait_maps_page_by_page_and_unmaps_any_run_of_pages") else { return };
    if !device.supports_virtual_memory() {
        eprintln!("skipped: this GPU has no virtual memory management");
        return;
    }
    let reserved = 16 * PAGE;
    let base = Device::reserve_address_range(&mut device, reserved).expect("reserve");
    assert_eq!(device.reserved_range_count(), 1);
    Device::map(&mut device, base, 4 * PAGE, PAGE).expect("map 4 pages in one call");
    Device::map(&mut device, base.offset(4 * PAGE), 2 * PAGE, 2 * PAGE).expect("map one double page");
    assert_eq!(device.mapped_bytes(), 6 * PAGE);
    // One unmap can cover pages from different map calls...
    Device::unmap(&mut device, base.offset(3 * PAGE), 3 * PAGE);
    assert_eq!(device.mapped_bytes(), 3 * PAGE);
    // ...or a part of one call's pages.
    Device::unmap(&mut device, base.offset(PAGE), PAGE);
    assert_eq!(device.mapped_bytes(), 2 * PAGE);
    // The holes can be mapped again.
    Device::map(&mut device, base.offset(PAGE), PAGE, PAGE).expect("map the hole again");
    Device::unmap(&mut device, base, 3 * PAGE);
    assert_eq!(device.mapped_bytes(), 0);
    Device::release_address_range(&mut device, base, reserved);
    assert_eq!(device.reserved_range_count(), 0);
    assert_eq!(device.driver_failure_count(), 0);
}

#[test]
fn a_map_that_runs_out_of_memory_leaves_nothing_mapped() {
    let Some(mut device) = gpu("a_map_that_runs_out_of_memory_leaves_nothing_mapped") else { return };
    if !device.supports_virtual_memory() {
        eprintln!("skipped: this GPU has no virtual memory management");
        return;
    }
    // 1 GiB pages: the map fails after a few dozen, not thousands.
    let page = 1 << 30;
    let size = (device.total_bytes().div_ceil(page) + 2) * page;
    let base = Device::reserve_address_range(&mut device, size).expect("reserve more than the GPU has");
    let free_before = device.mem_get_info().free_bytes;
    assert_eq!(Device::map(&mut device, base, size, page), Err(DeviceError::OutOfMemory { requested_bytes: size }));
    assert_eq!(device.mapped_bytes(), 0);
    let free_after = device.mem_get_info().free_bytes;
    assert!(free_after + page >= free_before, "the pages mapped before the failure were kept: {free_before} -> {free_after}");
    // The range is still usable.
    Device::map(&mut device, base, page, page).expect("one page after the failure");
    Device::unmap(&mut device, base, page);
    Device::release_address_range(&mut device, base, size);
    assert_eq!(device.driver_failure_count(), 0);
}

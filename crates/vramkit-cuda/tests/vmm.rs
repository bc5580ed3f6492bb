use crate::support::gpu;
use vramkit_core::Device;

#[test]
fn reserve_map_unmap_free_round_trip() {
    let Some(mut device) = gpu("reserve_map_unmap_free_round_trip") else { return };
    let page = device.allocation_granularity().expect("granularity");
    assert!(page.is_power_of_two() && page >= 4096, "granularity {page}");
    assert!(device.recommended_granularity().expect("recommended") >= page);

    let reserved = 8 * page;
    let base = device.reserve_address_range(reserved, 0).expect("reserve");
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

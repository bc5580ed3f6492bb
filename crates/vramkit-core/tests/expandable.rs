//! Expandable segments (spec section 6), including worked example D.

use crate::support::*;
use vramkit_core::HistoryConfig;
use vramkit_sim::SimDevice;

fn expandable(capacity: u64) -> vramkit_core::CachingAllocator<SimDevice> {
    let mut a = allocator_on(SimDevice::new(capacity), "expandable_segments:True");
    a.record_history(Some(HistoryConfig::default()));
    a
}

#[test]
fn example_d_grow_and_shrink() {
    let mut a = expandable(80 * GIB);
    let p30 = a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 41943040 stream 0: [31457280 A(31457280) | 10485760 I]"));
    assert_eq!(a.stats().reserved_bytes.all.current, 40 * MIB as i64);
    assert_eq!(a.stats().num_device_alloc, 1);
    assert_eq!(a.stats().segment.all.current, 0, "mapping is not a segment");
    assert_eq!(a.device().counters().reserves, 1);

    let p15 = a.malloc(15 * MIB, S0).unwrap();
    assert_eq!(p15.0, p30.0 + 30 * MIB);
    assert_eq!(state(&a), lines("@0x0 large 62914560 stream 0: [31457280 A(31457280) | 15728640 A(15728640) | 15728640 I]"));
    assert_eq!(a.stats().reserved_bytes.all.current, 60 * MIB as i64);
    assert_eq!(a.stats().num_device_alloc, 2);

    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.all.current, 60 * MIB as i64, "no whole page is free");

    a.free(p15).unwrap();
    a.empty_cache();
    assert_eq!(state(&a), lines("@0x0 large 41943040 stream 0: [31457280 A(31457280) | 10485760 I]"));
    assert_eq!(a.stats().reserved_bytes.all.current, 40 * MIB as i64);
    assert_eq!(a.stats().num_device_free, 1);
    assert_eq!(a.stats().inactive_split.all.current, 0, "not kept for expandable blocks");
    assert_eq!(
        trace(&mut a),
        lines(
            "segment_map 0x0 41943040
             alloc 0x0 31457280
             segment_map 0x2800000 20971520
             alloc 0x1e00000 15728640
             free_requested 0x1e00000 15728640
             free_completed 0x1e00000 15728640
             segment_unmap 0x2800000 20971520
             snapshot 0x0 31457280"
        )
    );

    // Everything freed: all pages unmapped and the reservation released.
    a.free(p30).unwrap();
    a.empty_cache();
    assert_eq!(state(&a), "");
    assert_eq!(a.device().reservations(), 0);
    assert_eq!(a.device().used_bytes(), 0);
}

#[test]
fn small_pool_pages_are_2_mib() {
    let mut a = expandable(80 * GIB);
    let ps: Vec<_> = (0..5).map(|_| a.malloc(700 * KIB, S0).unwrap()).collect();
    // 5 x 700 KiB = 3500 KiB: two 2 MiB pages, mapped one at a time.
    assert_eq!(a.stats().reserved_bytes.small_pool.current, 4 * MIB as i64);
    assert_eq!(a.stats().num_device_alloc, 2);
    for p in ps {
        a.free(p).unwrap();
    }
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
}

#[test]
fn interior_free_blocks_are_preferred_over_the_frontier() {
    let mut a = expandable(80 * GIB);
    let x = a.malloc(25 * MIB, S0).unwrap(); // maps 40 MiB: [25 A | 15 I]
    let _y = a.malloc(15 * MIB, S0).unwrap(); // fills the rest: [25 A | 15 A]
    let z = a.malloc(30 * MIB, S0).unwrap(); // maps 40 more: [25 | 15 | 30 A | 10 I]
    a.free(x).unwrap(); // free 25 MiB inside
    // A 9 MiB request: best fit by plain size is the 10 MiB frontier block,
    // but its growable size counts the unmapped tail, so the interior 25 MiB
    // block is taken.
    let w = a.malloc(9 * MIB, S0).unwrap();
    assert_eq!(w, x);
    let _ = z;
}

#[test]
fn a_failed_map_leaves_earlier_maps_and_the_ladder_unmaps_them() {
    // Three 20 MiB pages x, y, z; y is freed and unmapped, leaving a hole;
    // then x and z are freed: [x free | hole | z free | unmapped tail].
    let mut a = expandable(80 * GIB);
    let [x, y, z] = [0; 3].map(|_| a.malloc(20 * MIB, S0).unwrap());
    a.free(y).unwrap();
    a.empty_cache();
    a.free(x).unwrap();
    a.free(z).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 20971520 stream 0: [20971520 I]\n@0x2800000 large 20971520 stream 0: [20971520 I]"));
    // 70 MiB with 70 MiB of device: mapping the hole fits (60 MiB mapped),
    // the tail page does not. The hole's map is not undone; the ladder's
    // release unmaps everything free, releases the reservation, and the
    // last try (a new reservation, 80 MiB) fails too.
    a.device_mut().set_capacity(70 * MIB);
    a.record_history(Some(HistoryConfig::default()));
    let err = a.malloc(70 * MIB, S0).unwrap_err();
    assert!(err.as_oom().is_some());
    assert_eq!(
        trace(&mut a),
        lines(
            "segment_map 0x1400000 20971520
             segment_unmap 0x0 62914560
             oom 0x4600000 73400320
             snapshot 0x0 0"
        )
    );
    assert_eq!(a.device().used_bytes(), 0);
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.stats().num_alloc_retries, 1);
}

#[test]
fn expandable_is_ignored_without_virtual_memory() {
    let mut a = allocator_on(SimDevice::new(80 * GIB).without_virtual_memory(), "expandable_segments:True");
    a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(a.stats().segment.all.current, 1);
    assert_eq!(state(&a), lines("@0x0 large 31457280 stream 0: [31457280 A(31457280)]"));
}

#[test]
fn turning_expandable_off_skips_expandable_blocks() {
    let mut a = expandable(80 * GIB);
    let p = a.malloc(30 * MIB, S0).unwrap();
    a.free(p).unwrap();
    a.update_settings("expandable_segments:False").unwrap();
    let q = a.malloc(5 * MIB, S0).unwrap();
    assert_ne!(q, p, "the expandable block is skipped");
    assert_eq!(a.stats().segment.all.current, 1);
    a.free(q).unwrap();
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.all.current, 0, "empty_cache still releases expandable memory");
}

#[test]
fn r24_targeted_release_of_an_expandable_block_is_pytorchs_internal_assert() {
    use vramkit_core::config::Compat;
    for (compat, crashes) in [(Compat::R26, false), (Compat::R24, true)] {
        let config = vramkit_core::AllocatorConfig::builder()
            .expandable_segments(true)
            .max_split_size_bytes(Some(40 * MIB))
            .compat(compat)
            .build()
            .unwrap();
        let mut a = vramkit_core::CachingAllocator::new(SimDevice::new(120 * MIB), config);
        let big = a.malloc(100 * MIB, S0).unwrap(); // maps 100 MiB: [100 A]
        let _pin = a.malloc(10 * MIB, S0).unwrap(); // maps 20 more: [100 A | 10 A | 10 I]
        a.free(big).unwrap(); // a free oversize expandable block, walled in by the pin
        // 30 MiB: the oversize block is refused (30 < 40 <= 100); mapping a
        // page after the 10 MiB tail exceeds 120 MiB; the targeted stage
        // looks for a cached block >= 40 MiB and meets the expandable one.
        let r = a.malloc(30 * MIB, S0);
        if crashes {
            let err = r.unwrap_err();
            assert!(err.to_string().contains("INTERNAL ASSERT FAILED"), "{err}");
        } else {
            // R26 skips it; the full release unmaps it and the retry maps anew.
            assert_eq!(r.unwrap(), big);
            assert_eq!(a.stats().num_alloc_retries, 1);
        }
    }
}

/// Torch 2.4's rules with expandable segments and a 40 MiB
/// `max_split_size_mb`: the targeted release meets PyTorch's assert.
fn r24_expandable_with_max_split() -> vramkit_core::AllocatorConfig {
    vramkit_core::AllocatorConfig::builder()
        .expandable_segments(true)
        .max_split_size_bytes(Some(40 * MIB))
        .compat(vramkit_core::config::Compat::R24)
        .build()
        .unwrap()
}

/// The history, without the snapshot entries `trace` adds.
fn history_entries(a: &mut vramkit_core::CachingAllocator<SimDevice>) -> String {
    trace(a).lines().filter(|l| !l.starts_with("snapshot")).collect::<Vec<_>>().join("\n")
}

/// Torch 2.4: a request whose first attempt reserves a new range, fails to
/// map it, and then dies at the targeted release's assert (GitHub #119452)
/// leaves that range reserved and unmapped, with no trace entry.
/// `leave_expandable_reservation` leaves the same state: `empty_cache()`
/// keeps the range (it holds no free block), and a later request maps at
/// its base.
#[test]
fn a_reservation_left_by_a_request_that_died_at_the_r24_assert() {
    let config = r24_expandable_with_max_split();
    // [100 I | 10 A | 10 I | 20 unmapped] in a 140 MiB reservation on a
    // 120 MiB device, all of it mapped.
    let setup = || {
        let mut a = vramkit_core::CachingAllocator::new(SimDevice::new(120 * MIB), config.clone());
        a.record_history(Some(HistoryConfig::default()));
        let big = a.malloc(100 * MIB, S0).unwrap();
        let pin = a.malloc(10 * MIB, S0).unwrap();
        a.free(big).unwrap();
        (a, pin)
    };
    // 60 MiB: the oversize block is too large for it (60 + 20 <= 100), the
    // reservation's free end has 30 MiB, so a new range is reserved; its
    // map is refused, and the targeted release meets the expandable block.
    let (mut died, died_pin) = setup();
    let err = died.malloc(60 * MIB, S0).unwrap_err();
    assert!(err.to_string().contains("INTERNAL ASSERT FAILED"), "{err}");
    assert_eq!(died.device().reservations(), 2, "the refused first attempt reserved a range");

    let (mut left, left_pin) = setup();
    let trace_before = history_entries(&mut left);
    let base = left.leave_expandable_reservation(60 * MIB, S0).unwrap();
    left.check_invariants().unwrap();
    assert_eq!(history_entries(&mut left), trace_before, "no trace entry");
    assert_eq!(left.device().reservations(), 2);
    assert_eq!(state(&left), state(&died));
    assert_eq!(stats(&left), stats(&died));

    for (a, pin) in [(&mut died, died_pin), (&mut left, left_pin)] {
        a.free(pin).unwrap();
        a.empty_cache();
        assert_eq!(a.device().reservations(), 1, "the first range is released, the unmapped one kept");
        let p = a.malloc(60 * MIB, S0).unwrap();
        assert_eq!(p, base, "mapped at the kept range's base");
        assert_eq!(a.device().counters().reserves, 2, "no new range");
        a.check_invariants().unwrap();
    }
    assert_eq!(state(&left), state(&died));
}

#[test]
fn no_reservation_is_left_where_the_pool_grows_no_expandable_segments() {
    let mut a = allocator_on(SimDevice::new(GIB), "");
    assert!(a.leave_expandable_reservation(60 * MIB, S0).is_err());
    assert_eq!(a.device().reservations(), 0);
}

/// Torch 2.4: a first attempt that maps an unmapped stretch before a free
/// block, then fails to map the next, and whose request then dies at the
/// targeted release's assert (no single cached block is large enough, and
/// the largest oversize one is expandable) leaves those pages mapped, with
/// only the `segment_map` recorded. `map_left_by_failed_request` maps them
/// the same way.
#[test]
fn pages_mapped_by_a_request_that_died_at_the_r24_assert() {
    let config = r24_expandable_with_max_split();
    // [40 unmapped | 40 I | 20 unmapped] in a 100 MiB reservation on an
    // 80 MiB device.
    let setup = || {
        let mut a = vramkit_core::CachingAllocator::new(SimDevice::new(80 * MIB), config.clone());
        a.record_history(Some(HistoryConfig::default()));
        let p1 = a.malloc(40 * MIB, S0).unwrap();
        let p2 = a.malloc(40 * MIB, S0).unwrap();
        a.free(p1).unwrap();
        a.empty_cache();
        a.free(p2).unwrap();
        (a, p1)
    };
    // 90 MiB: the hole, the free block and the tail have room; the hole is
    // mapped (merging with the free block: 80 MiB), the tail's page is
    // refused, and the targeted release meets the 80 MiB expandable block.
    let (mut died, base) = setup();
    let err = died.malloc(90 * MIB, S0).unwrap_err();
    assert!(err.to_string().contains("INTERNAL ASSERT FAILED"), "{err}");
    let died_trace = history_entries(&mut died);
    assert!(died_trace.ends_with("segment_map 0x0 41943040"), "{died_trace}");

    let (mut left, _) = setup();
    assert!(left.map_left_by_failed_request(base, 40 * MIB, S0).unwrap());
    left.check_invariants().unwrap();
    assert_eq!(history_entries(&mut left), died_trace);
    assert_eq!(state(&left), state(&died));
    assert_eq!(stats(&left), stats(&died));
    // Only where an unmapped block starts.
    assert!(left.map_left_by_failed_request(base, 20 * MIB, S0).is_err());

    for a in [&mut died, &mut left] {
        assert_eq!(a.malloc(70 * MIB, S0).unwrap(), base, "the mapped pages serve a later request");
        a.check_invariants().unwrap();
    }
    assert_eq!(state(&left), state(&died));
}

//! The worked examples of spec section 13.1 and the retry ladder, with the
//! whole state and the whole set of current statistics asserted at each step.

use crate::support::*;
use vramkit_core::{CachingAllocator, DeviceAddr, HistoryConfig, PytorchRelease, Stat, StreamFilter, StreamId};
use vramkit_sim::{EventMode, SimDevice};

#[test]
fn example_a_small_pool_split_and_merge() {
    let mut a = allocator("");
    a.record_history(Some(HistoryConfig::default()));

    let p1 = a.malloc(1000, S0).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [1024 A(1000) | 2096128 I]"));
    assert_eq!(
        stats(&a),
        lines(
            "active.all.current=1
             active.small_pool.current=1
             active_bytes.all.current=1024
             active_bytes.small_pool.current=1024
             allocated_bytes.all.current=1024
             allocated_bytes.small_pool.current=1024
             allocation.all.current=1
             allocation.small_pool.current=1
             inactive_split.all.current=1
             inactive_split.small_pool.current=1
             inactive_split_bytes.all.current=2096128
             inactive_split_bytes.small_pool.current=2096128
             max_split_size=-1
             num_device_alloc=1
             requested_bytes.all.current=1000
             requested_bytes.small_pool.current=1000
             reserved_bytes.all.current=2097152
             reserved_bytes.small_pool.current=2097152
             segment.all.current=1
             segment.small_pool.current=1"
        )
    );

    let p2 = a.malloc(3000, S0).unwrap();
    assert_eq!(p2, DeviceAddr(p1.0 + 1024));
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [1024 A(1000) | 3072 A(3000) | 2093056 I]"));
    assert_eq!(a.stats().inactive_split.all.current, 1);
    assert_eq!(a.stats().inactive_split_bytes.all.current, 2_093_056);

    a.free(p1).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [1024 I | 3072 A(3000) | 2093056 I]"));
    assert_eq!(a.stats().inactive_split.all.current, 2);
    assert_eq!(a.stats().inactive_split_bytes.all.current, 2_094_080);

    a.free(p2).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [2097152 I]"));
    assert_eq!(
        stats(&a),
        lines(
            "max_split_size=-1
             num_device_alloc=1
             reserved_bytes.all.current=2097152
             reserved_bytes.small_pool.current=2097152
             segment.all.current=1
             segment.small_pool.current=1"
        )
    );

    a.empty_cache();
    assert_eq!(state(&a), "");
    assert_eq!(stats(&a), lines("max_split_size=-1\nnum_device_alloc=1\nnum_device_free=1\nnum_sync_all_streams=1"));
    assert_eq!(
        trace(&mut a),
        lines(
            "segment_alloc 0x0 2097152
             alloc 0x0 1000
             alloc 0x400 3000
             free_requested 0x0 1000
             free_completed 0x0 1000
             free_requested 0x400 3000
             free_completed 0x400 3000
             segment_free 0x0 2097152
             snapshot 0x0 0"
        )
    );
    // Peaks and totals outlive the frees.
    assert_eq!(a.stats().allocated_bytes.all.peak, 4096);
    assert_eq!(a.stats().allocated_bytes.all.allocated, 4096);
    assert_eq!(a.stats().allocated_bytes.all.freed, 4096);
    assert_eq!(a.stats().requested_bytes.small_pool.peak, 4000);
}

#[test]
fn example_b_large_pool() {
    let mut a = allocator("");
    let p5 = a.malloc(5 * MIB, S0).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 20971520 stream 0: [5242880 A(5242880) | 15728640 I]"));
    let p16 = a.malloc(16 * MIB, S0).unwrap();
    assert_eq!(
        state(&a),
        lines(
            "@0x0 large 20971520 stream 0: [5242880 A(5242880) | 15728640 I]
             @0x1400000 large 16777216 stream 0: [16777216 A(16777216)]"
        )
    );
    a.free(p5).unwrap();
    assert_eq!(a.stats().inactive_split.all.current, 0);
    let p15 = a.malloc(3 * MIB / 2, S0).unwrap();
    assert_eq!(p15, p5);
    assert_eq!(
        state(&a),
        lines(
            "@0x0 large 20971520 stream 0: [1572864 A(1572864) | 19398656 I]
             @0x1400000 large 16777216 stream 0: [16777216 A(16777216)]"
        )
    );
    assert_eq!(
        stats(&a),
        lines(
            "active.all.current=2
             active.large_pool.current=2
             active_bytes.all.current=18350080
             active_bytes.large_pool.current=18350080
             allocated_bytes.all.current=18350080
             allocated_bytes.large_pool.current=18350080
             allocation.all.current=2
             allocation.large_pool.current=2
             inactive_split.all.current=1
             inactive_split.large_pool.current=1
             inactive_split_bytes.all.current=19398656
             inactive_split_bytes.large_pool.current=19398656
             max_split_size=-1
             num_device_alloc=2
             requested_bytes.all.current=18350080
             requested_bytes.large_pool.current=18350080
             reserved_bytes.all.current=37748736
             reserved_bytes.large_pool.current=37748736
             segment.all.current=2
             segment.large_pool.current=2"
        )
    );
    a.free(p15).unwrap();
    a.free(p16).unwrap();

    // Step 5, in a fresh process: the remainder is exactly 1 MiB, so not split.
    let mut fresh = allocator("");
    fresh.malloc(19 * MIB, S0).unwrap();
    assert_eq!(state(&fresh), lines("@0x0 large 20971520 stream 0: [20971520 A(19922944)]"));
    assert_eq!(fresh.stats().allocated_bytes.all.current, 20 * MIB as i64);
    assert_eq!(fresh.stats().requested_bytes.all.current, 19 * MIB as i64);
    assert_eq!(fresh.stats().inactive_split.all.current, 0);
}

#[test]
fn split_rule_examples_of_section_3_3() {
    let mut a = allocator("");
    a.malloc(15 * MIB, S0).unwrap();
    a.malloc(21 * MIB / 2, S0).unwrap();
    assert_eq!(
        state(&a),
        lines(
            "@0x0 large 16777216 stream 0: [16777216 A(15728640)]
             @0x1000000 large 12582912 stream 0: [11010048 A(11010048) | 1572864 I]"
        )
    );
}

#[test]
fn example_c_max_split_size() {
    let mut a = allocator("max_split_size_mb:100");
    assert_eq!(a.stats().max_split_size, 100 * MIB as i64);
    let p150 = a.malloc(150 * MIB, S0).unwrap();
    assert_eq!(a.stats().oversize_segments.current, 1);
    assert_eq!(a.stats().oversize_allocations.current, 1);
    a.free(p150).unwrap();
    assert_eq!(a.stats().oversize_allocations.current, 0);

    // A 50 MiB request may not use the cached 150 MiB oversize block.
    let p50 = a.malloc(50 * MIB, S0).unwrap();
    assert_ne!(p50, p150);
    assert_eq!(
        state(&a),
        lines(
            "@0x0 large 157286400 stream 0: [157286400 I]
             @0x9600000 large 52428800 stream 0: [52428800 A(52428800)]"
        )
    );
    // 140 MiB may: 150 < 140 + 20. It is handed out whole, not split.
    let p140 = a.malloc(140 * MIB, S0).unwrap();
    assert_eq!(p140, p150);
    assert_eq!(a.stats().allocated_bytes.all.current, (150 + 50) * MIB as i64);
    a.free(p140).unwrap();
    // 120 MiB may not: 150 >= 120 + 20. New segment.
    let p120 = a.malloc(120 * MIB, S0).unwrap();
    assert_ne!(p120, p150);
    assert_eq!(
        stats(&a),
        lines(
            "active.all.current=2
             active.large_pool.current=2
             active_bytes.all.current=178257920
             active_bytes.large_pool.current=178257920
             allocated_bytes.all.current=178257920
             allocated_bytes.large_pool.current=178257920
             allocation.all.current=2
             allocation.large_pool.current=2
             max_split_size=104857600
             num_device_alloc=3
             oversize_allocations.current=1
             oversize_segments.current=2
             requested_bytes.all.current=178257920
             requested_bytes.large_pool.current=178257920
             reserved_bytes.all.current=335544320
             reserved_bytes.large_pool.current=335544320
             segment.all.current=3
             segment.large_pool.current=3"
        )
    );
    assert_eq!(
        state(&a),
        lines(
            "@0x0 large 157286400 stream 0: [157286400 I]
             @0x9600000 large 52428800 stream 0: [52428800 A(52428800)]
             @0xc800000 large 125829120 stream 0: [125829120 A(125829120)]"
        )
    );
}

#[test]
fn example_c4_targeted_release_frees_the_smallest_big_enough_oversize_block() {
    // Device of 400 MiB: segments of 150 and 200 MiB cached, 50 MiB live.
    let mut a = allocator_on(SimDevice::new(400 * MIB), "max_split_size_mb:100");
    let b150 = a.malloc(150 * MIB, S0).unwrap();
    let b200 = a.malloc(200 * MIB, S0).unwrap();
    let live = a.malloc(30 * MIB, S0).unwrap();
    a.free(b150).unwrap();
    a.free(b200).unwrap();
    a.record_history(Some(HistoryConfig::default()));
    // 120 MiB: no cached block fits (150 >= 120+20, 200 too). cudaMalloc of
    // 120 MiB fails (400 - 380 = 20 free). Targeted release: the smallest
    // oversize block >= max(120, 100) is the 150 MiB one. Retry succeeds.
    let p = a.malloc(120 * MIB, S0).unwrap();
    assert_eq!(
        trace(&mut a).replace(&format!("{:#x}", p.0 - SimDevice::DEFAULT_BASE), "NEW"),
        lines(
            "segment_free 0x0 157286400
             segment_alloc NEW 125829120
             alloc NEW 125829120
             snapshot 0x0 157286400"
        )
    );
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().num_sync_all_streams, 0);
    assert_eq!(a.stats().segment.all.current, 3);
    a.free(live).unwrap();
}

#[test]
fn targeted_release_walks_down_from_the_largest_oversize_block() {
    // Cached oversize blocks of 110, 120 and 130 MiB; a 300 MiB request with
    // only 120 MiB of device left frees 130 then 120 (250 < 300), then 110
    // (360 >= 300) and retries.
    let mut a = allocator_on(SimDevice::new(480 * MIB), "max_split_size_mb:100");
    let ps: Vec<_> = [110, 120, 130].iter().map(|&m| a.malloc(m * MIB, S0).unwrap()).collect();
    for p in ps {
        a.free(p).unwrap();
    }
    a.record_history(Some(HistoryConfig::default()));
    a.malloc(300 * MIB, S0).unwrap();
    let t = trace(&mut a);
    let frees: Vec<&str> = t.lines().filter(|l| l.starts_with("segment_free")).collect();
    assert_eq!(frees, vec!["segment_free 0xe600000 136314880", "segment_free 0x6e00000 125829120", "segment_free 0x0 115343360"]);
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().num_sync_all_streams, 0);
}

#[test]
fn full_release_and_last_retry_count_a_retry_and_a_sync() {
    // Default settings: the targeted stage is inert, so a refused cudaMalloc
    // goes straight to releasing everything and one last retry.
    let mut a = allocator_on(SimDevice::new(60 * MIB), "");
    let p = a.malloc(40 * MIB, S0).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(50 * MIB, S0).unwrap();
    assert_eq!(q.0, p.0 + 40 * MIB);
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert_eq!(a.stats().num_sync_all_streams, 1);
    assert_eq!(a.stats().num_device_free, 1);
    assert_eq!(a.stats().num_ooms, 0);
    assert_eq!(state(&a), lines("@0x2800000 large 52428800 stream 0: [52428800 A(52428800)]"));
}

#[test]
fn oom_counts_a_retry_and_an_oom_and_records_an_oom_entry() {
    let mut a = allocator_on(SimDevice::new(100 * MIB), "");
    a.record_history(Some(HistoryConfig::default()));
    let keep = a.malloc(70 * MIB, S0).unwrap();
    let err = a.malloc(40 * MIB, S0).unwrap_err();
    let oom = err.as_oom().expect("an out-of-memory error");
    assert_eq!(oom.alloc_size_bytes, 40 * MIB);
    assert_eq!(oom.device_free_bytes, 30 * MIB);
    assert_eq!(oom.total_capacity_bytes, 100 * MIB);
    assert_eq!(oom.allocated_bytes, 70 * MIB);
    assert_eq!(oom.reserved_bytes, 70 * MIB);
    assert_eq!(a.stats().num_ooms, 1);
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert_eq!(a.stats().num_sync_all_streams, 1);
    assert_eq!(
        trace(&mut a),
        lines(
            "segment_alloc 0x0 73400320
             alloc 0x0 73400320
             oom 0x1e00000 41943040
             snapshot 0x0 73400320"
        )
    );
    assert!(oom.to_string().starts_with(
        "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which 30.00 MiB is free. Including non-PyTorch memory, this process has 70.00 MiB memory in use. Of the allocated memory 70.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    ));
    a.free(keep).unwrap();
    // Memory returns: the same request now succeeds.
    assert!(a.malloc(40 * MIB, S0).is_ok());
}

#[test]
fn fragmentation_oom_is_diagnosed() {
    // Two 20 MiB segments, each with a 1.5 MiB block pinned at its start:
    // 37 MiB free in the cache, but no block of 20 MiB, and no device memory left.
    let mut a = allocator_on(SimDevice::new(40 * MIB), "");
    let pin1 = a.malloc(3 * MIB / 2, S0).unwrap();
    let filler = a.malloc(37 * MIB / 2, S0).unwrap();
    let pin2 = a.malloc(3 * MIB / 2, S0).unwrap();
    assert_eq!(a.stats().segment.all.current, 2);
    a.free(filler).unwrap();
    let err = a.malloc(20 * MIB, S0).unwrap_err();
    let oom = err.as_oom().unwrap();
    let d = oom.diagnosis.as_ref().unwrap();
    assert!(d.fragmentation);
    assert_eq!(d.free_cached_bytes, 2 * (20 * MIB - 3 * MIB / 2));
    assert_eq!(d.free_cached_blocks, 2);
    assert_eq!(d.largest_free_block_bytes, 20 * MIB - 3 * MIB / 2);
    assert!(oom.to_string().contains("fragmentation OOM"), "{oom}");
    a.free(pin1).unwrap();
    a.free(pin2).unwrap();
}

#[test]
fn oom_diagnosis_finds_that_removing_the_fraction_limit_fits() {
    let mut a = allocator_on(SimDevice::new(100 * MIB), "per_process_memory_fraction:0.5");
    assert_eq!(a.memory_limit_bytes(), Some(50 * MIB));
    a.malloc(30 * MIB, S0).unwrap();
    let err = a.malloc(30 * MIB, S0).unwrap_err();
    let oom = err.as_oom().unwrap();
    assert_eq!(oom.limit_bytes, Some(50 * MIB));
    let d = oom.diagnosis.as_ref().unwrap();
    assert_eq!(d.settings_that_fit, vec!["per_process_memory_fraction:1.0".to_string()]);
    assert!(oom.to_string().contains("50.00 MiB allowed; "));
    // The what-if left the allocator untouched.
    assert_eq!(a.stats().segment.all.current, 1);
}

#[test]
fn one_exabyte_request_fails_at_once() {
    let mut a = allocator("");
    let err = a.malloc(1 << 60, S0).unwrap_err();
    assert_eq!(err.to_string(), "CUDA out of memory. Tried to allocate more than 1EB memory.");
    assert_eq!(a.stats().num_ooms, 0);
    assert_eq!(a.device().counters().mallocs, 0);
}

#[test]
fn device_errors_other_than_oom_are_raised_at_once() {
    // SimDevice only refuses with OutOfMemory, so this checks the OOM path
    // is the one that retries: two refusals are absorbed by the ladder.
    let mut a = allocator("");
    a.device_mut().fail_next_mallocs(1);
    assert!(a.malloc(MIB, S0).is_ok());
    assert_eq!(a.stats().num_alloc_retries, 1);
    a.device_mut().fail_next_mallocs(2);
    assert!(a.malloc(4 * MIB, S0).is_err());
    assert_eq!(a.stats().num_alloc_retries, 2);
    assert_eq!(a.stats().num_ooms, 1);
    assert_eq!(a.device().counters().failed_mallocs, 3);
}

#[test]
fn zero_byte_requests_touch_nothing() {
    let mut a = allocator("");
    assert_eq!(a.malloc(0, S0).unwrap(), DeviceAddr(0));
    a.free(DeviceAddr(0)).unwrap();
    assert_eq!(stats(&a), lines("max_split_size=-1"));
}

#[test]
fn unknown_and_double_frees_are_errors_that_change_nothing() {
    let mut a = allocator("");
    let p = a.malloc(512, S0).unwrap();
    a.free(p).unwrap();
    let before = stats(&a);
    let err = a.free(p).unwrap_err();
    assert!(err.to_string().contains("was not allocated by this allocator, or was already freed"));
    assert!(a.free(DeviceAddr(12345)).is_err());
    assert_eq!(stats(&a), before);
}

#[test]
fn blocks_are_pooled_per_stream() {
    let mut a = allocator("");
    let p = a.malloc(1000, StreamId(7)).unwrap();
    a.free(p).unwrap();
    // A request on another stream does not see stream 7's cached block.
    let q = a.malloc(1000, StreamId(8)).unwrap();
    assert_eq!(q.0, p.0 + 2 * MIB);
    assert_eq!(
        state(&a),
        lines(
            "@0x0 small 2097152 stream 7: [2097152 I]
             @0x200000 small 2097152 stream 8: [1024 A(1000) | 2096128 I]"
        )
    );
}

#[test]
fn record_stream_holds_the_block_until_its_event_completes() {
    let mut a = allocator_on(SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
    a.record_history(Some(HistoryConfig::default()));
    let side = StreamId(99);
    let p = a.malloc(4096, S0).unwrap();
    a.record_stream(p, side).unwrap();
    a.record_stream(p, S0).unwrap(); // own stream: ignored
    a.free(p).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [4096 P | 2093056 I]"));
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    assert_eq!(a.stats().active_bytes.all.current, 4096);
    assert_eq!(a.stats().requested_bytes.all.current, 4096);
    assert_eq!(a.stats().inactive_split.all.current, 1);

    // Not reusable while the event is pending: the next request lands after it.
    let q = a.malloc(4096, S0).unwrap();
    assert_eq!(q.0, p.0 + 4096);
    a.free(q).unwrap();

    a.device_mut().complete_stream(side);
    // The next malloc processes events first and reuses the block.
    let r = a.malloc(4096, S0).unwrap();
    assert_eq!(r, p);
    let t = trace(&mut a);
    let tail: Vec<&str> = t.lines().skip(6).collect();
    assert_eq!(tail, vec!["free_completed 0x0 4096", "alloc 0x0 4096", "snapshot 0x0 4096"]);
    assert_eq!(a.device().pending_events(), 0);
}

#[test]
fn empty_cache_waits_for_pending_events() {
    let mut a = allocator_on(SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
    let p = a.malloc(4096, S0).unwrap();
    a.record_stream(p, StreamId(5)).unwrap();
    a.free(p).unwrap();
    assert_eq!(a.stats().segment.all.current, 1);
    a.empty_cache();
    assert_eq!(state(&a), "");
    assert_eq!(a.device().counters().event_syncs, 1);
    assert_eq!(a.stats().num_sync_all_streams, 1);
}

#[test]
fn roundup_power2_divisions_round_requests() {
    let mut a = allocator("roundup_power2_divisions:4");
    a.malloc(5_000_000, S0).unwrap();
    assert_eq!(a.stats().allocated_bytes.all.current, 5_242_880);
    assert_eq!(a.stats().requested_bytes.all.current, 5_000_000);
}

#[test]
fn garbage_collection_frees_old_whole_segments_before_growing() {
    // Limit 100 MiB, threshold 0.5: reserved above 50 MiB triggers GC when a
    // request misses the cache.
    let mut a = allocator_on(SimDevice::new(100 * MIB), "garbage_collection_threshold:0.5,per_process_memory_fraction:1.0");
    a.set_memory_fraction(1.0).unwrap(); // R26: no limit at 1.0, so GC stays off
    let p = a.malloc(40 * MIB, S0).unwrap();
    let q = a.malloc(30 * MIB, S0).unwrap();
    a.free(p).unwrap();
    a.free(q).unwrap();
    a.malloc(24 * MIB, S0).unwrap();
    assert_eq!(a.stats().num_device_free, 0, "without a fraction limit GC never runs");

    let mut g = allocator_on(SimDevice::new(100 * MIB), "garbage_collection_threshold:0.5,per_process_memory_fraction:0.99");
    let p = g.malloc(40 * MIB, S0).unwrap();
    let q = g.malloc(30 * MIB, S0).unwrap();
    g.free(p).unwrap();
    g.free(q).unwrap();
    // Cached: 40 and 30 MiB, 70 MiB reserved > 49.5 MiB threshold. A 50 MiB
    // request misses; GC frees both whole segments (equal age) before
    // growing.
    g.malloc(50 * MIB, S0).unwrap();
    assert_eq!(g.stats().num_device_free, 2);
    assert_eq!(g.stats().num_alloc_retries, 0);
    assert_eq!(state(&g), lines("@0x4600000 large 52428800 stream 0: [52428800 A(52428800)]"));
}

#[test]
fn memory_fraction_caps_growth() {
    let mut a = allocator_on(SimDevice::new(100 * MIB), "");
    a.set_memory_fraction(0.25).unwrap();
    assert!(a.malloc(20 * MIB, S0).is_ok());
    assert!(a.malloc(6 * MIB, S0).is_err(), "20 MiB + a 20 MiB segment exceeds 25 MiB");
    assert!(a.set_memory_fraction(1.5).is_err());
}

#[test]
fn reset_peak_and_accumulated_stats() {
    let mut a = allocator("");
    let p = a.malloc(MIB, S0).unwrap();
    a.free(p).unwrap();
    a.empty_cache();
    a.reset_peak_stats();
    assert_eq!(a.stats().reserved_bytes.all.peak, 0);
    assert_eq!(a.stats().reserved_bytes.all.allocated, 2 * MIB as i64);
    a.reset_accumulated_stats();
    assert_eq!(a.stats().reserved_bytes.all.allocated, 0);
    assert_eq!(a.stats().num_device_alloc, 0);
    assert_eq!(a.stats().num_sync_all_streams, 0);
}

#[test]
fn memory_stats_has_every_pytorch_key() {
    let a = allocator("");
    let keys = a.memory_stats();
    assert_eq!(keys.len(), 123);
    assert!(keys.contains_key("num_oom_rejections"));
    assert!(keys.contains_key("allocation.all.current"));
    assert!(keys.contains_key("inactive_split_bytes.large_pool.freed"));
    assert!(keys.contains_key("oversize_segments.peak"));
    assert!(keys.contains_key("num_device_free"));
    assert_eq!(keys["max_split_size"], -1);
}

#[test]
fn history_ring_buffer_keeps_the_newest_entries() {
    let mut a = allocator("");
    a.record_history(Some(HistoryConfig { max_entries: 3, ..HistoryConfig::default() }));
    let p = a.malloc(512, S0).unwrap();
    a.free(p).unwrap();
    assert_eq!(trace(&mut a), lines("free_requested 0x0 512\nfree_completed 0x0 512\nsnapshot 0x0 0"));
}

#[test]
fn snapshot_carries_stacks_of_live_blocks() {
    use std::sync::Arc;
    use vramkit_core::Frame;
    let mut a = allocator("");
    a.record_history(Some(HistoryConfig::default()));
    let frames: vramkit_core::Frames = Arc::from(vec![Frame { filename: "train.py".into(), line: 42, name: "forward".into() }]);
    let p = a.malloc_with_context(1000, S0, Some(frames.clone())).unwrap();
    let snap = a.snapshot();
    assert_eq!(snap.segments[0].blocks[0].frames.as_deref(), Some(&*frames));
    assert_eq!(snap.segments[0].blocks[1].frames, None);
    let alloc_entry = snap.device_traces[0].iter().find(|e| e.action == vramkit_core::TraceAction::Alloc).unwrap();
    assert_eq!(alloc_entry.frames.as_deref(), Some(&*frames));
    a.free(p).unwrap();
}

#[test]
fn update_settings_changes_only_named_keys_and_keeps_stats_max_split() {
    let mut a = allocator("max_split_size_mb:200,roundup_power2_divisions:4");
    a.update_settings("garbage_collection_threshold:0.7").unwrap();
    assert_eq!(a.config().max_split_size_bytes, Some(200 * MIB));
    assert_eq!(a.config().roundup_power2_divisions, [4; 16]);
    assert_eq!(a.config().garbage_collection_threshold, 0.7);
    a.set_max_split_size(None).unwrap();
    assert_eq!(a.stats().max_split_size, 200 * MIB as i64, "captured at construction, as in PyTorch");
}

#[test]
fn free_requested_holds_the_block_until_free_completed() {
    let mut a = allocator("");
    let p = a.malloc(4096, S0).unwrap();
    a.free_requested(p).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [4096 P | 2093056 I]"));
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    assert_eq!(a.stats().active_bytes.all.current, 4096);
    let q = a.malloc(4096, S0).unwrap();
    assert_eq!(q.0, p.0 + 4096, "a held block is not reused");
    a.free_completed(p).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [4096 I | 4096 A(4096) | 2088960 I]"));
    assert!(a.free_completed(p).is_err());
    a.free(q).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [2097152 I]"));
}

#[test]
fn restore_rebuilds_a_state_that_behaves_the_same() {
    // Build some state, restore it on a fresh device, then drive both the
    // same way: every address and statistic must agree.
    let mut a = allocator("");
    let mut live = Vec::new();
    for (i, size) in [1000u64, 5 * MIB, 3000, 12 * MIB, 700 * KIB, 30 * MIB, 512].into_iter().enumerate() {
        let p = a.malloc(size, S0).unwrap();
        if i % 2 == 0 {
            a.free(p).unwrap();
        } else {
            live.push(p);
        }
    }
    let held = a.malloc(2 * MIB, S0).unwrap();
    a.free_requested(held).unwrap();

    let mut device = SimDevice::unlimited();
    for s in a.segments() {
        device.adopt(s.address, s.total_size);
    }
    let mut b = vramkit_core::CachingAllocator::restore(device, a.config().clone(), &a.segments()).unwrap();
    assert_eq!(state(&b), state(&a));
    // The restored allocator made no device calls itself.
    let without_calls = |s: String| s.lines().filter(|l| !l.starts_with("num_device_alloc")).collect::<Vec<_>>().join("\n");
    assert_eq!(without_calls(stats(&b)), without_calls(stats(&a)));
    b.check_invariants().unwrap();

    a.free_completed(held).unwrap();
    b.free_completed(held).unwrap();
    for size in [100 * KIB, 3 * MIB, 40 * MIB, 512, 8 * MIB] {
        assert_eq!(a.malloc(size, S0).unwrap(), b.malloc(size, S0).unwrap());
    }
    for p in live {
        a.free(p).unwrap();
        b.free(p).unwrap();
    }
    assert_eq!(state(&b), state(&a));
}

#[test]
fn restore_refuses_inconsistent_segments() {
    let mut a = allocator("");
    a.malloc(1000, S0).unwrap();
    let mut segs = a.segments();
    segs[0].total_size += 512;
    let err = vramkit_core::CachingAllocator::restore(SimDevice::unlimited(), a.config().clone(), &segs).unwrap_err();
    assert!(err.to_string().contains("add up to"), "{err}");
}

#[test]
fn the_last_retry_does_not_search_the_blocks_its_synchronisation_freed() {
    // A 40 MiB block waits on another stream's work; a 30 MiB request is
    // refused by the device, so the ladder synchronises (freeing the block)
    // and releases whole free segments. The held block's segment is not
    // whole (a live block follows it), so nothing is released, and the
    // last retry asks only the device: out of memory, though the cache now
    // holds a block that fits (spec 3.1, PyTorch's `malloc`).
    let mut a = allocator_on(SimDevice::new(64 * MIB).with_event_mode(EventMode::Manual), "");
    let whole = a.malloc(60 * MIB, S0).unwrap();
    a.free(whole).unwrap();
    let held = a.malloc(40 * MIB, S0).unwrap();
    let _pin = a.malloc(20 * MIB, S0).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 62914560 stream 0: [41943040 A(41943040) | 20971520 A(20971520)]"));
    a.record_stream(held, StreamId(9)).unwrap();
    a.free(held).unwrap();
    assert!(!a.fits_in_cache(30 * MIB, S0));
    assert!(a.after_empty_cache().fits_in_cache(30 * MIB, S0), "empty_cache() synchronises first");
    assert!(a.malloc(30 * MIB, S0).is_err());
    // Now the block is free: the same request is served from the cache.
    assert_eq!(a.malloc(30 * MIB, S0).unwrap(), held);
}

#[test]
fn what_if_queries_change_nothing() {
    let mut a = allocator("");
    let whole = a.malloc(40 * MIB, S0).unwrap();
    a.free(whole).unwrap();
    let p = a.malloc(30 * MIB, S0).unwrap();
    let small = a.malloc(4 * KIB, S0).unwrap();
    let before = state(&a);
    // Freeing p merges it with the free 10 MiB after it: 40 MiB at p.
    assert!(!a.fits_in_cache(35 * MIB, S0));
    assert!(a.fits_in_cache_after_free(p, 35 * MIB, S0));
    assert!(!a.fits_in_cache_after_free(p, 41 * MIB, S0));
    // Another stream or another pool never uses the block.
    assert!(!a.fits_in_cache_after_free(p, 35 * MIB, StreamId(1)));
    assert!(!a.fits_in_cache_after_free(small, 35 * MIB, S0));
    // Not allocated: no.
    assert!(!a.fits_in_cache_after_free(DeviceAddr(p.0 + 1), 1, S0));
    // empty_cache() keeps segments with live blocks.
    let after = a.after_empty_cache();
    assert!(after.released().is_empty());
    assert!(!after.fits_in_cache(35 * MIB, S0));
    assert_eq!(after.cache_address(35 * MIB, S0), None);
    assert_eq!(after.cache_address(5 * MIB, S0), Some(DeviceAddr(p.0 + 30 * MIB)));
    assert_eq!(state(&a), before);
    assert_ne!(a.malloc(35 * MIB, S0).unwrap(), p, "p is still allocated: a new segment");
}

/// Two free blocks of one size, the older segment at the higher address
/// (as after `empty_cache()`, when the device hands a new segment a lower
/// address): torch 2.13 and later take the older segment's block
/// (`BlockComparatorSizeCounterAddress`), 2.12 the older block
/// (`BlockComparatorRegistrationCounter`), earlier releases the lower address.
#[test]
fn equal_size_free_blocks_come_from_the_older_segment_from_2_13() {
    use vramkit_core::{AllocatorConfig, CachingAllocator, PytorchRelease};
    let run = |release: PytorchRelease| {
        let mut device = SimDevice::unlimited();
        device.push_address(0x2000_0000);
        device.push_address(0x1000_0000);
        let config = AllocatorConfig { compat: release.compat(), ..AllocatorConfig::default() };
        let mut a = CachingAllocator::new(device, config);
        let older = a.malloc(20 * MIB, S0).unwrap();
        let newer = a.malloc(20 * MIB, S0).unwrap();
        assert_eq!((older, newer), (DeviceAddr(0x2000_0000), DeviceAddr(0x1000_0000)));
        a.free(older).unwrap();
        a.free(newer).unwrap();
        let again = a.malloc(20 * MIB, S0).unwrap();
        a.check_invariants().unwrap();
        again
    };
    assert_eq!(run(PytorchRelease::new(2, 11)), DeviceAddr(0x1000_0000));
    assert_eq!(run(PytorchRelease::new(2, 12)), DeviceAddr(0x2000_0000));
    assert_eq!(run(PytorchRelease::new(2, 13)), DeviceAddr(0x2000_0000));
    assert_eq!(run(PytorchRelease::NEWEST), DeviceAddr(0x2000_0000));
}

// --- measured on PyTorch's own allocator -----------------------------------------
// Each expectation below is what the release's libc10_cuda.so did with the same
// calls on the fake CUDA runtime (crates/vramkit-pytorch), with record_stream
// reaching the allocator.

/// The first two streams `getStreamFromPool` hands out on the fake runtime.
const POOL_STREAM_1: StreamId = StreamId(0x1010);
const POOL_STREAM_2: StreamId = StreamId(0x1050);

/// The message of the out-of-memory error `malloc(size)` raises, worded as `release` words it.
fn oom_text(a: &mut CachingAllocator<SimDevice>, size: u64, release: &str) -> String {
    let err = a.malloc(size, S0).unwrap_err();
    err.as_oom().expect("an out-of-memory error").pytorch_message_as(PytorchRelease::parse(release).unwrap().message_style())
}

#[test]
fn torch_2_4_leaves_the_fraction_limit_out_of_its_oom_message() {
    for (release, allowed, url) in [
        ("2.4", "", "https://pytorch.org/docs/stable/notes/cuda.html#environment-variables"),
        ("2.6", "50.00 MiB allowed; ", "https://pytorch.org/docs/stable/notes/cuda.html#environment-variables"),
    ] {
        let mut a = allocator_as(release, SimDevice::new(100 * MIB), "");
        a.set_memory_fraction(0.5).unwrap();
        a.malloc(30 * MIB, S0).unwrap();
        assert_eq!(
            oom_text(&mut a, 30 * MIB, release),
            format!(
                "CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which 70.00 MiB is \
                 free. Including non-PyTorch memory, this process has 30.00 MiB memory in use. {allowed}Of the allocated memory \
                 30.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but \
                 unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid \
                 fragmentation.  See documentation for Memory Management  ({url})"
            ),
            "torch {release}"
        );
    }
}

#[test]
fn torch_2_15_ends_its_oom_message_with_an_address_space_note_under_expandable_segments() {
    let head = "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which 20.00 MiB \
                is free. Including non-PyTorch memory, this process has 80.00 MiB memory in use. Of the allocated memory 70.00 \
                MiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.";
    let hint = " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to \
                avoid fragmentation.  See documentation for Memory Management  \
                (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
    let note = " expandable_segments is enabled. If instead the process is running out of virtual address space (VSZ), \
                expandable segments may be over-reserving VA (each segment reserves ~9/8 of device memory, times the number \
                of streams); reduce it via PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve / \
                expandable_segments_reserve_by_class.";
    for (release, tail) in [("2.13", hint), ("2.15", note)] {
        let mut a = allocator_as(release, SimDevice::new(100 * MIB), "expandable_segments:True");
        a.malloc(70 * MIB, S0).unwrap();
        assert_eq!(oom_text(&mut a, 40 * MIB, release), format!("{head}{tail}"), "torch {release}");
    }
    // The setting in effect when memory runs out decides (2.15 measured both ways).
    let mut a = allocator_as("2.15", SimDevice::new(100 * MIB), "expandable_segments:True");
    a.malloc(70 * MIB, S0).unwrap();
    let mut config = a.config().clone();
    config.set_allocator_settings_pytorch("expandable_segments:False").unwrap();
    a.set_config(config).unwrap();
    assert!(oom_text(&mut a, 40 * MIB, "2.15").ends_with("alloc-conf)"));
}

#[test]
fn completed_events_free_their_blocks_highest_stream_first() {
    // x's stream first: x becomes a second inactive split block, then y
    // merges all three. Walked the other way the peak would stay at 1.
    let mut a = allocator_on(SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
    let x = a.malloc(1000, S0).unwrap();
    let y = a.malloc(1000, S0).unwrap();
    a.record_stream(x, POOL_STREAM_2).unwrap();
    a.record_stream(y, POOL_STREAM_1).unwrap();
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.reset_peak_stats();
    a.device_mut().complete_all_events();
    a.malloc(4_000_000, S0).unwrap();
    assert_eq!(a.stats().inactive_split.small_pool, Stat { current: 0, peak: 2, allocated: 2, freed: 2 });
    assert_eq!(a.stats().inactive_split.all, Stat { current: 1, peak: 2, allocated: 3, freed: 2 });
}

#[test]
fn a_stream_use_recorded_during_a_capture_is_not_waited_for_after_it() {
    // torch 2.4 to 2.12: both frees wait for the capture to end; then only
    // the use recorded before it gets an event.
    let mut a = allocator_as("2.12", SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
    let before = a.malloc(1000, S0).unwrap();
    let during = a.malloc(1000, S0).unwrap();
    a.record_stream(before, POOL_STREAM_1).unwrap();
    a.begin_allocate_to_pool((0, 1), StreamFilter::Stream(POOL_STREAM_2)).unwrap();
    a.record_stream(during, POOL_STREAM_1).unwrap();
    a.free(before).unwrap();
    a.free(during).unwrap();
    a.end_allocate_to_pool((0, 1)).unwrap();
    a.malloc(1000, S0).unwrap();
    assert_eq!(state(&a), lines("@0x0 small 2097152 stream 0: [1024 P | 1024 A(1000) | 2095104 I]"));
    assert_eq!(a.stats().active.all.current, 2);
    assert_eq!(a.device().pending_events(), 1);
}

#[test]
fn from_torch_2_13_only_a_capturing_stream_holds_events_and_cache_back() {
    // An allocate-to-pool on a device that is not capturing a graph: 2.12
    // neither frees the block whose event completed nor empties the cache
    // before its last retry; 2.13 does both.
    for (release, still_active) in [("2.12", 2), ("2.13", 1)] {
        let mut a = allocator_as(release, SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
        let p = a.malloc(1000, S0).unwrap();
        a.record_stream(p, POOL_STREAM_1).unwrap();
        a.free(p).unwrap();
        a.device_mut().complete_all_events();
        a.begin_allocate_to_pool((0, 1), StreamFilter::Stream(POOL_STREAM_2)).unwrap();
        a.malloc(1000, S0).unwrap();
        assert_eq!(a.stats().active.all.current, still_active, "torch {release}");
    }
    for (release, fits) in [("2.12", false), ("2.13", true)] {
        let mut a = allocator_as(release, SimDevice::new(GIB), "");
        let p = a.malloc(600_000_000, S0).unwrap();
        a.free(p).unwrap();
        a.begin_allocate_to_pool((0, 1), StreamFilter::Stream(S0)).unwrap();
        assert_eq!(a.malloc(600_000_000, S0).is_ok(), fits, "torch {release}");
        assert_eq!((a.stats().num_alloc_retries, a.stats().num_ooms), if fits { (1, 0) } else { (0, 1) });
    }
}

//! Private pools (CUDA graphs, `torch.cuda.MemPool`) and multi-stream timing.

use crate::support::*;
use vramkit_core::{StreamFilter, StreamId};
use vramkit_sim::{EventMode, SimDevice};

const POOL: (u64, u64) = (1, 7);

#[test]
fn a_private_pool_gets_its_own_segments_and_is_released_when_it_goes() {
    let mut a = allocator("");
    let outside = a.malloc(1000, S0).unwrap();
    a.begin_allocate_to_pool(POOL, StreamFilter::Stream(S0)).unwrap();
    let inside = a.malloc(1000, S0).unwrap();
    let big = a.malloc(5 * MIB, S0).unwrap();
    a.end_allocate_to_pool(POOL).unwrap();
    assert_eq!(inside.0, outside.0 + 2 * MIB, "not from the default pool's segment");
    let segs = a.segments();
    let pools: Vec<_> = segs.iter().map(|s| (s.segment_type.as_str(), s.segment_pool_id)).collect();
    assert_eq!(pools, vec![("small", (0, 0)), ("small", POOL), ("large", POOL)]);

    a.free(inside).unwrap();
    a.free(big).unwrap();
    // Private memory never serves the default pool.
    let again = a.malloc(1000, S0).unwrap();
    assert_eq!(again.0, outside.0 + 1024);
    // Still in use: empty_cache keeps its segments.
    a.empty_cache();
    assert_eq!(a.segments().iter().filter(|s| s.segment_pool_id == POOL).count(), 2);
    // Its last user goes: the next empty_cache frees its segments and drops it.
    a.release_pool(POOL).unwrap();
    a.empty_cache();
    assert_eq!(a.segments().iter().filter(|s| s.segment_pool_id == POOL).count(), 0);
    assert!(a.private_pool_ids().is_empty());
    a.free(outside).unwrap();
    a.free(again).unwrap();
}

#[test]
fn only_matching_streams_are_routed_and_the_most_recent_pool_wins() {
    let mut a = allocator("");
    a.begin_allocate_to_pool((1, 1), StreamFilter::All).unwrap();
    a.begin_allocate_to_pool((1, 2), StreamFilter::Stream(StreamId(5))).unwrap();
    a.malloc(512, StreamId(5)).unwrap();
    a.malloc(512, StreamId(6)).unwrap();
    let pools: Vec<_> = a.segments().iter().map(|s| (s.stream, s.segment_pool_id)).collect();
    assert_eq!(pools, vec![(5, (1, 2)), (6, (1, 1))]);
    assert!(a.begin_allocate_to_pool((1, 2), StreamFilter::All).is_err());
    assert!(a.end_allocate_to_pool((9, 9)).is_err());
}

#[test]
fn oom_message_counts_free_private_pool_memory() {
    let mut a = allocator_on(SimDevice::new(40 * MIB), "");
    a.begin_allocate_to_pool(POOL, StreamFilter::All).unwrap();
    let p = a.malloc(3 * MIB, S0).unwrap();
    a.end_allocate_to_pool(POOL).unwrap();
    a.free(p).unwrap();
    let err = a.malloc(30 * MIB, S0).unwrap_err();
    let oom = err.as_oom().unwrap();
    assert_eq!(oom.private_pool_free_bytes, 20 * MIB);
    assert!(oom.to_string().contains("with 20.00 MiB allocated in private pools (e.g., CUDA Graphs), "));
}

#[test]
fn during_a_capture_no_events_are_processed_and_no_cache_is_flushed() {
    let mut a = allocator_on(SimDevice::new(40 * MIB).with_event_mode(EventMode::Manual), "");
    let p = a.malloc(30 * MIB, S0).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(1000, S0).unwrap();
    a.record_stream(q, StreamId(3)).unwrap();
    a.begin_allocate_to_pool(POOL, StreamFilter::All).unwrap();
    // The cached 30 MiB default-pool segment would have to be flushed: not
    // during a capture, so the request fails without a retry.
    assert!(a.malloc(20 * MIB, S0).is_err());
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().num_sync_all_streams, 0);
    // A block freed during capture with a use recorded before it gets its
    // event afterwards (a use recorded during it would get none).
    a.free(q).unwrap();
    assert_eq!(a.device().counters().events_recorded, 0);
    a.end_allocate_to_pool(POOL).unwrap();
    a.malloc(512, S0).unwrap();
    assert_eq!(a.device().counters().events_recorded, 1);
}

#[test]
fn a_block_freed_on_one_stream_waits_for_the_other_streams_event() {
    let mut a = allocator_on(SimDevice::unlimited().with_event_mode(EventMode::Manual), "");
    let (sa, sb) = (StreamId(10), StreamId(20));
    let p = a.malloc(8 * MIB, sa).unwrap();
    a.record_stream(p, sb).unwrap();
    a.free(p).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 20971520 stream 10: [8388608 P | 12582912 I]"));
    // Not reused while stream B's work is pending...
    let q = a.malloc(8 * MIB, sa).unwrap();
    assert_eq!(q.0, p.0 + 8 * MIB);
    a.free(q).unwrap();
    assert_eq!(state(&a), lines("@0x0 large 20971520 stream 10: [8388608 P | 12582912 I]"));
    // ...and reused once it completes, the free completing inside that malloc.
    a.device_mut().complete_stream(sb);
    assert_eq!(a.malloc(8 * MIB, sa).unwrap(), p);
    assert_eq!(state(&a), lines("@0x0 large 20971520 stream 10: [8388608 A(8388608) | 12582912 I]"));
}

/// The what-if questions a replay asks of a request routed to a private
/// pool (`malloc_in_pool`) look at that pool's cache, not the default
/// pools': the replay's release checks ask them of the request after a run.
#[test]
fn what_if_questions_about_a_request_in_a_private_pool_look_at_that_pool() {
    let mut a = allocator_on(SimDevice::new(60 * MIB), "");
    let pooled = a.malloc_in_pool(40 * MIB, S0, POOL).unwrap();
    let outside = a.malloc(20 * MIB, S0).unwrap();
    a.free(pooled).unwrap(); // cached in the pool, which still has its user
    // The device is full and the default pools cache nothing.
    assert!(!a.first_attempt_fits(40 * MIB, S0));
    assert!(a.first_attempt_fits_in(40 * MIB, S0, Some(POOL)));
    assert!(!a.first_attempt_fits_in(40 * MIB, S0, Some((9, 9))), "a pool made now caches nothing");
    assert_eq!(a.malloc_address(40 * MIB, S0, false), None);
    assert_eq!(a.malloc_address_in(40 * MIB, S0, false, Some(POOL)), Some(pooled));
    // empty_cache() keeps a pool's segments while it has a user.
    let after = a.after_empty_cache();
    assert!(after.released().is_empty());
    assert!(!after.fits_in_cache(40 * MIB, S0));
    assert!(after.fits_in_cache_in(40 * MIB, S0, Some(POOL)));
    assert_eq!(after.cache_address_in(40 * MIB, S0, Some(POOL)), Some(pooled));
    assert_eq!(after.cache_address_in(40 * MIB, S0, Some((9, 9))), None);
    // Nothing was changed.
    assert_eq!(a.malloc_in_pool(40 * MIB, S0, POOL).unwrap(), pooled);
    a.free(outside).unwrap();
}

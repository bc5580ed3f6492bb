//! Self-consistency: traces recorded by vramkit's own allocator, under many
//! settings and with ring-buffer windows, must verify exactly, and the
//! oracle's reserved bytes must follow the recorded segment events.

use vramkit_core::config::Compat;
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, HistoryConfig, Snapshot, StreamId};
use vramkit_replay::{oracle_replay, DeviceTrace};
use vramkit_sim::{EventMode, SimDevice, XorShift};

const MIB: u64 = 1 << 20;


fn size(rng: &mut XorShift) -> u64 {
    match rng.below(10) {
        0..=3 => 1 + rng.below(64 << 10),
        4..=5 => 1 + rng.below(MIB),
        6..=8 => MIB + rng.below(40 * MIB),
        _ => 40 * MIB + rng.below(200 * MIB),
    }
}

/// Where the recording of a program starts.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    /// A third of the way in (a window), except where the settings need
    /// the whole history: garbage collection and expandable segments.
    Usual,
    /// At the first operation.
    Process,
}

/// Runs a random program under `config` and returns its snapshot.
#[allow(clippy::too_many_arguments)] // the program's knobs, each used by some preset
fn record(config: &AllocatorConfig, seed: u64, ops: usize, capacity: u64, max_entries: usize, streams: u64, record_streams: bool, start: Start) -> Snapshot {
    crate::without_invariant_checks();
    // Addresses handed out as a CUDA driver does (top down, reusing what
    // was freed), as the model replays of these recordings assume.
    let device = SimDevice::new(capacity).with_event_mode(EventMode::Manual).with_first_fit();
    let mut a = CachingAllocator::new(device, config.clone());
    let mut rng = XorShift::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut live: Vec<DeviceAddr> = Vec::new();
    let mut recording = false;
    for i in 0..ops {
        // Garbage collection depends on block ages the trace does not
        // record, so those traces start with the process.
        // Expandable traces must show where each reservation begins.
        let whole = start == Start::Process || config.garbage_collection_threshold > 0.0 || config.expandable_segments;
        let from = if whole { 0 } else { ops / 3 };
        if !recording && i >= from {
            a.record_history(Some(HistoryConfig { max_entries, ..HistoryConfig::default() }));
            recording = true;
        }
        match rng.below(20) {
            0..=9 => {
                let stream = StreamId(rng.below(streams) * 7);
                if let Ok(p) = a.malloc(size(&mut rng), stream) {
                    live.push(p);
                }
            }
            10..=16 if !live.is_empty() => {
                let p = live.swap_remove(rng.below(live.len() as u64) as usize);
                if record_streams && rng.below(4) == 0 {
                    a.record_stream(p, StreamId(1000 + rng.below(2))).unwrap();
                }
                a.free(p).unwrap();
            }
            17 if record_streams => a.device_mut().complete_stream(StreamId(1000 + rng.below(2))),
            18 if rng.below(5) == 0 => a.empty_cache(),
            _ => {}
        }
    }
    a.snapshot()
}

fn check(conf: &str, seed: u64, capacity: u64, max_entries: usize, streams: u64, record_streams: bool) {
    check_from(conf, seed, capacity, max_entries, streams, record_streams, Start::Usual)
}

fn check_from(conf: &str, seed: u64, capacity: u64, max_entries: usize, streams: u64, record_streams: bool, start: Start) {
    check_under(Compat::R26, conf, seed, capacity, max_entries, streams, record_streams, start)
}

/// `check_from` under the rules of another release.
#[allow(clippy::too_many_arguments)] // check_from's knobs and the rules
fn check_under(compat: Compat, conf: &str, seed: u64, capacity: u64, max_entries: usize, streams: u64, record_streams: bool, start: Start) {
    let config = AllocatorConfig::parse_with_compat(conf, compat).unwrap();
    let snap = record(&config, seed, 1500, capacity, max_entries, streams, record_streams, start);
    for trace in DeviceTrace::split(&snap) {
        let known = (capacity != u64::MAX).then_some(capacity);
        let report = vramkit_replay::verify_with_capacity(&trace, &config, known).unwrap_or_else(|e| panic!("{conf} seed {seed}: {e}"));
        assert!(
            report.passed(),
            "{conf} seed {seed} window {max_entries}: {}/{} placed, segment events {}, end state {}: {:#?}",
            report.placed_same,
            report.alloc_events,
            report.segment_events_identical,
            report.end_state_identical,
            report.first_divergence
        );
        // The oracle's reserved peak is the running sum of segment events.
        let m = oracle_replay(&trace, &config, 0).unwrap();
        let start: u64 = vramkit_replay::rebuild_start(&trace, &config).unwrap().segments.iter().map(|s| s.total_size).sum();
        let mut reserved = start;
        let mut peak = start;
        for e in &trace.events {
            match e.action {
                vramkit_core::TraceAction::SegmentAlloc | vramkit_core::TraceAction::SegmentMap => reserved += e.size,
                vramkit_core::TraceAction::SegmentFree | vramkit_core::TraceAction::SegmentUnmap => reserved -= e.size,
                _ => {}
            }
            peak = peak.max(reserved);
        }
        assert_eq!(m.peak_reserved_bytes, peak, "{conf} seed {seed}");
        assert!(m.lower_bound_bytes <= m.peak_reserved_bytes, "{conf} seed {seed}");
    }
}

macro_rules! selfcheck {
    ($($name:ident: $conf:expr, $capacity:expr, $window:expr, $streams:expr, $record_streams:expr;)*) => {
        $(
            #[test]
            fn $name() {
                for seed in 1..=12 {
                    check($conf, seed, $capacity, $window, $streams, $record_streams);
                }
            }
        )*
    };
}

selfcheck! {
    default_unlimited: "", u64::MAX, usize::MAX, 1, false;
    default_ring_window: "", 1200 * MIB, 400, 1, false;
    max_split_size: "max_split_size_mb:64", 1200 * MIB, usize::MAX, 1, false;
    max_split_size_window: "max_split_size_mb:128", 900 * MIB, 500, 1, false;
    roundup_divisions: "roundup_power2_divisions:4", 1200 * MIB, 600, 1, false;
    roundup_list: "roundup_power2_divisions:[1:2,64:8,>:4]", 1500 * MIB, usize::MAX, 1, false;
    streams: "", 1500 * MIB, usize::MAX, 3, false;
    record_stream_events: "", u64::MAX, 700, 2, true;
    record_stream_max_split: "max_split_size_mb:64", u64::MAX, 700, 2, true;
    gc_with_fraction: "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", 1500 * MIB, usize::MAX, 1, false;
    expandable: "expandable_segments:True", u64::MAX, usize::MAX, 1, false;
    expandable_with_refusals: "expandable_segments:True", 1200 * MIB, usize::MAX, 1, false;
    expandable_streams: "expandable_segments:True", u64::MAX, usize::MAX, 3, false;
    expandable_max_split: "expandable_segments:True,max_split_size_mb:64", u64::MAX, usize::MAX, 2, false;
    expandable_record_stream: "expandable_segments:True", u64::MAX, usize::MAX, 2, true;
    record_stream_max_split_refusals: "max_split_size_mb:64", 1200 * MIB, usize::MAX, 2, true;
    gc_record_stream: "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", 1500 * MIB, usize::MAX, 2, true;
}


/// Seeds of `check` that do not verify exactly, out of `seeds`.
fn failing(conf: &str, seeds: std::ops::RangeInclusive<u64>, capacity: u64, window: usize, streams: u64, rs: bool) -> Vec<u64> {
    failing_under(Compat::R26, conf, seeds, capacity, window, streams, rs, Start::Usual)
}

/// `failing` from another start, under the rules of a release.
#[allow(clippy::too_many_arguments)] // failing's knobs, the start and the rules
fn failing_under(
    compat: Compat,
    conf: &str,
    seeds: std::ops::RangeInclusive<u64>,
    capacity: u64,
    window: usize,
    streams: u64,
    rs: bool,
    start: Start,
) -> Vec<u64> {
    seeds.filter(|&seed| std::panic::catch_unwind(|| check_under(compat, conf, seed, capacity, window, streams, rs, start)).is_err()).collect()
}

/// With refusals, a block live at the window start whose tail the trace
/// never pins down (more than 1 MiB free after it, no allocation landing
/// there) is rebuilt without a tail; a later best-fit choice can depend on
/// it (spec 13.5 assumes none does). On these adversarial random programs
/// that happens for 1 seed in 40; real traces so far: never.
#[test]
fn refusals_with_undetermined_tails() {
    let bad = failing("", 1..=40, 1200 * MIB, usize::MAX, 1, false);
    assert!(bad.len() <= 1, "seeds that did not verify: {bad:?}");
}

/// `record_stream` holds with device refusals. Two things only the order
/// of the entries tells: a block freed at once and one the next request's
/// retry ladder synchronised look the same, and a ladder's last stage
/// releases what `empty_cache()` would (`drive.rs`, `releases.rs`).
/// Before those were told apart, 12 of these 40 seeds diverged.
#[test]
fn record_stream_with_refusals() {
    let bad = failing("", 1..=40, 1500 * MIB, usize::MAX, 2, true);
    assert!(bad.is_empty(), "{} of 40 seeds did not verify: {bad:?}", bad.len());
}

/// Expandable segments with `max_split_size_mb` and device refusals
/// (5 of these 40 seeds diverged before the ladder's last stage was told
/// apart from `empty_cache()`).
#[test]
fn expandable_max_split_with_refusals() {
    let bad = failing("expandable_segments:True,max_split_size_mb:64", 1..=40, 1200 * MIB, usize::MAX, 2, false);
    assert!(bad.is_empty(), "{} of 40 seeds did not verify: {bad:?}", bad.len());
}
/// A retry ladder under expandable segments whose refused attempt asked
/// for two 20 MiB units, while the last attempt (after the release freed
/// the segment's end) mapped one: sized by the last, the run looked like a
/// call the device could not have refused. (The one seed of 2,000 recorded
/// from the process start that diverged.)
#[test]
fn expandable_ladder_sized_by_its_refused_attempt() {
    check_from("expandable_segments:True", 107, 1200 * MIB, usize::MAX, 2, true, Start::Process);
}

/// `empty_cache()` just before a request that needs what it released,
/// under expandable segments on a full device (issue 12, torch 2.15 "tight"
/// seed 15): the releases, a map and the `alloc` look like a retry ladder,
/// and the request's first attempt would have failed. But a ladder's
/// refused first attempt leaves a new reservation, below the old one, that
/// its retry maps; this request was mapped in the hole the call unmapped.
#[test]
fn empty_cache_call_before_an_expandable_request_that_needs_it() {
    crate::without_invariant_checks();
    let capacity = 1200 * MIB;
    let config = AllocatorConfig::parse("expandable_segments:True,max_split_size_mb:256").unwrap();
    let device = SimDevice::new(capacity).with_first_fit();
    let mut a = CachingAllocator::new(device, config.clone());
    a.record_history(Some(HistoryConfig::default()));
    let _low = a.malloc(100 * MIB, StreamId(0)).unwrap();
    let interior = a.malloc(700 * MIB, StreamId(0)).unwrap();
    let _high = a.malloc(380 * MIB, StreamId(0)).unwrap();
    a.free(interior).unwrap();
    // Oversize: the 700 MiB free block is too large to be reused for it,
    // and the unmapped end after the 380 MiB block too small.
    a.empty_cache();
    let placed = a.malloc(600 * MIB, StreamId(0)).unwrap();
    assert_eq!(placed, interior, "mapped where the call unmapped");
    let snap = a.snapshot();
    for trace in DeviceTrace::split(&snap) {
        let report = vramkit_replay::verify_with_capacity(&trace, &config, Some(capacity)).unwrap();
        assert!(report.passed(), "{:#?}", report.first_divergence);
    }
}

/// torch 2.12 orders free blocks of equal size by the age of the block
/// object (a merge keeps the freed block's), so the order in which held
/// blocks are freed shows in later placements: blocks whose events
/// complete in one `malloc` are freed in the order of their
/// `free_completed` entries (`drive.rs`). Recorded from the start: a
/// window's start state cannot know block ages. Before, 2 of these 80
/// runs diverged (seed 14 at 1500 MiB, seed 6 with divisions).
#[test]
fn record_stream_under_block_age_ties() {
    let mut report = Vec::new();
    for (conf, capacity) in [("", u64::MAX), ("", 1500 * MIB), ("roundup_power2_divisions:4", 1100 * MIB), ("max_split_size_mb:64", u64::MAX)] {
        let bad = failing_under(Compat::V2_12, conf, 1..=20, capacity, usize::MAX, 2, true, Start::Process);
        if !bad.is_empty() {
            report.push(format!("{conf:?}, {capacity} bytes: {} of 20 seeds diverge: {bad:?}", bad.len()));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// A synchronisation that released nothing (`empty_cache()` with no whole
/// free segment) shows only its `free_completed` entries, followed by no
/// request: PyTorch freed the held blocks there, so a block freed next
/// merges into one already free and survives, which under torch 2.12's
/// block-age ties decides a later placement. Here `q` (newer than `s2`'s
/// tail) absorbs `p` (older): the 128 KiB tail left of their merged block
/// is newer than `s2`'s, which takes the 128 KiB request. Freed at the
/// next `malloc` instead, `p` absorbed `q` and its older tail took it
/// (torch 2.12.0 `pools`, seed 12, entry 1632, issue 12).
#[test]
fn quiet_synchronisation_frees_held_blocks_where_it_ran() {
    const KIB: u64 = 1 << 10;
    crate::without_invariant_checks();
    let config = AllocatorConfig::parse_with_compat("", Compat::V2_12).unwrap();
    let device = SimDevice::new(u64::MAX).with_event_mode(EventMode::Manual).with_first_fit();
    let mut a = CachingAllocator::new(device, config.clone());
    a.record_history(Some(HistoryConfig::default()));
    let s0 = StreamId(0);
    // First small segment: p, x1, x2 (its exact tail).
    let p = a.malloc(256 * KIB, s0).unwrap();
    let x1 = a.malloc(896 * KIB, s0).unwrap();
    let _x2 = a.malloc(896 * KIB, s0).unwrap();
    // Second: y1, y2, y3 and a free 128 KiB tail, the segment's own block.
    let _y1 = a.malloc(896 * KIB, s0).unwrap();
    let _y2 = a.malloc(896 * KIB, s0).unwrap();
    let _y3 = a.malloc(128 * KIB, s0).unwrap();
    // q, newer than that tail, split off where x1 was; z fills the rest.
    a.free(x1).unwrap();
    let q = a.malloc(256 * KIB, s0).unwrap();
    let _z = a.malloc(640 * KIB, s0).unwrap();
    assert_eq!(q.0, p.0 + 256 * KIB);
    // p is held by another stream; a large request comes between its
    // free and the synchronisation, which releases nothing.
    a.record_stream(p, StreamId(7)).unwrap();
    a.free(p).unwrap();
    let _large = a.malloc(4 * MIB, s0).unwrap();
    a.empty_cache();
    a.free(q).unwrap();
    let _r = a.malloc(384 * KIB, s0).unwrap();
    let tie = a.malloc(128 * KIB, s0).unwrap();
    assert_ne!(tie.0, p.0 + 384 * KIB, "the second segment's older tail is taken");
    let snap = a.snapshot();
    for trace in DeviceTrace::split(&snap) {
        let report = vramkit_replay::verify_with_capacity(&trace, &config, None).unwrap();
        assert!(report.passed(), "{:#?}", report.first_divergence);
    }
}

/// Every setting with device refusals, 100 seeds each: how many seeds do
/// not verify, against the most each may (measured; lower it when a fix
/// lands). What remains is block tails a window start cannot pin down
/// (spec 13.5): every seed left is in a setting whose recording starts a
/// third of the way in. Before the ladder and synchronisation fixes in
/// drive.rs and releases.rs, 487 of 2,000 seeds (200 per setting)
/// diverged. Then the devices began handing out addresses as a CUDA driver
/// does (top down, first fit), and with expandable segments, `max_split_size_mb`
/// and `record_stream`, 2 seeds (31 and 75) diverge, from the process start
/// too: a retry ladder's first attempt under expandable segments that the
/// model's device grants and the recording's refused (43 of these 300
/// expandable runs before `first_attempt_fits`). A ratchet.
#[test]
fn refusals_under_every_setting() {
    const GC: &str = "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9";
    const EXP_SPLIT: &str = "expandable_segments:True,max_split_size_mb:64";
    let presets: [(&str, u64, u64, bool, usize); 10] = [
        ("", 1200 * MIB, 1, false, 1),
        ("", 1500 * MIB, 2, true, 0),
        ("max_split_size_mb:64", 1200 * MIB, 2, true, 1),
        ("max_split_size_mb:64", 1000 * MIB, 1, false, 2),
        ("roundup_power2_divisions:4", 1100 * MIB, 2, true, 1),
        ("expandable_segments:True", 1200 * MIB, 2, true, 0),
        (EXP_SPLIT, 1200 * MIB, 2, false, 0),
        (EXP_SPLIT, 1200 * MIB, 2, true, 2),
        (GC, 1500 * MIB, 1, false, 0),
        (GC, 1500 * MIB, 2, true, 0),
    ];
    let mut report = Vec::new();
    for (conf, capacity, streams, rs, most) in presets {
        let bad = failing(conf, 1..=100, capacity, usize::MAX, streams, rs);
        if bad.len() > most {
            report.push(format!("{conf:?} (record_stream {rs}): {} of 100 diverge, at most {most}: {bad:?}", bad.len()));
        }
        // Recorded from the process start, no block tail is unknown.
        let bad = failing_under(Compat::R26, conf, 1..=100, capacity, usize::MAX, streams, rs, Start::Process);
        let most = if conf == EXP_SPLIT && rs { most } else { 0 };
        if bad.len() > most {
            report.push(format!("{conf:?} (record_stream {rs}), recorded from the start: {} of 100 diverge: {bad:?}", bad.len()));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}



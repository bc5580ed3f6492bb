//! Telling `empty_cache()` calls from the retry ladder, and the device
//! capacity a trace implies (spec 13, item 5).
//!
//! Neither is recorded: both show up as runs of `segment_free` (or
//! `segment_unmap`) entries. First by what follows: a run belongs to an
//! allocation's retry ladder (a `cudaMalloc` was refused) only if that
//! allocation's acquire and `alloc`, or an `oom`, follow it, and the
//! device could have refused; any other run is a call (or garbage
//! collection). Then [`replay_as_empty_cache`] judges each run against a
//! model under the recorded settings.

use vramkit_core::snapshot::MempoolId;
use vramkit_core::{AfterEmptyCache, CachingAllocator, DeviceAddr, StreamId, TraceAction};
use vramkit_sim::SimDevice;
use vramkit_trace::{Entries, Entry};

/// What a run of releases was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseRun {
    /// Not a request's retry ladder: the user called `empty_cache()` here
    /// (or garbage collection released, before a request that fit).
    EmptyCache,
    /// A refused `cudaMalloc` made the allocator release its cache.
    RetryLadder,
}

/// The runs of releases in `events`: (index of the run's first entry, kind).
pub fn classify_release_runs(events: &Entries) -> Vec<(usize, ReleaseRun)> {
    let actions = events.actions();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < actions.len() {
        if !is_release(actions[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < actions.len() && is_release(actions[i]) {
            i += 1;
        }
        // After the run: acquires then `alloc`, or an `oom`, make it a ladder.
        let mut j = i;
        while j < actions.len() && matches!(actions[j], TraceAction::SegmentAlloc | TraceAction::SegmentMap) {
            j += 1;
        }
        let acquired = j > i;
        let kind = match actions.get(j) {
            Some(TraceAction::Oom) => ReleaseRun::RetryLadder,
            Some(TraceAction::Alloc) if acquired => ReleaseRun::RetryLadder,
            _ => ReleaseRun::EmptyCache,
        };
        runs.push((start, kind));
    }
    runs
}

/// Whether to replay the run starting at `start` as `empty_cache()` (a
/// user's call, or a retry ladder's last stage, `release_cached_blocks`,
/// which releases the same), judged from the state just before it of a
/// model under the recorded settings.
///
/// The order of the releases decides first: a full release (`empty_cache()`,
/// or the last stage of the ladder, which has the same effect) frees every
/// whole segment in ascending size order, while the targeted stage frees
/// oversize blocks from the largest down and garbage collection frees old
/// ones. So a run is a call only when it is what a full release would free
/// from the model's state; otherwise the model's own `malloc` does it.
///
/// A full release synchronises first: every block still waiting on other
/// streams is freed, and its `free_completed` comes before the run. So
/// with such a block left (`unsynced_holds`), the run is not a call, but
/// garbage collection or the targeted stage, which do not synchronise.
///
/// The ladder's last stage releases the same segments as a call, but then
/// only asks the device again: blocks its synchronisation freed are not
/// searched. So a "ladder" run whose request the cache could serve after
/// `empty_cache()` is the ladder: after a call, that request would have
/// been served from the cache, with no new segment and no `oom`.
///
/// `after` is `model.after_empty_cache()` where the caller has it already
/// (else it is made here, when needed); `request_pool` is the private pool
/// the request after the run was routed to (`None`: the default pools),
/// whose cache and first attempt are the ones that count.
///
/// Returns what the run is replayed as: `None`, not as `empty_cache()` (the
/// model's own `malloc` releases what it releases); else the user's call
/// ([`ReleaseRun::EmptyCache`]) or the ladder's last stage.
pub fn replay_as_empty_cache(
    runs: &[(usize, ReleaseRun)],
    events: &Entries,
    start: usize,
    model: &CachingAllocator<SimDevice>,
    unsynced_holds: bool,
    after: Option<AfterEmptyCache>,
    request_pool: Option<MempoolId>,
) -> Option<ReleaseRun> {
    if unsynced_holds {
        return None;
    }
    let k = runs.binary_search_by_key(&start, |r| r.0).ok()?;
    let recorded = releases(events.iter_range(start..events.len()));
    let request = request_after(events, start).map(|(_, r)| r);
    let after = after.unwrap_or_else(|| model.after_empty_cache());
    if recorded != after.released() {
        return None;
    }
    let kind = runs[k].1;
    if kind == ReleaseRun::RetryLadder {
        // With expandable segments a refused first attempt leaves something
        // behind: the reservation it made when no segment had room, which
        // the retry then maps first (the lowest address). Where the model's
        // own first attempt fails too, its own ladder repeats it all, unless
        // the request went where it goes after a call and not where the
        // ladder puts it: then the user called `empty_cache()` just before a
        // request that needed the memory released. (Not where torch 2.4's
        // targeted release would die on an expandable block, GitHub
        // #119452: the release it recorded is replayed.)
        let config = model.config();
        let asserts = targeted_release_asserts(config);
        if config.expandable_segments && !asserts && request.is_some_and(|r| !model.first_attempt_fits_in(r.size, StreamId(r.stream), request_pool)) {
            let placed_by_call = request.is_some_and(|r| {
                let placed = |empty_cache_first| model.malloc_address_in(r.size, StreamId(r.stream), empty_cache_first, request_pool) == Some(DeviceAddr(r.addr));
                r.action == TraceAction::Alloc && placed(true) && !placed(false)
            });
            return placed_by_call.then_some(ReleaseRun::EmptyCache);
        }
        return (!request.is_some_and(|r| after.fits_in_cache_in(r.size, StreamId(r.stream), request_pool))).then_some(kind);
    }
    // A request right after the run, with no new memory: after a call the
    // cache served it, by best fit. Elsewhere, it was the ladder's (an
    // expandable segment's free end grows, or a targeted release made room).
    let served_directly = events.actions().get(start + recorded.len()) == Some(&TraceAction::Alloc);
    let misplaced = served_directly && request.is_some_and(|r| after.cache_address_in(r.size, StreamId(r.stream), request_pool) != Some(DeviceAddr(r.addr)));
    (!misplaced).then_some(kind)
}

/// Whether the retry ladder's targeted release may die on an expandable
/// block under `config` (torch 2.4 with expandable segments and
/// `max_split_size_mb`: `release_block` asserts the block is not
/// expandable, GitHub #119452), leaving what the request's first attempt
/// did, with no trace entry.
pub(crate) fn targeted_release_asserts(config: &vramkit_core::AllocatorConfig) -> bool {
    config.expandable_segments && config.compat.release_considers_expandable && config.max_split_size_bytes.is_some()
}

/// A segment event: a new or released segment, or pages mapped or unmapped.
pub(crate) fn is_segment_event(action: TraceAction) -> bool {
    matches!(action, TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::SegmentFree | TraceAction::SegmentUnmap)
}

/// A release as it is compared with a plan: (action, address, bytes).
pub(crate) type Release = (TraceAction, u64, u64);

fn is_release(action: TraceAction) -> bool {
    matches!(action, TraceAction::SegmentFree | TraceAction::SegmentUnmap)
}

/// The releases `entries` start with.
pub(crate) fn releases(entries: impl Iterator<Item = Entry>) -> Vec<Release> {
    entries.take_while(|e| is_release(e.action)).map(|e| (e.action, e.addr, e.size)).collect()
}

/// The request that the segment events from entry `from` on lead to: the
/// first other entry, if it is an `alloc` or an `oom`, and where it lies.
pub(crate) fn request_after(events: &Entries, from: usize) -> Option<(usize, Entry)> {
    events
        .iter_range(from..events.len())
        .enumerate()
        .find(|(_, e)| !is_segment_event(e.action))
        .filter(|(_, r)| matches!(r.action, TraceAction::Alloc | TraceAction::Oom))
        .map(|(k, r)| (from + k, r))
}

/// The release runs with the capacity rule applied, and the capacity the
/// trace implies: the highest reserved level it reaches, when it shows a
/// refused `cudaMalloc` or an `oom` (else `None`: unlimited).
///
/// A run that looks like a retry ladder is an `empty_cache()` after all if
/// reserved bytes before it plus the next request's segment stay within a
/// level the trace reaches anyway: the device could not have refused.
pub fn classify_with_capacity(
    events: &Entries,
    start_reserved: u64,
    config: &vramkit_core::AllocatorConfig,
    known_capacity: Option<u64>,
) -> (Vec<(usize, ReleaseRun)>, Option<u64>) {
    use vramkit_core::rounding::{get_allocation_size, round_size};
    let mut runs = classify_release_runs(events);
    // Reserved bytes before each run's first entry, and the highest level.
    let mut reserved = start_reserved;
    let mut reserved_before = Vec::with_capacity(runs.len());
    let mut max_reserved = reserved;
    let mut next_run = runs.iter().map(|r| r.0).peekable();
    // The actions column, and a size where it counts.
    for (i, &action) in events.actions().iter().enumerate() {
        if next_run.peek() == Some(&i) {
            reserved_before.push(reserved);
            next_run.next();
        }
        match action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved += events.size(i),
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved = reserved.saturating_sub(events.size(i)),
            _ => {}
        }
        max_reserved = max_reserved.max(reserved);
    }
    // A refusal needs reserved + request above the limit: the known
    // capacity (or its memory fraction), else the highest level reached.
    let limit = match known_capacity {
        Some(c) if config.per_process_memory_fraction < 1.0 => (config.per_process_memory_fraction * c as f64) as u64,
        Some(c) => c,
        None => max_reserved,
    };
    let mut refused = events.actions().contains(&TraceAction::Oom);
    for ((start, kind), &before) in runs.iter_mut().zip(&reserved_before) {
        if *kind != ReleaseRun::RetryLadder {
            continue;
        }
        // What the refused request asked of the device: at least what it
        // acquired after the run (with expandable segments, pages mapped in
        // whole units), and at least the segment its size needs.
        let after_run = events.iter_range(*start..events.len()).skip_while(|e| is_release(e.action));
        let acquired: u64 = after_run
            .take_while(|e| matches!(e.action, TraceAction::SegmentAlloc | TraceAction::SegmentMap))
            .map(|e| e.size)
            .sum();
        let request = events.iter_range(*start..events.len()).find(|e| matches!(e.action, TraceAction::Alloc | TraceAction::Oom));
        let needs = request.map_or(0, |e| {
            let rounded = if e.action == TraceAction::Oom { e.size } else { round_size(e.size, &config.roundup_power2_divisions) };
            if config.expandable_segments && rounded > vramkit_core::rounding::SMALL_SIZE {
                // The refused attempt may have had no free end to grow and
                // asked for whole units; the last one, after the release,
                // can need fewer.
                rounded.next_multiple_of(config.large_segment_size_bytes)
            } else {
                get_allocation_size(rounded, config.large_segment_size_bytes)
            }
        });
        let alloc_size = acquired.max(needs);
        if before + alloc_size <= limit {
            *kind = ReleaseRun::EmptyCache;
        } else {
            refused = true;
        }
    }
    (runs, refused.then_some(max_reserved))
}

//! Telling `empty_cache()` calls from the retry ladder, and the device
//! capacity a trace implies (spec 13, item 5).
//!
//! Neither is recorded: both show up as runs of `segment_free` entries. A
//! run belongs to an allocation's retry ladder (a `cudaMalloc` was refused)
//! only if that allocation's acquire and `alloc`, or an `oom`, follow it;
//! any other run is an `empty_cache()` call.

use vramkit_core::{TraceAction, TraceEntry};

/// What a run of releases was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseRun {
    /// The user called `empty_cache()` here.
    EmptyCache,
    /// A refused `cudaMalloc` made the allocator release its cache.
    RetryLadder,
}

/// The runs of releases in `events`: (index of the run's first entry, kind).
pub fn classify_release_runs(events: &[TraceEntry]) -> Vec<(usize, ReleaseRun)> {
    let is_release = |e: &TraceEntry| matches!(e.action, TraceAction::SegmentFree | TraceAction::SegmentUnmap);
    let mut runs = Vec::new();
    let mut i = 0;
    while i < events.len() {
        if !is_release(&events[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < events.len() && is_release(&events[i]) {
            i += 1;
        }
        // After the run: acquires then `alloc`, or an `oom`, make it a ladder.
        let mut j = i;
        while j < events.len() && matches!(events[j].action, TraceAction::SegmentAlloc | TraceAction::SegmentMap) {
            j += 1;
        }
        let acquired = j > i;
        let kind = match events.get(j).map(|e| e.action) {
            Some(TraceAction::Oom) => ReleaseRun::RetryLadder,
            Some(TraceAction::Alloc) if acquired => ReleaseRun::RetryLadder,
            _ => ReleaseRun::EmptyCache,
        };
        runs.push((start, kind));
    }
    runs
}

//! Driving a model allocator with a trace's entries: the one place that
//! says how each recorded entry becomes an allocator call.
//!
//! - `alloc` is a `malloc` of the requested size on the recorded stream.
//! - A `free_requested` directly followed by its `free_completed` is a plain
//!   `free`. Otherwise the block was held by other streams' work
//!   (`record_stream`): the driver frees it with a pending event on a stream
//!   of its own, and completes that event at the `free_completed`, so the
//!   model frees the block where PyTorch did: at the start of the next
//!   `malloc`, or in a synchronisation. `free_completed` entries just before
//!   a run of releases were emitted by that synchronisation itself, so their
//!   events are left for the model's synchronisation to complete. A pair
//!   directly before such a run is a held block too when freeing it would
//!   have served the request that follows: then there would be no run.
//!   Each held block's event stream is numbered by where its
//!   `free_completed` lies, so that the model, which walks streams from the
//!   highest handle down, frees blocks that complete together in the
//!   trace's order: which block survives a merge depends on it (torch 2.12
//!   orders free blocks of equal size by the age of the block object).
//! - A run of releases is an `empty_cache()` call unless it is a retry
//!   ladder (see `releases`), which the model repeats by itself when its
//!   device refuses memory. Where the model is PyTorch (the recorded
//!   settings), a ladder's last stage is replayed as the release it is.
//! - An `oom` is the failed request, asked again.
//!
//! Where the entries alone are ambiguous, the driver judges against its
//! model. That is sound only while the model is PyTorch, under the recorded
//! settings (`verify`'s pass); the judgements are kept as a [`Reading`],
//! which replays under other settings follow.

use crate::pools::{route, Overrides, PoolRouting};
use crate::releases::{releases, replay_as_empty_cache, request_after, ReleaseRun};
use crate::trace::DeviceTrace;
use std::borrow::Cow;
use crate::AddrMap;
use vramkit_core::{CachingAllocator, DeviceAddr, Error, SegmentInfo, StreamId, TraceAction, TraceEntry};
use vramkit_sim::SimDevice;

/// Streams the driver makes up for held blocks start here, far from real handles.
const HOLD_STREAM_BASE: u64 = u64::MAX - (1 << 40);

/// Where each held block's `free_completed` lies, which names the stream
/// of its event: `HOLD_STREAM_BASE + entries - index`, so the model (which
/// walks streams from the highest handle down, in `process_events` and in
/// a synchronisation) frees the blocks whose events completed together in
/// the order of their entries, as PyTorch did. Blocks that never complete
/// in the trace get handles above those.
#[derive(Debug)]
struct HoldStreams {
    entries: usize,
    /// Per entry: for a `free_requested`, the index of its `free_completed`
    /// (`u32::MAX`: none).
    completed_at: Vec<u32>,
    /// The start state's pending blocks: address -> the index of the
    /// `free_completed` that completes them.
    pending_at_start: AddrMap<usize>,
    never_completed: u64,
}

impl HoldStreams {
    fn new(events: &[TraceEntry]) -> HoldStreams {
        let mut completed_at = vec![u32::MAX; events.len()];
        let mut pending_at_start = AddrMap::default();
        let mut requested: AddrMap<usize> = AddrMap::default();
        for (i, e) in events.iter().enumerate() {
            match e.action {
                TraceAction::FreeRequested => {
                    requested.insert(e.addr, i);
                }
                TraceAction::FreeCompleted => match requested.remove(&e.addr) {
                    Some(r) => completed_at[r] = i as u32,
                    None => {
                        pending_at_start.entry(e.addr).or_insert(i);
                    }
                },
                _ => {}
            }
        }
        HoldStreams { entries: events.len(), completed_at, pending_at_start, never_completed: 0 }
    }

    fn stream(&mut self, completed_at: Option<usize>) -> StreamId {
        match completed_at {
            Some(j) => StreamId(HOLD_STREAM_BASE + (self.entries - j) as u64),
            None => {
                self.never_completed += 1;
                StreamId(HOLD_STREAM_BASE + self.entries as u64 + self.never_completed)
            }
        }
    }

    /// The stream for the block freed by the `free_requested` entry `i`.
    fn for_request(&mut self, i: usize) -> StreamId {
        let j = self.completed_at[i];
        self.stream((j != u32::MAX).then_some(j as usize))
    }

    /// The stream for a block the start state holds at `addr`.
    fn for_start(&mut self, addr: u64) -> StreamId {
        let j = self.pending_at_start.get(&addr).copied();
        self.stream(j)
    }
}

/// What one entry did to the model.
#[derive(Debug)]
pub(crate) enum Step {
    /// An `alloc`: the model's answer.
    Alloc(Result<DeviceAddr, Error>),
    /// An `oom`: whether the model failed the request too.
    Oom { failed: bool },
    /// Anything else.
    Other,
}

/// How a trace is read where its entries alone are ambiguous: which runs
/// of releases were the user's `empty_cache()` calls, which
/// `free_completed` entries a synchronisation emitted (PyTorch's
/// `synchronize_and_free_events`, in `empty_cache()` or the retry ladder's
/// `release_cached_blocks`), and which blocks freed at once had in fact
/// waited on events (`record_stream`) until the next request's
/// synchronisation. Judged once against a model under the recorded
/// settings (the pass `verify` makes, where the model is PyTorch), then
/// followed as is under any other settings: a user's `empty_cache()` call
/// stays a call whatever the settings, while a retry ladder's releases are
/// left to the model's own ladder, which runs only if its device refuses.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// Entries in the trace this reading is of.
    entries: usize,
    /// Entry indices of the release runs that were `empty_cache()` calls.
    calls: Vec<usize>,
    /// Per entry: a `free_completed` a synchronisation emitted.
    by_sync: Vec<bool>,
    /// Entry indices of `free_requested` entries, directly followed by their
    /// `free_completed`, whose block was held until a synchronisation.
    held_pairs: Vec<usize>,
    /// Segments routed to private pools the snapshot does not name (see `pools`).
    pools: Overrides,
}

impl Reading {
    /// Entries of the trace this reading is of.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// How many release runs were read as `empty_cache()` calls.
    pub fn empty_cache_calls(&self) -> usize {
        self.calls.len()
    }
}

pub(crate) struct Driver<'a> {
    events: &'a [TraceEntry],
    runs: Vec<(usize, ReleaseRun)>,
    /// The reading so far (being judged) or the one to follow.
    reading: Cow<'a, Reading>,
    /// Follow `reading` instead of judging.
    following: bool,
    /// Recorded address -> model address (`None`: the model failed it).
    addr: AddrMap<Option<u64>>,
    /// Held blocks: recorded address -> the stream of their pending event.
    holds: AddrMap<StreamId>,
    /// Held blocks whose `free_completed` was left to a synchronisation
    /// that may not come: freed after the next `malloc`.
    overdue: Vec<StreamId>,
    hold_streams: HoldStreams,
    /// The private pool of each allocation and pool-segment release.
    routing: PoolRouting,
}

impl<'a> Driver<'a> {
    /// Routes these segments to pools the snapshot does not name (a judging
    /// driver; see `pools`).
    pub fn with_pool_overrides(mut self, pools: Overrides) -> Self {
        self.reading.to_mut().pools = pools;
        self
    }

    /// Where each allocation went (see `pools`).
    pub fn routing(&self) -> &PoolRouting {
        &self.routing
    }

    /// Before the first entry: routes each allocation to its private pool
    /// (see `pools`), and the start state's pending blocks wait on events
    /// like every other hold.
    pub fn begin(&mut self, model: &mut CachingAllocator<SimDevice>, trace: &DeviceTrace, start: &[SegmentInfo]) {
        self.routing = route(trace, start, &self.reading.pools);
        for p in model.held_addresses() {
            let stream = self.hold_streams.for_start(p.0);
            if model.hold_with_event(p, stream).is_ok() {
                self.holds.insert(p.0, stream);
            }
        }
    }

    /// A driver that judges the reading against its own model, which must
    /// be under the recorded settings.
    pub fn new(events: &'a [TraceEntry], runs: Vec<(usize, ReleaseRun)>) -> Driver<'a> {
        // `free_completed` entries directly before a release, a new segment
        // or an `oom` may come from a synchronisation (`empty_cache()`, or
        // the retry ladder's last stage, after the cache search); entries
        // directly before an `alloc` served from the cache never do. The
        // candidates are marked here; `check_sync_run` keeps a run only if
        // it frees every held block and the full release follows.
        let mut by_sync = vec![false; events.len()];
        for (start, e) in events.iter().enumerate() {
            let ladder_sign = matches!(
                e.action,
                TraceAction::SegmentFree | TraceAction::SegmentUnmap | TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::Oom
            );
            if !ladder_sign || (start > 0 && events[start - 1].action != TraceAction::FreeCompleted) {
                continue;
            }
            let mut k = start;
            while k > 0 && events[k - 1].action == TraceAction::FreeCompleted {
                k -= 1;
                by_sync[k] = true;
            }
        }
        let reading = Cow::Owned(Reading { entries: events.len(), calls: Vec::new(), by_sync, held_pairs: Vec::new(), pools: Overrides::new() });
        Driver {
            events,
            runs,
            reading,
            following: false,
            addr: AddrMap::default(),
            holds: AddrMap::default(),
            overdue: Vec::new(),
            hold_streams: HoldStreams::new(events),
            routing: PoolRouting::default(),
        }
    }

    /// A driver that follows `reading` (made by a judging driver over the
    /// same entries) instead of judging against its own model.
    /// `None` when `reading` is of another trace (another number of entries).
    pub fn following(events: &'a [TraceEntry], reading: &'a Reading) -> Option<Driver<'a>> {
        (reading.entries == events.len() && reading.by_sync.len() == events.len()).then(|| Driver {
            events,
            runs: Vec::new(),
            reading: Cow::Borrowed(reading),
            following: true,
            addr: AddrMap::default(),
            holds: AddrMap::default(),
            overdue: Vec::new(),
            hold_streams: HoldStreams::new(events),
            routing: PoolRouting::default(),
        })
    }

    /// The reading this driver judged (or followed).
    pub fn into_reading(self) -> Reading {
        self.reading.into_owned()
    }

    fn model_addr(&self, recorded: u64) -> Option<u64> {
        self.addr.get(&recorded).copied().unwrap_or(Some(recorded))
    }

    /// Applies entry `i`.
    pub fn step(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) -> Step {
        let e = &self.events[i];
        match e.action {
            TraceAction::Alloc => {
                let got = match self.routing.pool(i) {
                    Some(pool) => model.malloc_in_pool(e.size, StreamId(e.stream), pool),
                    None => model.malloc(e.size, StreamId(e.stream)),
                };
                model.device_mut().clear_queued_addresses();
                self.free_overdue(model);
                match &got {
                    Ok(p) => self.addr.insert(e.addr, Some(p.0)),
                    Err(_) => self.addr.insert(e.addr, None),
                };
                Step::Alloc(got)
            }
            TraceAction::FreeRequested => {
                let Some(p) = self.model_addr(e.addr) else { return Step::Other };
                let next = self.events.get(i + 1);
                let pair = next.is_some_and(|n| n.action == TraceAction::FreeCompleted && n.addr == e.addr);
                let held_pair = pair
                    && if self.following {
                        self.reading.held_pairs.binary_search(&i).is_ok()
                    } else {
                        self.freed_by_ladder_sync(model, i, DeviceAddr(p))
                    };
                if held_pair && !self.following {
                    self.reading.to_mut().held_pairs.push(i);
                }
                if !pair || held_pair {
                    let stream = self.hold_streams.for_request(i);
                    if model.record_stream(DeviceAddr(p), stream).is_ok() {
                        self.holds.insert(e.addr, stream);
                    }
                }
                let _ = model.free(DeviceAddr(p));
                Step::Other
            }
            TraceAction::FreeCompleted => {
                let run_start = i == 0 || self.events[i - 1].action != TraceAction::FreeCompleted;
                if !self.following && self.reading.by_sync[i] && run_start {
                    self.check_sync_run(model, i);
                }
                if let Some(stream) = self.holds.remove(&e.addr) {
                    if self.reading.by_sync[i] {
                        self.overdue.push(stream);
                    } else {
                        model.device_mut().complete_stream(stream);
                    }
                }
                self.addr.remove(&e.addr);
                Step::Other
            }
            // The recorded addresses are handed out again only where the
            // model is PyTorch (judging, under the recorded settings): under
            // other settings the device picks its own, as a driver would.
            TraceAction::SegmentAlloc => {
                if !self.following {
                    model.device_mut().push_address(e.addr);
                }
                Step::Other
            }
            TraceAction::SegmentMap => {
                // A map that grows or fills none of the model's reservations
                // is the first map of a new one, at the reservation's base.
                if !self.following && !model.device().in_mapped_span(e.addr) {
                    model.device_mut().push_reservation_address(e.addr);
                }
                Step::Other
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                // A release that frees a private pool's segment: every user
                // of the pool had released it by then.
                let run = self.events[i..].iter().take_while(|x| matches!(x.action, TraceAction::SegmentFree | TraceAction::SegmentUnmap));
                for j in i..i + run.count() {
                    if let Some(pool) = self.routing.pool(j) {
                        model.release_pool_entirely(pool);
                    }
                }
                let call = if self.following {
                    self.reading.calls.binary_search(&i).is_ok()
                } else {
                    let call = replay_as_empty_cache(&self.runs, self.events, i, model, !self.holds.is_empty());
                    // A retry ladder's last stage is replayed as a release
                    // here, where the model is PyTorch; under other settings
                    // only the user's calls are forced.
                    let users = self.runs.binary_search_by_key(&i, |r| r.0).is_ok_and(|k| self.runs[k].1 == ReleaseRun::EmptyCache);
                    if call && users {
                        self.reading.to_mut().calls.push(i);
                    }
                    call
                };
                if call {
                    model.empty_cache();
                }
                Step::Other
            }
            TraceAction::Oom => {
                let failed = model.malloc(e.size, StreamId(e.stream)).is_err();
                model.device_mut().clear_queued_addresses();
                self.free_overdue(model);
                Step::Oom { failed }
            }
            _ => Step::Other,
        }
    }

    /// The run of `free_completed` entries starting at `i` sits before a
    /// release, a new segment or an `oom`. A synchronisation (in
    /// `empty_cache()` or the ladder's last stage) frees every block still
    /// waiting on other streams, then releases every whole free segment.
    /// If the run leaves a block held, or what follows it is not that full
    /// release, it was no synchronisation: those blocks completed at the
    /// start of the `malloc`, before its cache search, garbage collection
    /// and targeted release.
    fn check_sync_run(&mut self, model: &CachingAllocator<SimDevice>, i: usize) {
        let run: Vec<u64> = self.events[i..].iter().take_while(|e| e.action == TraceAction::FreeCompleted).map(|e| e.addr).collect();
        let end = i + run.len();
        let synchronised = self.holds.keys().all(|a| run.contains(a)) && {
            // Garbage collection or the targeted stage of the same `malloc`
            // may have released segments just before; the model does that
            // in its own `malloc`, after this.
            let released_before = releases(self.events[..i].iter().rev());
            let mut plan = model.after_empty_cache().released().to_vec();
            plan.retain(|r| !released_before.contains(r));
            releases(self.events[end..].iter()) == plan
        };
        if !synchronised {
            self.reading.to_mut().by_sync[i..end].fill(false);
        }
    }

    /// A `free_requested` at `i` directly followed by its `free_completed`
    /// is usually a plain free, but a held block whose event the next
    /// request's retry ladder synchronised looks the same: the ladder's
    /// `free_completed` comes before its releases, new segment or `oom`.
    /// It was held if freeing it would have served that request from the
    /// cache: a plain free there would have left no ladder to record.
    fn freed_by_ladder_sync(&self, model: &CachingAllocator<SimDevice>, i: usize, p: DeviceAddr) -> bool {
        if !self.reading.by_sync.get(i + 1).copied().unwrap_or(false) {
            return false;
        }
        // Past the rest of the synchronisation's `free_completed` run.
        let rest = &self.events[i + 2..];
        let run = rest.iter().take_while(|e| e.action == TraceAction::FreeCompleted).count();
        request_after(&rest[run..]).is_some_and(|r| model.fits_in_cache_after_free(p, r.size, StreamId(r.stream)))
    }

    /// Frees the held blocks left to a synchronisation in the `malloc` just
    /// replayed, if the model's did not free them. It did not run, so
    /// PyTorch freed them at that `malloc`'s start, and they did not serve
    /// it: freed now, not at the next `malloc`, they merge with their
    /// neighbours before the entries that follow free those (which block
    /// survives a merge shows under torch 2.12's tie rule).
    fn free_overdue(&mut self, model: &mut CachingAllocator<SimDevice>) {
        if self.overdue.is_empty() {
            return;
        }
        for stream in self.overdue.drain(..) {
            model.device_mut().complete_stream(stream);
        }
        model.process_events();
    }

    /// After the last entry: free what completed but waits for a `malloc`,
    /// and the allocations a cut trace never frees.
    pub fn finish(&mut self, model: &mut CachingAllocator<SimDevice>, cut_frees: &[u64]) {
        for stream in self.overdue.drain(..) {
            model.device_mut().complete_stream(stream);
        }
        model.process_events();
        for &a in cut_frees {
            if let Some(p) = self.model_addr(a) {
                let _ = model.free(DeviceAddr(p));
            }
        }
    }

}

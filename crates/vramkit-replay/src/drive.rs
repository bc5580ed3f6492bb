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
//!   events are left for the model's synchronisation to complete; a run
//!   that no request, release or `oom` follows came from a synchronisation
//!   that released nothing, and the model frees its blocks there. A pair
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

use crate::blocks::Blocks;
use crate::plan::Plan;
use crate::pools::{Overrides, PoolRouting};
use crate::prepared::{Judged, PreparedTrace};
use crate::reading::Reading;
use crate::releases::{releases, replay_as_empty_cache, request_after, Release, ReleaseRun};
use std::borrow::Cow;
use vramkit_core::{CachingAllocator, DeviceAddr, Error, StreamId, TraceAction};
use vramkit_sim::SimDevice;
use vramkit_trace::{Entries, Entry};

/// Streams the driver makes up for held blocks start here, far from real handles.
const HOLD_STREAM_BASE: u64 = u64::MAX - (1 << 40);
/// A block's model address before the trace names it: its recorded one
/// (the start state is restored at the recorded addresses).
const RECORDED: u64 = u64::MAX;
/// A block's model address when the model failed its `alloc`.
const FAILED: u64 = u64::MAX - 1;
/// A block that waits on no event.
const NOT_HELD: StreamId = StreamId(0);

/// What one entry did to the model.
#[derive(Debug)]
pub(crate) enum Step {
    /// An `alloc`: the model's answer (the error boxed, see [`malloc`]).
    Alloc(Result<DeviceAddr, Box<Error>>),
    /// An `oom`: whether the model failed the request too.
    Oom { failed: bool },
    /// Anything else.
    Other,
}

pub(crate) struct Driver<'a> {
    events: &'a Entries,
    /// The block each entry concerns (`blocks`): the index of the two below.
    blocks: &'a Blocks,
    /// The release runs, classified (judging only).
    runs: &'a [(usize, ReleaseRun)],
    /// The reading so far (being judged) or the one to follow.
    reading: Cow<'a, Reading>,
    /// Follow `reading` instead of judging.
    following: bool,
    /// How each entry is applied (following only; empty when judging).
    plan: &'a [Plan],
    /// Per block: its address in the model, [`RECORDED`] or [`FAILED`].
    addr: Vec<u64>,
    /// Per block: the stream of the event it waits on (`record_stream`), or [`NOT_HELD`].
    hold: Vec<StreamId>,
    /// Blocks that wait on an event.
    held: usize,
    /// Held blocks whose `free_completed` was left to a synchronisation
    /// that may not come: freed after the next `malloc`.
    overdue: Vec<StreamId>,
    /// Held blocks whose free never completes in the trace so far.
    never_completed: u64,
    /// The private pool of each allocation and pool-segment release.
    routing: Cow<'a, PoolRouting>,
    /// The first run of releases (in a trace with private pools) that the
    /// model would not have released as an `empty_cache()`: where it
    /// starts, what PyTorch released and what the model would have.
    release_mismatch: Option<ReleaseMismatch>,
}

/// A run of releases PyTorch made that the model's `empty_cache()` would
/// not have made: (where the run starts, PyTorch's releases, the model's).
pub(crate) type ReleaseMismatch = (usize, Vec<Release>, Vec<Release>);

impl<'a> Driver<'a> {
    /// A driver that judges the reading against its own model, which must
    /// be under the recorded settings, routing the segments `pools` names
    /// to pools the snapshot does not name (see `pools`).
    pub fn judging(prepared: &'a PreparedTrace<'_>, pools: Overrides) -> Driver<'a> {
        let events = &prepared.trace().events;
        let actions = events.actions();
        // `free_completed` entries directly before a release, a new segment
        // or an `oom` may come from a synchronisation (`empty_cache()`, or
        // the retry ladder's last stage, after the cache search); entries
        // directly before an `alloc` served from the cache never do. The
        // candidates are marked here; `check_sync_run` keeps a run only if
        // it frees every held block and the full release follows.
        let mut by_sync = vec![false; actions.len()];
        for (start, &action) in actions.iter().enumerate() {
            let ladder_sign = matches!(
                action,
                TraceAction::SegmentFree | TraceAction::SegmentUnmap | TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::Oom
            );
            if !ladder_sign || (start > 0 && actions[start - 1] != TraceAction::FreeCompleted) {
                continue;
            }
            let mut k = start;
            while k > 0 && actions[k - 1] == TraceAction::FreeCompleted {
                k -= 1;
                by_sync[k] = true;
            }
        }
        let routing = prepared.route(&pools);
        let reading = Reading { entries: actions.len(), calls: Vec::new(), by_sync, held_pairs: Vec::new(), pools };
        Driver::with(prepared, prepared.runs(), Cow::Owned(reading), Cow::Owned(routing), &[], false)
    }

    /// A driver that follows the reading judged for `prepared` instead of
    /// judging against its own model.
    pub fn following(prepared: &'a PreparedTrace<'_>, judged: &'a Judged) -> Driver<'a> {
        Driver::with(prepared, &[], Cow::Borrowed(&judged.reading), Cow::Borrowed(&judged.routing), &judged.plan, true)
    }

    fn with(
        prepared: &'a PreparedTrace<'_>,
        runs: &'a [(usize, ReleaseRun)],
        reading: Cow<'a, Reading>,
        routing: Cow<'a, PoolRouting>,
        plan: &'a [Plan],
        following: bool,
    ) -> Driver<'a> {
        let blocks = prepared.blocks();
        Driver {
            events: &prepared.trace().events,
            blocks,
            runs,
            reading,
            following,
            plan,
            addr: vec![RECORDED; blocks.count()],
            hold: vec![NOT_HELD; blocks.count()],
            held: 0,
            overdue: Vec::new(),
            never_completed: 0,
            routing,
            release_mismatch: None,
        }
    }

    /// The last entry a judging driver may judge anything at, where no
    /// private pool is in question (no routing to judge): a release (an
    /// `empty_cache()` call or a ladder's), or a `free_completed` a
    /// synchronisation may have emitted (its run is judged at its start,
    /// the pair before it may be judged held). `None`: none, the reading
    /// is this driver's first one. Entries after it change nothing in the
    /// reading, only the model.
    pub fn last_judgement(&self) -> Option<usize> {
        let actions = self.events.actions();
        let release = actions.iter().rposition(|&a| matches!(a, TraceAction::SegmentFree | TraceAction::SegmentUnmap));
        let synchronised = self.reading.by_sync.iter().rposition(|&s| s);
        release.max(synchronised)
    }

    /// Lets the judging consider private pools for segments seen serving
    /// a `malloc` that processed events (see `pools`).
    pub fn relax_pool_event_rule(&mut self) {
        self.routing.to_mut().relax_event_rule();
    }

    /// Where each allocation went (see `pools`).
    pub fn routing(&self) -> &PoolRouting {
        &self.routing
    }

    /// The first run of releases the model would not have released as an
    /// `empty_cache()`, in a trace with private pools (a judging driver).
    pub fn release_mismatch(&self) -> Option<&ReleaseMismatch> {
        self.release_mismatch.as_ref()
    }

    /// Routes segment `k`, whose pool the snapshot does not name and which
    /// no entry has used yet, to a private pool of its own (a judging
    /// driver; see `pools`).
    pub fn route_to_own_pool(&mut self, k: usize) {
        self.routing.to_mut().route_to_own_pool(k);
        self.reading.to_mut().pools.insert(k, PoolRouting::own_pool(k));
    }

    /// Before the first entry: the start state's pending blocks wait on
    /// events like every other hold.
    pub fn begin(&mut self, model: &mut CachingAllocator<SimDevice>) {
        for p in model.held_addresses() {
            let block = self.blocks.at_start(p.0);
            debug_assert!(block.is_some(), "a held block of the start state is numbered");
            let stream = self.hold_stream(block.and_then(|b| self.blocks.completion_from_start(b)));
            if let Some(block) = block.filter(|_| model.hold_with_event(p, stream).is_ok()) {
                self.set_hold(block, stream);
            }
        }
    }

    /// The reading this driver judged (or followed), and the routing it followed.
    pub fn into_judgement(self) -> (Reading, PoolRouting) {
        (self.reading.into_owned(), self.routing.into_owned())
    }

    /// The model's address of `block`, recorded at `recorded`; `None` if
    /// the model failed its `alloc`.
    fn model_addr(&self, block: u32, recorded: u64) -> Option<u64> {
        match self.addr[block as usize] {
            RECORDED => Some(recorded),
            FAILED => None,
            addr => Some(addr),
        }
    }

    /// The stream of the event a held block waits on, whose free completes
    /// at entry `completion`: `HOLD_STREAM_BASE + entries - completion`, so
    /// the model (which walks streams from the highest handle down, in
    /// `process_events` and in a synchronisation) frees the blocks whose
    /// events complete together in the order of their entries, as PyTorch
    /// did. Blocks that never complete in the trace get handles above those.
    fn hold_stream(&mut self, completion: Option<usize>) -> StreamId {
        let entries = self.events.len() as u64;
        match completion {
            Some(j) => StreamId(HOLD_STREAM_BASE + entries - j as u64),
            None => {
                self.never_completed += 1;
                StreamId(HOLD_STREAM_BASE + entries + self.never_completed)
            }
        }
    }

    fn set_hold(&mut self, block: u32, stream: StreamId) {
        let slot = &mut self.hold[block as usize];
        self.held += usize::from(*slot == NOT_HELD);
        *slot = stream;
    }

    #[inline(always)]
    fn take_hold(&mut self, block: u32) -> Option<StreamId> {
        // Most traces hold nothing: then no block's slot is read (the
        // slots of blocks freed long after they were made are far apart).
        if self.held == 0 {
            return None;
        }
        let stream = std::mem::replace(&mut self.hold[block as usize], NOT_HELD);
        (stream != NOT_HELD).then(|| {
            self.held -= 1;
            stream
        })
    }

    /// Applies entry `i`.
    #[inline]
    pub fn step(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) -> Step {
        let e = self.events.get(i);
        self.apply(model, i, e)
    }

    /// Applies entry `i`, which is `e` (a caller walking the entries has it).
    #[inline]
    pub fn apply(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize, e: Entry) -> Step {
        match e.action {
            TraceAction::Alloc => {
                let got = match self.routing.pool(i) {
                    Some(pool) => model.malloc_in_pool(e.size, StreamId(e.stream), pool).map_err(Box::new),
                    None => malloc(model, e.size, StreamId(e.stream)),
                };
                Step::Alloc(self.allocated(model, i, got))
            }
            TraceAction::FreeRequested => {
                let block = self.blocks.of(i);
                let Some(p) = self.model_addr(block, e.addr) else { return Step::Other };
                let pair = self.events.actions().get(i + 1) == Some(&TraceAction::FreeCompleted) && self.events.addr(i + 1) == e.addr;
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
                    let stream = self.hold_stream(self.blocks.completion_of(i, self.events));
                    if model.record_stream(DeviceAddr(p), stream).is_ok() {
                        self.set_hold(block, stream);
                    }
                }
                free(model, DeviceAddr(p));
                Step::Other
            }
            TraceAction::FreeCompleted => {
                let run_start = i == 0 || self.events.actions()[i - 1] != TraceAction::FreeCompleted;
                if !self.following && self.reading.by_sync[i] && run_start {
                    self.check_sync_run(model, i);
                }
                self.completed(model, i);
                if self.freed_by_quiet_sync(i) {
                    model.process_events();
                }
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
                let actions = &self.events.actions()[i..];
                let run = actions.iter().take_while(|&&a| matches!(a, TraceAction::SegmentFree | TraceAction::SegmentUnmap));
                for j in i..i + run.count() {
                    if let Some(pool) = self.routing.pool(j) {
                        model.release_pool_entirely(pool);
                    }
                }
                let call = if self.following {
                    self.reading.calls.binary_search(&i).is_ok()
                } else {
                    let run_start = i == 0 || !matches!(self.events.actions()[i - 1], TraceAction::SegmentFree | TraceAction::SegmentUnmap);
                    let mut after = None;
                    if run_start && self.release_mismatch.is_none() && self.routing.uses_pools() {
                        let recorded = releases(self.events.iter_range(i..self.events.len()));
                        let model_after = model.after_empty_cache();
                        if recorded != model_after.released() {
                            self.release_mismatch = Some((i, recorded, model_after.released().to_vec()));
                        }
                        after = Some(model_after);
                    }
                    let request_pool = request_after(self.events, i).and_then(|(j, _)| self.routing.pool(j));
                    let judged = replay_as_empty_cache(self.runs, self.events, i, model, self.held > 0, after, request_pool);
                    // A retry ladder's last stage is replayed as a release
                    // here, where the model is PyTorch; under other settings
                    // only the user's calls are forced.
                    if judged == Some(ReleaseRun::EmptyCache) {
                        self.reading.to_mut().calls.push(i);
                    }
                    judged.is_some()
                };
                if call {
                    model.empty_cache();
                }
                Step::Other
            }
            TraceAction::Oom => {
                let failed = malloc(model, e.size, StreamId(e.stream)).is_err();
                self.clear_queued_addresses(model);
                self.free_overdue(model);
                Step::Oom { failed }
            }
            _ => Step::Other,
        }
    }

    /// The `malloc` of the `alloc` at `i` answered `got`: the driver's
    /// bookkeeping after it.
    #[inline(always)]
    fn allocated(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize, got: Result<DeviceAddr, Box<Error>>) -> Result<DeviceAddr, Box<Error>> {
        self.clear_queued_addresses(model);
        self.free_overdue(model);
        self.addr[self.blocks.of(i) as usize] = got.as_ref().map_or(FAILED, |p| p.0);
        got
    }

    /// The `free_completed` at `i`: a held block's event completes (or is
    /// left to the synchronisation that emitted the entry), and the block's
    /// recorded address is its name again.
    #[inline(always)]
    fn completed(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) {
        let block = self.blocks.of(i);
        if let Some(stream) = self.take_hold(block) {
            if self.reading.by_sync[i] {
                self.overdue.push(stream);
            } else {
                model.device_mut().complete_stream(stream);
            }
        }
        self.addr[block as usize] = RECORDED;
    }

    /// Forgets the plan: every entry goes through `apply` (tests compare).
    #[cfg(test)]
    pub fn without_plan(&mut self) {
        self.plan = &[];
    }

    /// How entry `i` is applied, when following a reading.
    #[inline(always)]
    pub fn plan(&self, i: usize) -> Plan {
        self.plan.get(i).copied().unwrap_or(Plan::Apply)
    }

    /// Applies entry `i` (`e`) as its [`Plan`] says, with what `apply`
    /// does there: a plan other than `Apply` is one of `apply`'s cases,
    /// told apart once per trace instead of at every entry.
    #[inline(always)]
    pub fn apply_planned(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize, plan: Plan) -> Step {
        // Each case reads only the columns it needs (a plain free's
        // completion none): no whole entry is built but for `apply`.
        match plan {
            Plan::Malloc | Plan::Temporary => {
                let got = malloc(model, self.events.size(i), StreamId(self.events.stream(i)));
                Step::Alloc(self.allocated(model, i, got))
            }
            Plan::Free => {
                self.free_planned(model, i);
                Step::Other
            }
            Plan::Completed => {
                self.completed(model, i);
                Step::Other
            }
            Plan::Apply => self.apply(model, i, self.events.get(i)),
        }
    }

    /// Applies the plain free at `i` ([`Plan::Free`]) and its completion
    /// at `i + 1` ([`Plan::Completed`], as `plan` pairs them) in one step:
    /// what `apply_planned` does to the two, one after the other.
    #[inline(always)]
    pub fn plain_free(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) {
        debug_assert_eq!((self.plan[i], self.plan[i + 1]), (Plan::Free, Plan::Completed));
        self.free_planned(model, i);
        self.completed(model, i + 1);
    }

    /// Applies the temporary at `i` ([`Plan::Temporary`]) and its plain
    /// free at `i + 1` and `i + 2` in one step, if the model takes it in
    /// one (`malloc_then_free`: a cache hit, so reserved bytes stay as
    /// they were); false: nothing was applied.
    #[inline(always)]
    pub fn temporary(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) -> bool {
        debug_assert_eq!((self.plan[i], self.plan[i + 1], self.plan[i + 2]), (Plan::Temporary, Plan::Free, Plan::Completed));
        // Held blocks left to a synchronisation are freed after a `malloc`.
        if !self.overdue.is_empty() || model.malloc_then_free(self.events.size(i), StreamId(self.events.stream(i))).is_none() {
            return false;
        }
        self.completed(model, i + 2);
        true
    }

    /// The plain free at `i` ([`Plan::Free`]): its block, unless the model failed its `alloc`.
    #[inline(always)]
    fn free_planned(&mut self, model: &mut CachingAllocator<SimDevice>, i: usize) {
        if let Some(p) = self.model_addr(self.blocks.of(i), self.events.addr(i)) {
            free(model, DeviceAddr(p));
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
        let run = self.events.actions()[i..].iter().take_while(|&&a| a == TraceAction::FreeCompleted).count();
        let end = i + run;
        // The held blocks the run completes: all of them?
        let mut completed: Vec<u32> = (i..end).map(|j| self.blocks.of(j)).filter(|&b| self.hold[b as usize] != NOT_HELD).collect();
        completed.sort_unstable();
        completed.dedup();
        let synchronised = completed.len() == self.held && {
            // Garbage collection or the targeted stage of the same `malloc`
            // may have released segments just before; the model does that
            // in its own `malloc`, after this.
            let released_before = releases(self.events.iter_range(0..i).rev());
            let mut plan = model.after_empty_cache().released().to_vec();
            plan.retain(|r| !released_before.contains(r));
            releases(self.events.iter_range(end..self.events.len())) == plan
        };
        if !synchronised {
            self.reading.to_mut().by_sync[i..end].fill(false);
        }
    }

    /// Whether the `free_completed` at `i`, not a plain free's, ends a run
    /// that no `malloc` emitted: what follows the run is no `alloc`, `oom`
    /// or segment event (nor the trace's end). PyTorch completes held
    /// blocks' frees only at a `malloc`'s start or in a synchronisation
    /// (an `empty_cache()` that released nothing shows only this run): it
    /// freed these blocks here, before the entries that follow, so the
    /// model frees them now too rather than at its next `malloc` (which
    /// block survives a merge with a block freed in between shows under
    /// torch 2.12's tie rule).
    fn freed_by_quiet_sync(&self, i: usize) -> bool {
        let actions = self.events.actions();
        let plain = i > 0 && actions[i - 1] == TraceAction::FreeRequested && self.events.addr(i - 1) == self.events.addr(i);
        !plain
            && actions.get(i + 1).is_some_and(|&a| {
                !matches!(
                    a,
                    TraceAction::FreeCompleted
                        | TraceAction::Alloc
                        | TraceAction::Oom
                        | TraceAction::SegmentAlloc
                        | TraceAction::SegmentMap
                        | TraceAction::SegmentFree
                        | TraceAction::SegmentUnmap
                )
            })
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
        let rest = self.events.actions().get(i + 2..).unwrap_or_default();
        let run = rest.iter().take_while(|&&a| a == TraceAction::FreeCompleted).count();
        // The request's own pool: a capture may route it to a private one.
        request_after(self.events, i + 2 + run)
            .is_some_and(|(j, r)| model.fits_in_cache_after_free_in(p, r.size, StreamId(r.stream), self.routing.pool(j)))
    }

    /// Drops the recorded addresses the `malloc` just replayed did not take
    /// (only a judging driver hands them out).
    #[inline]
    fn clear_queued_addresses(&self, model: &mut CachingAllocator<SimDevice>) {
        if !self.following {
            model.device_mut().clear_queued_addresses();
        }
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
            let p = match self.blocks.open_at_end(a) {
                Some(block) => self.model_addr(block, a),
                None => Some(a),
            };
            if let Some(p) = p {
                free(model, DeviceAddr(p));
            }
        }
    }

}

/// The model's `malloc`, called rather than inlined: vramkit-core inlines
/// its cache-hit path whole into a caller (the pair then makes no call),
/// which in the driver's per-entry step costs more in register spills
/// than the call (callgrind: 3% more instructions per replayed entry).
/// The error is boxed so that the answer fits in two registers: a
/// `Result<DeviceAddr, Error>` comes back through memory, written in parts
/// and read back whole, which the processor cannot forward (perf showed
/// the step stalled on that read at every `alloc`).
#[inline(never)]
fn malloc(model: &mut CachingAllocator<SimDevice>, size: u64, stream: StreamId) -> Result<DeviceAddr, Box<Error>> {
    model.malloc(size, stream).map_err(Box::new)
}

/// The model's `free` (see [`malloc`]); a refusal changes nothing to replay.
#[inline(never)]
fn free(model: &mut CachingAllocator<SimDevice>, p: DeviceAddr) {
    let _ = model.free(p);
}

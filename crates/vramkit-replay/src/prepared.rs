//! [`PreparedTrace`]: a device trace with everything that does not depend
//! on the settings replayed worked out once.
//!
//! Every question vramkit answers about a trace starts from the same
//! facts: the state at the window's first entry (rebuilt backwards from the
//! end state), the release runs and the device capacity they imply, and
//! the reading judged by a replay under the recorded settings (which runs
//! were `empty_cache()` calls, which frees were held, which segments were
//! private pools'). None of them depends on the settings a what-if replay
//! runs under, so they are worked out here, once per trace: the start state
//! and the runs when the value is made, the reading the first time a
//! replay needs it (or when `verify` makes it). Then `tune` replays every
//! candidate, `doctor` explains, `report` draws and `verify` checks from
//! this one value.
//!
//! This file holds the facts only. The questions are methods of
//! [`PreparedTrace`] written beside the code that answers them
//! (`verify`: the reading, `verify()`; `model`: `model_replay`; `oracle`:
//! `oracle_replay`; `doctor`: `explain_oom`), so every module depends on
//! this one and this one on none of them.

use crate::blocks::Blocks;
use crate::plan::Plan;
use crate::pools::{Overrides, PoolRouting};
use crate::reading::Reading;
use crate::releases::{classify_with_capacity, ReleaseRun};
use crate::trace::DeviceTrace;
use crate::window::{rebuild_start, StartState};
use crate::ReplayError;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};
use vramkit_core::{AllocatorConfig, CachingAllocator, TraceAction};
use vramkit_sim::SimDevice;

/// A device trace, prepared for any number of replays under any settings.
#[derive(Debug)]
pub struct PreparedTrace<'t> {
    /// Borrowed, or owned by a prepared trace that outlives its source.
    trace: Cow<'t, DeviceTrace>,
    /// The settings the trace was recorded with.
    recorded: AllocatorConfig,
    /// The capacity of the device it was recorded on, where known.
    recorded_capacity_bytes: Option<u64>,
    /// The state at the window's first entry.
    start: StartState,
    /// The runs of releases, classified with the capacity rule.
    runs: Vec<(usize, ReleaseRun)>,
    /// The capacity the trace implies (see [`PreparedTrace::inferred_capacity`]).
    inferred_capacity_bytes: Option<u64>,
    /// The highest end of any range the trace, its end state or its start
    /// state mention: model replays hand out new segments above it.
    top_address: u64,
    /// The block each entry concerns, numbered.
    blocks: Blocks,
    /// The reading and the routing it implies, judged once.
    judged: OnceLock<Result<Judged, ReplayError>>,
    /// The lower bound of a replay that failed no allocation, by the page
    /// it rounds to and the entries it applied (`model`: `lower_bound`),
    /// once asked for.
    lower_bounds: Mutex<Vec<((u64, usize), u64)>>,
}

/// What the replay under the recorded settings found, which every other
/// replay follows.
#[derive(Debug)]
pub(crate) struct Judged {
    pub(crate) reading: Arc<Reading>,
    /// Where each allocation went (see `pools`), under that reading.
    pub(crate) routing: PoolRouting,
    /// How a driver following them applies each entry (see `drive`).
    pub(crate) plan: Vec<Plan>,
}

impl Judged {
    /// The judgement of `trace`'s entries: `reading`, with `routing`.
    pub(crate) fn new(trace: &DeviceTrace, reading: Arc<Reading>, routing: PoolRouting) -> Judged {
        let plan = crate::plan::plan(&trace.events, &reading, &routing);
        Judged { reading, routing, plan }
    }
}

impl<'t> PreparedTrace<'t> {
    /// Prepares `trace`, recorded under `recorded` on a device of
    /// `recorded_capacity_bytes` (`None`: unknown; refusals in the trace
    /// then imply one): rebuilds the window's start state and classifies
    /// the release runs. Fails when the start state cannot be rebuilt.
    /// The trace is borrowed (`&DeviceTrace`) or kept (`DeviceTrace`).
    pub fn new(
        trace: impl Into<Cow<'t, DeviceTrace>>,
        recorded: AllocatorConfig,
        recorded_capacity_bytes: Option<u64>,
    ) -> Result<PreparedTrace<'t>, ReplayError> {
        let trace = trace.into();
        let events = &trace.events;
        // The entries' blocks and highest address need no start state: worked
        // out on a second core meanwhile.
        let (start, (mut blocks, top_entry)) = rayon::join(
            || rebuild_start(&trace, &recorded),
            || {
                rayon::join(
                    || Blocks::number(events),
                    || {
                        let ends = events.actions().iter().zip(events.addrs().zip(events.sizes()));
                        ends.filter(|&(&a, _)| a != TraceAction::Oom).map(|(_, (addr, size))| addr + size).max().unwrap_or(0)
                    },
                )
            },
        );
        let start = start?;
        let start_reserved = start.segments.iter().map(|s| s.total_size).sum();
        let (runs, inferred_capacity_bytes) = classify_with_capacity(&trace.events, start_reserved, &recorded, recorded_capacity_bytes);
        let top_address =
            trace.end_segments.iter().chain(&start.segments).map(|s| s.address + s.total_size).max().unwrap_or(0).max(top_entry);
        let live_at_start = start.segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()).map(|b| b.address);
        blocks.add_start(live_at_start);
        Ok(PreparedTrace {
            trace,
            recorded,
            recorded_capacity_bytes,
            start,
            runs,
            inferred_capacity_bytes,
            top_address,
            blocks,
            judged: OnceLock::new(),
            lower_bounds: Mutex::new(Vec::new()),
        })
    }

    /// The trace.
    pub fn trace(&self) -> &DeviceTrace {
        &self.trace
    }

    /// The settings it was recorded with.
    pub fn recorded(&self) -> &AllocatorConfig {
        &self.recorded
    }

    /// The capacity of the device it was recorded on, as given.
    pub fn recorded_capacity(&self) -> Option<u64> {
        self.recorded_capacity_bytes
    }

    /// The state at the window's first entry.
    pub fn start(&self) -> &StartState {
        &self.start
    }

    /// The device capacity the trace implies under the recorded settings:
    /// the highest reserved level it reaches, when it shows a refused
    /// `cudaMalloc` or an `oom`; `None` (unlimited) otherwise.
    pub fn inferred_capacity(&self) -> Option<u64> {
        self.inferred_capacity_bytes
    }

    /// The release runs, classified with the capacity rule (`releases`).
    pub(crate) fn runs(&self) -> &[(usize, ReleaseRun)] {
        &self.runs
    }

    /// The highest end of any range the trace and its states mention.
    pub(crate) fn top_address(&self) -> u64 {
        self.top_address
    }

    /// Where each allocation went (see `pools`), with the segments
    /// `overrides` names routed as it says.
    pub(crate) fn route(&self, overrides: &Overrides) -> PoolRouting {
        let pools_skip_events = !self.recorded.compat.capture_guards_ask_the_stream;
        crate::pools::route(&self.trace, &self.start.segments, overrides, pools_skip_events)
    }

    /// The block each entry concerns.
    pub(crate) fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// The reading and routing judged once (see `verify`), if they were.
    pub(crate) fn judged_once(&self) -> &OnceLock<Result<Judged, ReplayError>> {
        &self.judged
    }

    /// The lower bounds kept (see `model`: `lower_bound`).
    pub(crate) fn lower_bounds(&self) -> &Mutex<Vec<((u64, usize), u64)>> {
        &self.lower_bounds
    }

    /// An allocator in the start state under `config`, on `device`
    /// holding the start segments.
    pub(crate) fn start_model(&self, config: &AllocatorConfig, device: SimDevice) -> Result<CachingAllocator<SimDevice>, ReplayError> {
        // Restored first: it refuses segments that overlap, which the device
        // would not take over.
        let mut model = CachingAllocator::restore(device, config.clone(), &self.start.segments)?;
        for s in &self.start.segments {
            model.device_mut().adopt(s.address, s.total_size);
        }
        Ok(model)
    }
}

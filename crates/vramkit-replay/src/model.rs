//! Model replay: a `CachingAllocator<SimDevice>` decides placement under
//! any settings, from the rebuilt start state, driven by the trace's
//! allocations, frees and `empty_cache()` calls.
//!
//! New segments get addresses above every address the trace mentions, in
//! allocation order, so results never depend on an arbitrary base.

use crate::drive::{Driver, Step};
use crate::metrics::{LowerBound, Metrics, Sample, Timeline};
use crate::plan::Plan;
use crate::prepared::PreparedTrace;
use crate::reading::Reading;
use crate::trace::DeviceTrace;
use crate::ReplayError;
use std::sync::{Arc, PoisonError};
use vramkit_core::{AllocatorConfig, CachingAllocator, Error, SegmentInfo, TraceAction};
use vramkit_sim::SimDevice;

/// How to run a model replay.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// The settings to replay under.
    pub config: AllocatorConfig,
    /// The settings the trace was recorded with (they fix the start state's block sizes).
    pub recorded: AllocatorConfig,
    /// Device bytes the allocator may use; `None`: unlimited.
    pub capacity_bytes: Option<u64>,
    /// The capacity of the device the trace was recorded on, if known
    /// (tells `empty_cache()` calls from refusals more precisely).
    pub recorded_capacity_bytes: Option<u64>,
    /// Timeline points to keep (0: none).
    pub timeline_points: usize,
    /// How to read the trace (see [`Reading`]); `None`: judged first by a
    /// pass under the recorded settings ([`crate::verify::reading`]). Give
    /// it when replaying one trace many times.
    pub reading: Option<Arc<Reading>>,
}

impl ModelOptions {
    /// The options `vramkit replay --conf` runs with: `config` against
    /// `capacity_bytes`, no recorded capacity, no timeline. `tune` evaluates
    /// every candidate with these, so its figures are the ones `replay` prints.
    pub fn for_conf(config: AllocatorConfig, recorded: AllocatorConfig, capacity_bytes: Option<u64>) -> ModelOptions {
        ModelOptions { config, recorded, capacity_bytes, recorded_capacity_bytes: None, timeline_points: 0, reading: None }
    }
}

impl ModelOptions {
    /// `trace`, prepared as these options say it was recorded (following
    /// their reading, if they give one).
    fn prepare<'t>(&self, trace: &'t DeviceTrace) -> Result<PreparedTrace<'t>, ReplayError> {
        let prepared = PreparedTrace::new(trace, self.recorded.clone(), self.recorded_capacity_bytes)?;
        if let Some(reading) = &self.reading {
            prepared.follow(reading.clone())?;
        }
        Ok(prepared)
    }
}

/// Replays `trace` under `options.config` (one replay: to replay a trace
/// many times, prepare it once, [`PreparedTrace::model_replay`]).
pub fn model_replay(trace: &DeviceTrace, options: &ModelOptions) -> Result<Metrics, ReplayError> {
    options.prepare(trace)?.model_replay(&options.config, options.capacity_bytes, options.timeline_points)
}

/// The model's state when reserved bytes first reached their peak.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeakState {
    /// Trace entries applied by then (as [`Sample::event`] counts them; 0: the start state).
    pub event: u64,
    /// The segments, sorted by address.
    pub segments: Vec<SegmentInfo>,
}

/// Like [`model_replay`], and also returns the state at the peak.
pub fn model_replay_at_peak(trace: &DeviceTrace, options: &ModelOptions) -> Result<(Metrics, PeakState), ReplayError> {
    options.prepare(trace)?.model_replay_at_peak(&options.config, options.capacity_bytes, options.timeline_points)
}

/// A replay's figures so far, each of which only grows as it goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SoFar {
    /// Allocations failed so far.
    pub oom_count: u64,
    /// Highest reserved bytes so far.
    pub peak_reserved_bytes: u64,
    /// `cudaMalloc` plus `cudaFree` (or map plus unmap) calls so far.
    pub device_calls: u64,
}

/// A model replay of `prepared` under `config`.
pub(crate) fn run(
    prepared: &PreparedTrace<'_>,
    config: &AllocatorConfig,
    capacity_bytes: Option<u64>,
    timeline_points: usize,
    keep_peak: bool,
) -> Result<(Metrics, Option<PeakState>), ReplayError> {
    run_watching(prepared, config, capacity_bytes, timeline_points, keep_peak, &[]).0
}

/// What a replay gave, and the watched `max_split_size_mb` values it was
/// alike under ([`ModelRun::max_split_sizes_alike`]).
pub(crate) type Watched<T> = (Result<T, ReplayError>, Vec<u64>);

/// [`run`], the model watching the `max_split_size_mb` values `limits`.
pub(crate) fn run_watching(
    prepared: &PreparedTrace<'_>,
    config: &AllocatorConfig,
    capacity_bytes: Option<u64>,
    timeline_points: usize,
    keep_peak: bool,
    limits: &[u64],
) -> Watched<(Metrics, Option<PeakState>)> {
    let mut run = match ModelRun::start(prepared, config, capacity_bytes, timeline_points, keep_peak, limits) {
        Ok(run) => run,
        Err(e) => return (Err(e), Vec::new()),
    };
    if let Err(e) = run.advance(usize::MAX) {
        return (Err(e), Vec::new());
    }
    let alike = run.max_split_sizes_alike();
    (Ok(run.finish()), alike)
}

/// A model replay under way, entry by entry from the start state: it can
/// pause between entries and go on later ([`ModelRun::advance`]), and
/// [`ModelRun::finish`] gives the figures of the entries applied.
pub(crate) struct ModelRun<'a> {
    prepared: &'a PreparedTrace<'a>,
    model: CachingAllocator<SimDevice>,
    driver: Driver<'a>,
    /// The page the lower bound rounds large bytes to (`LowerBound`).
    large_page: u64,
    /// The `alloc` entries the model failed, ascending: the lower bound
    /// leaves them out (worked out at the end, `PreparedTrace::lower_bound`).
    failed_allocs: Vec<usize>,
    m: Metrics,
    timeline: Timeline,
    timeline_points: usize,
    keep_peak: bool,
    peak_reserved: u64,
    largest_at_peak: u64,
    peak: Option<PeakState>,
    /// Entries applied.
    applied: usize,
}

impl<'a> ModelRun<'a> {
    /// A replay of `prepared` under `config` on a device of
    /// `capacity_bytes` (`None`: unlimited), in its start state, keeping
    /// about `timeline_points` samples and, if `keep_peak`, the state when
    /// reserved bytes first reached their peak; the model watches the
    /// `max_split_size_mb` values `limits` from its start state on (see
    /// [`ModelRun::max_split_sizes_alike`]). A following driver asks the
    /// model nothing but its own operations, so the watch covers every
    /// decision of the replay.
    pub(crate) fn start(
        prepared: &'a PreparedTrace<'_>,
        config: &AllocatorConfig,
        capacity_bytes: Option<u64>,
        timeline_points: usize,
        keep_peak: bool,
        limits: &[u64],
    ) -> Result<ModelRun<'a>, ReplayError> {
        let trace = prepared.trace();
        let base = (prepared.top_address() + SimDevice::DEFAULT_GRANULARITY).next_multiple_of(SimDevice::DEFAULT_GRANULARITY);
        let device = SimDevice::new(capacity_bytes.unwrap_or(u64::MAX))
            .with_base_address(base)
            .with_event_mode(vramkit_sim::EventMode::Manual)
            .with_first_fit();
        let mut model = prepared.start_model(config, device)?;
        if !limits.is_empty() {
            model.watch_max_split_sizes(limits);
        }
        let large_page = if config.expandable_segments { config.large_segment_size_bytes } else { 0 };
        let m = Metrics { events: trace.events.len() as u64, ..Metrics::default() };
        let timeline = Timeline::new(m.events, timeline_points);
        let mut driver = prepared.following_driver()?;
        driver.begin(&mut model);
        let peak = keep_peak.then(|| PeakState { event: 0, segments: model.segments() });
        Ok(ModelRun {
            prepared,
            model,
            driver,
            large_page,
            failed_allocs: Vec::new(),
            m,
            timeline,
            timeline_points,
            keep_peak,
            peak_reserved: 0,
            largest_at_peak: 0,
            peak,
            applied: 0,
        })
    }

    /// The watched `max_split_size_mb` values a replay of the entries
    /// applied so far, under the same settings but that limit, cannot be
    /// told from this one by: the same figures, entry for entry.
    pub(crate) fn max_split_sizes_alike(&self) -> Vec<u64> {
        self.model.max_split_sizes_alike()
    }

    /// Entries applied so far.
    pub(crate) fn applied(&self) -> usize {
        self.applied
    }

    /// Every entry is applied.
    pub(crate) fn done(&self) -> bool {
        self.applied == self.prepared.trace().events.len()
    }

    /// The figures so far.
    pub(crate) fn so_far(&self) -> SoFar {
        let (peak_reserved_bytes, device_calls) = self.model.peak_reserved_and_device_calls();
        SoFar { oom_count: self.m.oom_count, peak_reserved_bytes, device_calls }
    }

    /// Applies the entries before `until` (cut at the trace's end).
    pub(crate) fn advance(&mut self, until: usize) -> Result<(), ReplayError> {
        let (trace, m) = (self.prepared.trace(), &mut self.m);
        let (from, until) = (self.applied, until.min(trace.events.len()));
        // No timeline: a plain free's two entries go in one step (nothing
        // is sampled between them, and its completion changes only the
        // driver's records), and only a request is checked for a new peak.
        let unsampled = !self.timeline.enabled();
        let mut i = from;
        while i < until {
            let plan = self.driver.plan(i);
            if unsampled && plan == Plan::Free && i + 1 < until {
                self.driver.plain_free(&mut self.model, i);
                i += 2;
                continue;
            }
            // A temporary taken in one step is a cache hit: reserved bytes
            // stay at or below the peak seen at the last request (none yet,
            // `peak_reserved` 0: the start state's bytes are not counted
            // until one is seen).
            if plan == Plan::Temporary && unsampled && self.peak_reserved > 0 && i + 2 < until && self.driver.temporary(&mut self.model, i) {
                i += 3;
                continue;
            }
            match self.driver.apply_planned(&mut self.model, i, plan) {
                Step::Alloc(Err(e)) if matches!(*e, Error::OutOfMemory(_)) => {
                    self.failed_allocs.push(i);
                    m.oom_count += 1;
                    m.first_oom_event.get_or_insert(i as u64);
                }
                Step::Alloc(Err(other)) => return Err(ReplayError::Model(other.to_string())),
                // The request that failed in PyTorch, asked again: under these
                // settings it may fit, and if it fails it counts as the oracle counts it.
                Step::Oom { failed: true } => {
                    m.oom_count += 1;
                    m.first_oom_event.get_or_insert(i as u64);
                }
                _ => {}
            }
            // Entries applied, this one included.
            i += 1;
            let event = i as u64;
            // Reserved bytes grow only in a request (or a release run's
            // synchronisation, which `Apply` covers): a free leaves the peak.
            if !plan.may_reserve() && unsampled {
                continue;
            }
            let now = self.model.current_bytes();
            if now.reserved > self.peak_reserved {
                self.peak_reserved = now.reserved;
                if self.keep_peak || self.timeline_points > 0 {
                    self.largest_at_peak = self.model.largest_free_block();
                }
                if self.keep_peak {
                    self.peak = Some(PeakState { event, segments: self.model.segments() });
                }
                m.waste_bytes_at_peak = now.reserved.saturating_sub(now.allocated);
            }
            self.timeline.push(Sample {
                event,
                allocated_bytes: now.allocated,
                reserved_bytes: now.reserved,
                requested_bytes: now.requested,
            });
        }
        self.applied = self.applied.max(until);
        Ok(())
    }

    /// The figures of the entries applied (`events` counts them), and the
    /// state at the peak if it was kept.
    pub(crate) fn finish(mut self) -> (Metrics, Option<PeakState>) {
        self.timeline.flush();
        let mut m = self.m;
        let st = self.model.stats();
        m.events = self.applied as u64;
        m.peak_reserved_bytes = st.reserved_bytes.all.peak as u64;
        m.peak_allocated_bytes = st.allocated_bytes.all.peak as u64;
        m.peak_requested_bytes = st.requested_bytes.all.peak as u64;
        m.peak_inactive_split_bytes = st.inactive_split_bytes.all.peak as u64;
        m.device_mallocs = st.num_device_alloc as u64;
        m.device_frees = st.num_device_free as u64;
        m.alloc_retries = st.num_alloc_retries as u64;
        m.largest_free_block_at_peak = self.largest_at_peak;
        m.lower_bound_bytes = self.prepared.lower_bound(self.large_page, self.applied, &self.failed_allocs);
        m.utilization = if m.peak_reserved_bytes == 0 { 0.0 } else { m.peak_allocated_bytes as f64 / m.peak_reserved_bytes as f64 };
        m.timeline = self.timeline.samples;
        (m, self.peak)
    }
}

/// Model replays are questions asked of a prepared trace.
impl PreparedTrace<'_> {
    /// The lower bound of a model replay ([`Metrics::lower_bound_bytes`]):
    /// the peak of the bytes live over the entries before `upto`, each
    /// rounded as the allocator must (large ones to `large_page`), where
    /// the model failed the `alloc` entries `failed` (ascending) and no
    /// others. It depends on the settings only through those two, so it
    /// is worked out once a replay ends rather than at every entry, and
    /// kept where no allocation failed (every candidate of a `tune` that
    /// fits asks for the whole trace's, and those that stop, for the
    /// trace up to one of a few places).
    pub(crate) fn lower_bound(&self, large_page: u64, upto: usize, failed: &[usize]) -> u64 {
        let events = &self.trace().events;
        let upto = upto.min(events.len());
        let kept = |cache: &Vec<((u64, usize), u64)>| cache.iter().find(|&&(key, _)| key == (large_page, upto)).map(|&(_, peak)| peak);
        let keep = failed.is_empty();
        if keep {
            if let Some(peak) = kept(&self.lower_bounds().lock().unwrap_or_else(PoisonError::into_inner)) {
                return peak;
            }
        }
        let mut lower = LowerBound::new(large_page);
        for b in self.start().segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()) {
            lower.add(b.requested_size);
        }
        let blocks = self.blocks();
        // Per block: the bytes it asked for (none: a block of the start
        // state, whose free entry tells), and whether the model failed it.
        let mut requested: Vec<Option<u64>> = vec![None; blocks.count()];
        let mut failed_block = vec![false; blocks.count()];
        let mut failed = failed.iter().copied().peekable();
        // Two columns walked together; an entry's size read where it counts.
        let columns = events.actions()[..upto].iter().zip(&blocks.column()[..upto]);
        for (i, (&action, &b)) in columns.enumerate() {
            match action {
                TraceAction::Alloc => {
                    let b = b as usize;
                    if failed.next_if_eq(&i).is_some() {
                        failed_block[b] = true;
                    } else {
                        let size = events.size(i);
                        requested[b] = Some(size);
                        lower.add(size);
                    }
                }
                TraceAction::FreeCompleted => {
                    let b = b as usize;
                    if !std::mem::take(&mut failed_block[b]) {
                        lower.remove(requested[b].take().unwrap_or_else(|| events.size(i)));
                    }
                }
                _ => {}
            }
        }
        if keep {
            let mut cache = self.lower_bounds().lock().unwrap_or_else(PoisonError::into_inner);
            if kept(&cache).is_none() {
                cache.push(((large_page, upto), lower.peak));
            }
        }
        lower.peak
    }

    /// A model replay under `config` on a device of `capacity_bytes`
    /// (`None`: unlimited), keeping about `timeline_points` samples.
    pub fn model_replay(&self, config: &AllocatorConfig, capacity_bytes: Option<u64>, timeline_points: usize) -> Result<Metrics, ReplayError> {
        run(self, config, capacity_bytes, timeline_points, false).map(|(m, _)| m)
    }

    /// Like [`model_replay`](Self::model_replay), and also the state when
    /// reserved bytes first reached their peak.
    pub fn model_replay_at_peak(
        &self,
        config: &AllocatorConfig,
        capacity_bytes: Option<u64>,
        timeline_points: usize,
    ) -> Result<(Metrics, PeakState), ReplayError> {
        run(self, config, capacity_bytes, timeline_points, true).map(|(m, s)| (m, s.unwrap_or_default()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vramkit_core::{DeviceAddr, HistoryConfig, StreamId};
    use vramkit_sim::{EventMode, XorShift};

    /// A program on two streams that also uses blocks on side streams
    /// (`record_stream`), so some frees are held and some completions come
    /// from a synchronisation, with `empty_cache()` calls and refusals.
    pub(crate) fn recorded(seed: u64, capacity: u64) -> DeviceTrace {
        crate::sampled_invariant_checks();
        let device = SimDevice::new(capacity).with_event_mode(EventMode::Manual).with_first_fit();
        let mut a = CachingAllocator::new(device, AllocatorConfig::pytorch_default());
        a.record_history(Some(HistoryConfig::default()));
        let mut rng = XorShift::new(seed | 1);
        let mut live: Vec<DeviceAddr> = Vec::new();
        for _ in 0..3000 {
            match rng.below(20) {
                0..=9 => {
                    let size = if rng.below(2) == 0 { 1 + rng.below(1 << 20) } else { (1 << 20) + rng.below(40 << 20) };
                    if let Ok(p) = a.malloc(size, StreamId(rng.below(2) * 7)) {
                        live.push(p);
                    }
                }
                10..=16 if !live.is_empty() => {
                    let p = live.swap_remove(rng.below(live.len() as u64) as usize);
                    if rng.below(4) == 0 {
                        a.record_stream(p, StreamId(1000 + rng.below(2))).unwrap();
                    }
                    a.free(p).unwrap();
                }
                17 => a.device_mut().complete_stream(StreamId(1000 + rng.below(2))),
                18 if rng.below(5) == 0 => a.empty_cache(),
                _ => {}
            }
        }
        DeviceTrace::split(&a.snapshot()).remove(0)
    }

    /// A replay that takes the planned paths gives what one that sends
    /// every entry through `Driver::apply` gives: figures, timeline and
    /// the state at the peak, under several settings and capacities.
    #[test]
    fn planned_entries_replay_as_applied_ones() {
        let (mut planned_frees, mut temporaries) = (0, 0);
        for seed in 1..=6 {
            let capacity = if seed % 2 == 0 { 1 << 30 } else { u64::MAX };
            let trace = recorded(seed, capacity);
            let recorded = AllocatorConfig::pytorch_default();
            let prepared = PreparedTrace::new(&trace, recorded.clone(), (capacity != u64::MAX).then_some(capacity)).unwrap();
            let plan = &prepared.judged().unwrap().plan;
            planned_frees += plan.iter().filter(|&&p| p == crate::plan::Plan::Free).count();
            temporaries += plan.iter().filter(|&&p| p == crate::plan::Plan::Temporary).count();
            for conf in ["", "max_split_size_mb:20", "expandable_segments:True", "roundup_power2_divisions:4"] {
                let config = AllocatorConfig::parse(conf).unwrap();
                for (capacity, points) in [(None, 0), (None, 64), (Some(capacity / 2), 0), (Some(capacity / 2), 64)] {
                    let replay = |plan: bool| {
                        let mut run = ModelRun::start(&prepared, &config, capacity, points, true, &[]).unwrap();
                        if !plan {
                            run.driver.without_plan();
                        }
                        run.advance(usize::MAX).unwrap();
                        run.finish()
                    };
                    assert_eq!(replay(true), replay(false), "seed {seed}, {conf:?}, capacity {capacity:?}, {points} points");
                }
            }
        }
        assert!(planned_frees > 1000, "the plan covers the plain frees ({planned_frees})");
        assert!(temporaries > 50, "and the temporaries ({temporaries})");
    }

    /// The same on a training-like trace, a third of whose requests are
    /// temporaries (most taken in one step, under settings that leave
    /// them cache hits): the figures and the state at the peak of a
    /// replay through the plan are those of one through `Driver::apply`.
    #[test]
    fn temporaries_replay_as_applied_ones() {
        let trace = DeviceTrace::split(&crate::synthetic::record(&crate::synthetic::Workload::new(30_000))).remove(0);
        let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), None).unwrap();
        let temporaries = prepared.judged().unwrap().plan.iter().filter(|&&p| p == crate::plan::Plan::Temporary).count();
        assert!(temporaries > 2500, "{temporaries} temporaries");
        let confs = ["", "max_split_size_mb:64", "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", "roundup_power2_divisions:4", "expandable_segments:True"];
        for conf in confs {
            let config = AllocatorConfig::parse(conf).unwrap();
            for capacity in [None, Some(3 << 30)] {
                let replay = |plan: bool| {
                    let mut run = ModelRun::start(&prepared, &config, capacity, 0, true, &[64 << 20, 256 << 20]).unwrap();
                    if !plan {
                        run.driver.without_plan();
                    }
                    run.advance(usize::MAX).unwrap();
                    let alike = run.max_split_sizes_alike();
                    (run.finish(), alike)
                };
                let ((planned, planned_peak), planned_alike) = replay(true);
                let ((applied, applied_peak), applied_alike) = replay(false);
                assert_eq!(planned, applied, "{conf:?}, capacity {capacity:?}");
                assert!(planned_peak == applied_peak, "{conf:?}, capacity {capacity:?}: the state at the peak");
                assert_eq!(planned_alike, applied_alike, "{conf:?}, capacity {capacity:?}");
            }
        }
    }

    /// The lower bound worked out when a replay ends is the one kept entry
    /// by entry, by address: the model's failed allocations left out, up
    /// to where the replay stopped; and a whole trace's, kept, is the same
    /// when asked again.
    #[test]
    fn the_lower_bound_leaves_out_failed_allocations_up_to_where_the_replay_stopped() {
        let mut failures = 0;
        for seed in 1..=4 {
            let capacity = 1 << 30;
            let trace = recorded(seed, capacity);
            let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), Some(capacity)).unwrap();
            let events = &trace.events;
            for (conf, limit) in [("", None), ("", Some(capacity / 3)), ("expandable_segments:True", Some(capacity / 4))] {
                let config = AllocatorConfig::parse(conf).unwrap();
                for upto in [events.len() / 3, events.len()] {
                    let mut run = ModelRun::start(&prepared, &config, limit, 0, false, &[]).unwrap();
                    run.advance(upto).unwrap();
                    let (failed, page) = (run.failed_allocs.clone(), run.large_page);
                    failures += failed.len();
                    let (m, _) = run.finish();
                    let mut lower = LowerBound::new(page);
                    for b in prepared.start().segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()) {
                        lower.add(b.requested_size);
                    }
                    let (mut live, mut failed_at) = (std::collections::HashMap::new(), std::collections::HashSet::new());
                    for (i, e) in events.iter_range(0..upto).enumerate() {
                        match e.action {
                            TraceAction::Alloc if failed.contains(&i) => {
                                failed_at.insert(e.addr);
                            }
                            TraceAction::Alloc => {
                                live.insert(e.addr, e.size);
                                lower.add(e.size);
                            }
                            TraceAction::FreeCompleted if !failed_at.remove(&e.addr) => lower.remove(live.remove(&e.addr).unwrap_or(e.size)),
                            _ => {}
                        }
                    }
                    assert_eq!(m.lower_bound_bytes, lower.peak, "seed {seed}, {conf:?} at {limit:?}, {upto} entries");
                    assert_eq!(prepared.lower_bound(page, upto, &failed), lower.peak, "asked again");
                }
            }
        }
        assert!(failures > 0, "some allocations failed");
    }
}

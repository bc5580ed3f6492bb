//! Model replay: a `CachingAllocator<SimDevice>` decides placement under
//! any settings, from the rebuilt start state, driven by the trace's
//! allocations, frees and `empty_cache()` calls.
//!
//! New segments get addresses above every address the trace mentions, in
//! allocation order, so results never depend on an arbitrary base.

use crate::drive::Step;
use crate::metrics::{LowerBound, Metrics, Sample, Timeline};
use crate::prepared::PreparedTrace;
use crate::reading::Reading;
use crate::trace::DeviceTrace;
use crate::ReplayError;
use std::sync::Arc;
use vramkit_core::{AllocatorConfig, Error, SegmentInfo, TraceAction};
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

/// A model replay of `prepared` under `config`.
pub(crate) fn run(
    prepared: &PreparedTrace<'_>,
    config: &AllocatorConfig,
    capacity_bytes: Option<u64>,
    timeline_points: usize,
    keep_peak: bool,
) -> Result<(Metrics, Option<PeakState>), ReplayError> {
    let (trace, start) = (prepared.trace(), prepared.start());
    let base = (prepared.top_address() + SimDevice::DEFAULT_GRANULARITY).next_multiple_of(SimDevice::DEFAULT_GRANULARITY);
    let device = SimDevice::new(capacity_bytes.unwrap_or(u64::MAX))
        .with_base_address(base)
        .with_event_mode(vramkit_sim::EventMode::Manual)
        .with_first_fit();
    let mut model = prepared.start_model(config, device)?;
    let page = if config.expandable_segments { config.large_segment_size_bytes } else { 0 };
    let mut lower = LowerBound::new(page);
    for b in start.segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()) {
        lower.add(b.requested_size);
    }

    let mut m = Metrics { events: trace.events.len() as u64, ..Metrics::default() };
    let mut timeline = Timeline::new(m.events, timeline_points);
    let mut driver = prepared.following_driver()?;
    driver.begin(&mut model);
    // Per block (`blocks`): the bytes it asked for, and whether the model failed it.
    let blocks = prepared.blocks();
    let mut requested: Vec<Option<u64>> = vec![None; blocks.count()];
    let mut failed: Vec<bool> = vec![false; blocks.count()];
    let mut peak_reserved = 0i64;
    let mut largest_at_peak = 0u64;
    let mut peak = keep_peak.then(|| PeakState { event: 0, segments: model.segments() });
    for (i, e) in trace.events.iter().enumerate() {
        match driver.step(&mut model, i) {
            Step::Alloc(Ok(_)) => {
                requested[blocks.of(i) as usize] = Some(e.size);
                lower.add(e.size);
            }
            Step::Alloc(Err(Error::OutOfMemory(_))) => {
                failed[blocks.of(i) as usize] = true;
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
            _ => {
                if e.action == TraceAction::FreeCompleted {
                    let b = blocks.of(i) as usize;
                    if !std::mem::take(&mut failed[b]) {
                        lower.remove(requested[b].take().unwrap_or(e.size));
                    }
                }
            }
        }
        let st = model.stats();
        if st.reserved_bytes.all.current > peak_reserved {
            peak_reserved = st.reserved_bytes.all.current;
            if keep_peak {
                let segments = model.segments();
                largest_at_peak = largest_free_block(&segments);
                peak = Some(PeakState { event: i as u64 + 1, segments });
            } else if timeline_points > 0 {
                largest_at_peak = largest_free_block(&model.segments());
            }
            m.waste_bytes_at_peak = (st.reserved_bytes.all.current - st.allocated_bytes.all.current) as u64;
        }
        timeline.push(Sample {
            event: i as u64 + 1,
            allocated_bytes: st.allocated_bytes.all.current as u64,
            reserved_bytes: st.reserved_bytes.all.current as u64,
            requested_bytes: st.requested_bytes.all.current as u64,
        });
    }
    timeline.flush();
    let st = model.stats();
    m.peak_reserved_bytes = st.reserved_bytes.all.peak as u64;
    m.peak_allocated_bytes = st.allocated_bytes.all.peak as u64;
    m.peak_requested_bytes = st.requested_bytes.all.peak as u64;
    m.peak_inactive_split_bytes = st.inactive_split_bytes.all.peak as u64;
    m.device_mallocs = st.num_device_alloc as u64;
    m.device_frees = st.num_device_free as u64;
    m.alloc_retries = st.num_alloc_retries as u64;
    m.largest_free_block_at_peak = largest_at_peak;
    m.lower_bound_bytes = lower.peak;
    m.utilization = if m.peak_reserved_bytes == 0 { 0.0 } else { m.peak_allocated_bytes as f64 / m.peak_reserved_bytes as f64 };
    m.timeline = timeline.samples;
    Ok((m, peak))
}

fn largest_free_block(segments: &[vramkit_core::SegmentInfo]) -> u64 {
    segments.iter().flat_map(|s| &s.blocks).filter(|b| !b.state.is_active()).map(|b| b.size).max().unwrap_or(0)
}

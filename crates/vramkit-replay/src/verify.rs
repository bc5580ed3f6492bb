//! `verify`: is the simulator PyTorch?
//!
//! Replays a trace from its rebuilt start state under the settings it was
//! recorded with, the device handing back the addresses the trace recorded
//! for new segments, and compares three things with what PyTorch did: the
//! address of every `alloc`, the sequence of segment events, and the end
//! state (every block's address, size and state).

use crate::drive::{Driver, Step};
use crate::pools::{Overrides, PoolRouting};
use crate::prepared::{Judged, PreparedTrace};
use crate::reading::Reading;
use crate::releases::is_segment_event;
use crate::trace::DeviceTrace;
use crate::ReplayError;
use std::sync::Arc;
use vramkit_core::snapshot::MempoolId;
use vramkit_core::{AllocatorConfig, BlockState, CachingAllocator, HistoryConfig, PoolKind, SegmentInfo, StreamId, TraceAction};
use vramkit_sim::SimDevice;
use vramkit_trace::{Entries, Entry};

/// Where the model first did something PyTorch did not.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Divergence {
    /// `alloc address`, `segment events` or `end state`.
    pub kind: String,
    /// Index of the trace entry (for `alloc address`; the first differing
    /// segment event's position for `segment events`).
    pub event_index: Option<usize>,
    /// What PyTorch did.
    pub expected: String,
    /// What the model did.
    pub got: String,
    /// The trace entries around it.
    pub context: Vec<String>,
}

/// The result of `verify` for one device.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// Device index.
    pub device: i64,
    /// `alloc` entries in the trace.
    pub alloc_events: u64,
    /// Of those, placed at the address PyTorch chose.
    pub placed_same: u64,
    /// `placed_same / alloc_events` (1 when there are none).
    pub match_rate: f64,
    /// Segment events in the trace.
    pub segment_events_recorded: u64,
    /// Segment events the model made.
    pub segment_events_predicted: u64,
    /// The two sequences are equal (action, address, size, order).
    pub segment_events_identical: bool,
    /// The model's end state equals the snapshot's segments.
    pub end_state_identical: bool,
    /// The trace stops before the snapshot's state (an edited file); the
    /// never-freed allocations were freed before comparing.
    pub trace_cut: bool,
    /// The device capacity inferred from refusals, if the trace shows any.
    pub inferred_capacity_bytes: Option<u64>,
    /// The first divergence, if any.
    pub first_divergence: Option<Divergence>,
    /// The first difference in the segment events, if any (its index counts
    /// segment events only; the context lists the recorded ones around it).
    pub segment_divergence: Option<Divergence>,
}

impl VerifyReport {
    /// Every placement, segment event and the end state agree.
    pub fn passed(&self) -> bool {
        self.match_rate == 1.0 && self.segment_events_identical && self.end_state_identical
    }
}

fn describe(e: Entry) -> String {
    format!("{} addr={:#x} size={} stream={}", e.action.as_str(), e.addr, e.size, e.stream)
}

fn context(events: &Entries, at: usize) -> Vec<String> {
    let from = at.saturating_sub(5);
    let to = (at + 3).min(events.len());
    (from..to).map(|i| format!("{}{i}: {}", if i == at { "> " } else { "  " }, describe(events.get(i)))).collect()
}

/// Verifies one device's trace under `config` (the recorded settings),
/// inferring the device capacity from the trace.
pub fn verify(trace: &DeviceTrace, config: &AllocatorConfig) -> Result<VerifyReport, ReplayError> {
    verify_with_capacity(trace, config, None)
}

/// The device capacity the trace implies under the recorded settings
/// `config`: the highest reserved level it reaches, when it shows a refused
/// `cudaMalloc` or an `oom`; `None` (unlimited) otherwise. This is what
/// [`verify`] reports as `inferred_capacity_bytes`, without replaying.
pub fn inferred_capacity(trace: &DeviceTrace, config: &AllocatorConfig) -> Result<Option<u64>, ReplayError> {
    Ok(PreparedTrace::new(trace, config.clone(), None)?.inferred_capacity())
}

/// Verifies with a known device capacity (bytes the allocator could use,
/// and the total a memory fraction is taken of). Traces do not record it;
/// a garbage-collection threshold with a memory fraction needs it to be exact.
pub fn verify_with_capacity(
    trace: &DeviceTrace,
    config: &AllocatorConfig,
    capacity_bytes: Option<u64>,
) -> Result<VerifyReport, ReplayError> {
    PreparedTrace::new(trace, config.clone(), capacity_bytes)?.verify()
}

/// How the trace reads under its recorded settings `recorded` (and the
/// recorded device capacity, if known): what replays under other settings
/// follow. See [`Reading`].
pub fn reading(trace: &DeviceTrace, recorded: &AllocatorConfig, capacity_bytes: Option<u64>) -> Result<Reading, ReplayError> {
    PreparedTrace::new(trace, recorded.clone(), capacity_bytes)?.reading().cloned()
}

/// The replay under the recorded settings judges the reading every other
/// replay of a prepared trace follows.
impl PreparedTrace<'_> {
    /// How the trace reads: judged the first time it is asked for, by a
    /// replay under the recorded settings.
    pub fn reading(&self) -> Result<&Reading, ReplayError> {
        self.judged().map(|j| &*j.reading)
    }

    /// The reading and routing every replay follows, judged once.
    pub(crate) fn judged(&self) -> Result<&Judged, ReplayError> {
        self.judged_once()
            .get_or_init(|| {
                let (_, reading, routing) = recorded_pass(self, Compare::Reading)?;
                Ok(Judged::new(self.trace(), Arc::new(reading), routing))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Follows `reading` (judged earlier for this trace under the same
    /// recorded settings) instead of judging one. An error when it is of
    /// another trace; ignored when a reading was judged already.
    pub fn follow(&self, reading: Arc<Reading>) -> Result<(), ReplayError> {
        if reading.entries != self.trace().events.len() || reading.by_sync.len() != self.trace().events.len() {
            return Err(ReplayError::Model(format!(
                "the reading given in ModelOptions is of another trace ({} entries, this one has {}); make it with verify::reading for this trace",
                reading.entries,
                self.trace().events.len()
            )));
        }
        let routing = self.route(&reading.pools);
        let _ = self.judged_once().set(Ok(Judged::new(self.trace(), reading, routing)));
        Ok(())
    }

    /// `verify`: replays the trace under the recorded settings, the device
    /// handing back the recorded addresses, and compares every placement,
    /// the segment events and the end state with what PyTorch did. The
    /// reading this replay judges is kept.
    pub fn verify(&self) -> Result<VerifyReport, ReplayError> {
        let (report, reading, routing) = recorded_pass(self, Compare::All)?;
        let _ = self.judged_once().set(Ok(Judged::new(self.trace(), Arc::new(reading), routing)));
        Ok(report)
    }

    /// A driver that follows the reading (judging it first if need be).
    pub(crate) fn following_driver(&self) -> Result<Driver<'_>, ReplayError> {
        Ok(Driver::following(self, self.judged()?))
    }
}

/// What [`recorded_pass`] compares with the trace.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compare {
    /// Placements, segment events and the end state (`verify`).
    All,
    /// What the reading needs (for [`reading`]): no history is kept, so no
    /// segment events are compared; and where no private pool is in
    /// question, the pass ends at the last entry a judgement is made at
    /// (`Driver::last_judgement`): the report then covers only the entries
    /// replayed (no end state is compared).
    Reading,
}

/// Replays a trace with private pools again at most this many times, each
/// time routing one more segment whose pool the snapshot does not name.
const POOL_PASSES: usize = 64;

/// The replay under the recorded settings: the verify report, the
/// reading it judged and the routing that reading implies. A segment whose
/// pool the snapshot does not name (made and freed inside the window) is
/// read as the default pools' until a replay shows otherwise (see
/// `pools`): then it is routed to a pool of its own, or back, and the trace
/// replayed again.
pub(crate) fn recorded_pass(prepared: &PreparedTrace<'_>, compare: Compare) -> Result<(VerifyReport, Reading, PoolRouting), ReplayError> {
    // PyTorch's rule that a `malloc` which processed events had no private
    // pool underway rules out readings; where no reading it leaves is
    // exact, the search is made again without it and the closer kept.
    let (report, judged) = search_pools(prepared, compare, true)?;
    let (report, (reading, routing)) = if report.passed() || !judged.1.relaxes_anything() {
        (report, judged)
    } else {
        let (other, other_judged) = search_pools(prepared, compare, false)?;
        if closeness(&other) > closeness(&report) { (other, other_judged) } else { (report, judged) }
    };
    Ok((report, reading, routing))
}

/// The replay under the recorded settings with private pools routed by
/// the closest reading found (see [`recorded_pass`]); `strict`: PyTorch's
/// event rule rules readings out.
fn search_pools(prepared: &PreparedTrace<'_>, compare: Compare, strict: bool) -> Result<(VerifyReport, (Reading, PoolRouting)), ReplayError> {
    let mut overrides = Overrides::new();
    // A repair read from a symptom with another cause can make the replay
    // worse: the best replay is kept.
    let mut best: Option<(VerifyReport, (Reading, PoolRouting))> = None;
    let mut tried = std::collections::BTreeSet::new();
    for _ in 0..POOL_PASSES {
        let (report, judged, repair) = one_pass(prepared, compare, &overrides, strict)?;
        if best.as_ref().is_none_or(|(b, _)| closeness(&report) > closeness(b)) {
            best = Some((report, judged));
        }
        // Each routing of a segment is tried once: a later replay may show
        // a segment routed one way belongs the other (once).
        let mut repaired = false;
        for (routed, otherwise) in repair {
            let next = Some(routed).filter(|r| !tried.contains(r)).or(otherwise.filter(|r| !tried.contains(r)));
            if let Some((segment, pool)) = next {
                tried.insert((segment, pool));
                overrides.insert(segment, pool);
                repaired = true;
            }
        }
        if !repaired || best.as_ref().is_some_and(|(b, _)| b.passed()) {
            break;
        }
    }
    match best {
        Some(best) => Ok(best),
        None => one_pass(prepared, compare, &overrides, strict).map(|(report, judged, _)| (report, judged)),
    }
}

/// How close a replay came to PyTorch: passed, then requests placed the
/// same, then segment events and end state identical.
fn closeness(r: &VerifyReport) -> (bool, u64, bool, bool) {
    (r.passed(), r.placed_same, r.segment_events_identical, r.end_state_identical)
}

/// A segment whose pool the snapshot does not name, routed the other way
/// (to the default pools, or to a private pool of its own) by what a
/// replay showed at a trace entry.
#[derive(Clone, Copy, Debug)]
struct Repair {
    at: usize,
    segment: usize,
    pool: MempoolId,
    /// Another reading of the same symptom, tried once this one was.
    otherwise: Option<(usize, MempoolId)>,
}

/// A segment routed to a pool (see [`Repair`]), and the routing to try
/// instead once that one was tried.
type Routed = ((usize, MempoolId), Option<(usize, MempoolId)>);

/// One replay under the recorded settings, with `overrides`; also the
/// first segments whose pool the snapshot does not name that the replay
/// showed routed wrong, with the pool each goes to.
#[allow(clippy::type_complexity)]
fn one_pass(
    prepared: &PreparedTrace<'_>,
    compare: Compare,
    overrides: &Overrides,
    strict: bool,
) -> Result<(VerifyReport, (Reading, PoolRouting), Vec<Routed>), ReplayError> {
    let (trace, config, start) = (prepared.trace(), prepared.recorded(), prepared.start());
    let (capacity_bytes, inferred) = (prepared.recorded_capacity(), prepared.inferred_capacity());
    let capacity = capacity_bytes.or(inferred);
    // An inferred capacity says where refusals begin, not how much memory
    // the device has (which sizes expandable reservations; their unmapped
    // tails may then reach over the next recorded one, which the device
    // allows when it hands out recorded addresses).
    let device = SimDevice::new(capacity.unwrap_or(u64::MAX))
        .with_event_mode(vramkit_sim::EventMode::Manual)
        .with_total_bytes(capacity_bytes.unwrap_or(u64::MAX))
        .with_recorded_addresses();
    let mut model = prepared.start_model(config, device)?;
    // Segment events are compared for verify, and judge private pools.
    let histories = compare == Compare::All || crate::pools::uses_pools(trace, &start.segments);
    let mut log = histories.then(|| SegmentLog::start(&mut model));

    let events = &trace.events;
    let mut driver = Driver::judging(prepared, overrides.clone());
    if !strict {
        driver.relax_pool_event_rule();
    }
    driver.begin(&mut model);
    let mut first_divergence = None;
    let mut repair: Option<Repair> = None;
    let leaves_reservations = crate::releases::targeted_release_asserts(config);
    let (mut alloc_events, mut placed_same) = (0u64, 0u64);
    // Without private pools the reading is judged at a few entries, often
    // all near the start (new segments, releases): the rest would only be
    // replayed to compare placements no one asked for.
    let until = match compare {
        Compare::Reading if !histories => driver.last_judgement().map_or(0, |last| last + 1),
        _ => events.len(),
    };
    let whole = until == events.len();
    for (i, e) in events.iter_range(0..until).enumerate() {
        // A new segment PyTorch made while the default pools held a block
        // that fits (or an expandable segment the request would grow, or
        // of a kind the default pools do not make) was made for a private
        // pool: a capture routed the request there. Such a segment is
        // routed to a pool of its own before the request is replayed.
        if e.action == TraceAction::Alloc && first_divergence.is_none() {
            if let Some(k) = driver.routing().made_by(i).filter(|&k| driver.routing().may_become_private(k)) {
                model.process_events();
                // Where private pools get classic segments while the
                // default pools' are expandable (torch 2.4), a classic one
                // is a private pool's.
                let classic_for_a_pool = config.expandable_segments && !config.compat.expandable_in_private_pools && !driver.routing().is_expandable(k);
                if classic_for_a_pool || model.fits_in_cache(e.size, StreamId(e.stream)) || grows_instead(&model, e) {
                    driver.route_to_own_pool(k);
                }
            }
        }
        if e.action == TraceAction::Alloc && first_divergence.is_none() && leaves_reservations && left_reservation(&model, events, i, driver.routing()) {
            let _ = model.leave_expandable_reservation(e.size, StreamId(e.stream));
        }
        if e.action == TraceAction::SegmentMap && first_divergence.is_none() && leaves_reservations && mapped_by_failed_request(&model, events, i, driver.routing()) {
            let _ = model.map_left_by_failed_request(vramkit_core::DeviceAddr(e.addr), e.size, StreamId(e.stream));
        }
        let step = driver.step(&mut model, i);
        let diverged = |got: String| Divergence {
            kind: "alloc address".into(),
            event_index: Some(i),
            expected: if e.action == TraceAction::Oom { "out of memory".into() } else { format!("{:#x}", e.addr) },
            got,
            context: context(events, i),
        };
        match step {
            Step::Alloc(Ok(p)) => {
                alloc_events += 1;
                if p.0 == e.addr {
                    placed_same += 1;
                } else {
                    if first_divergence.is_none() {
                        repair = misplaced(driver.routing(), i, p.0);
                    }
                    first_divergence.get_or_insert_with(|| diverged(format!("{p}")));
                }
            }
            Step::Alloc(Err(err)) => {
                alloc_events += 1;
                first_divergence.get_or_insert_with(|| diverged(format!("error: {}", err.to_string().lines().next().unwrap_or_default())));
            }
            Step::Oom { failed: false } => {
                first_divergence.get_or_insert_with(|| diverged("the allocation succeeded".into()));
            }
            _ => {}
        }
        if let Some(log) = &mut log {
            log.after_entry(&mut model);
        }
    }
    if whole {
        driver.finish(&mut model, &start.cut_frees);
    }
    let mut repairs: Vec<Repair> = repair.into_iter().collect();
    if let Some(m) = driver.release_mismatch() {
        let rs = released_otherwise(driver.routing(), m);
        if rs.first().is_some_and(|r| repairs.first().is_none_or(|first| r.at < first.at)) {
            repairs = rs;
        }
    }
    let judged = driver.into_judgement();
    let routing = &judged.1;

    let (recorded, predicted): (Vec<SegmentEvent>, Vec<SegmentEvent>) = match log {
        Some(log) => (segment_events(events.iter()), log.finish(&mut model)),
        None => (Vec::new(), Vec::new()),
    };
    let segment_events_identical = recorded == predicted;
    let mut segment_divergence = None;
    if !segment_events_identical {
        let at = recorded.iter().zip(&predicted).position(|(a, b)| a != b).unwrap_or(recorded.len().min(predicted.len()));
        let show = |v: &[(TraceAction, u64, u64)]| {
            v.get(at).map_or("nothing".to_string(), |(a, addr, size)| format!("{} {addr:#x} {size}", a.as_str()))
        };
        let d = Divergence {
            kind: "segment events".into(),
            event_index: Some(at),
            expected: show(&recorded),
            got: show(&predicted),
            context: recorded.iter().skip(at.saturating_sub(3)).take(6).map(|(a, addr, size)| format!("{} {addr:#x} {size}", a.as_str())).collect(),
        };
        segment_divergence = Some(d.clone());
        first_divergence.get_or_insert(d);
        if let Some(r) = released_wrong(routing, events, at, predicted.get(at)) {
            if repairs.first().is_none_or(|first| r.at < first.at) {
                repairs = vec![r];
            }
        }
    }
    let end_diff = if whole { compare_end_state(&trace.end_segments, &model.segments()) } else { None };
    if let Some((expected, got)) = &end_diff {
        first_divergence.get_or_insert_with(|| Divergence {
            kind: "end state".into(),
            event_index: None,
            expected: expected.clone(),
            got: got.clone(),
            context: Vec::new(),
        });
    }
    let (recorded, predicted) = match compare {
        Compare::All => (recorded, predicted),
        Compare::Reading => (Vec::new(), Vec::new()),
    };
    let segment_events_identical = recorded == predicted;
    let report = VerifyReport {
        device: trace.device,
        alloc_events,
        placed_same,
        match_rate: if alloc_events == 0 { 1.0 } else { placed_same as f64 / alloc_events as f64 },
        segment_events_recorded: recorded.len() as u64,
        segment_events_predicted: predicted.len() as u64,
        segment_events_identical,
        end_state_identical: end_diff.is_none(),
        trace_cut: !start.cut_frees.is_empty(),
        inferred_capacity_bytes: inferred,
        first_divergence,
        segment_divergence,
    };
    Ok((report, judged, repairs.into_iter().map(|r| ((r.segment, r.pool), r.otherwise)).collect()))
}

/// A request that died in torch 2.4's targeted release (an internal assert
/// on an expandable block, GitHub #119452) had already reserved a new range
/// in its first attempt, when no reservation on its stream had room, and
/// could not map it; the range stays reserved and unmapped, and no entry
/// records it (`empty_cache()` does not release it: it holds no free
/// block). A later request on that stream, in that pool, maps at its base.
///
/// So where the segment events just before the `alloc` at entry `i` map
/// at an address that starts none of the model's reservations' mapped
/// spans (the first map of a range), the request is the default pools',
/// and the model would place it elsewhere (in a reservation it has), the
/// range was left behind by such a request: it is reserved before the
/// request is replayed (at that base, which the driver has queued).
fn left_reservation(model: &CachingAllocator<SimDevice>, events: &Entries, i: usize, routing: &PoolRouting) -> bool {
    if routing.pool(i).is_some() {
        return false;
    }
    let actions = events.actions();
    let before = actions[..i].iter().rev().take_while(|&&a| is_segment_event(a)).count();
    let first_map = (i - before..i).any(|j| actions[j] == TraceAction::SegmentMap && !model.device().in_mapped_span(events.addr(j)));
    let e = events.get(i);
    first_map && model.malloc_address(e.size, StreamId(e.stream), false) != Some(vramkit_core::DeviceAddr(e.addr))
}

/// The `segment_map` at entry `i`, in a reservation the model has, was a
/// first attempt's by a torch 2.4 request that then died at the targeted
/// release's assert (GitHub #119452): its first attempt mapped an unmapped
/// stretch before a free block, failed to map the next, and the request
/// left nothing else. So it is when no request follows the segment events
/// it starts (a synchronisation's `free_completed` may be a retry ladder's,
/// which the model repeats by itself), or the default pools' request that
/// follows is served from the cache, needing no pages.
fn mapped_by_failed_request(model: &CachingAllocator<SimDevice>, events: &Entries, i: usize, routing: &PoolRouting) -> bool {
    if !model.device().in_mapped_span(events.addr(i)) {
        return false;
    }
    let actions = events.actions();
    let after = i + actions[i..].iter().take_while(|&&a| is_segment_event(a)).count();
    match actions.get(after) {
        None => true,
        Some(TraceAction::Alloc) => {
            let r = events.get(after);
            routing.pool(after).is_none() && model.fits_in_cache(r.size, StreamId(r.stream))
        }
        Some(TraceAction::Oom | TraceAction::FreeCompleted) => false,
        Some(_) => true,
    }
}

/// Whether the default pools hold an expandable segment that request `e`
/// would grow: PyTorch reserves a new one only for a pool that has none on
/// the request's stream for its size class.
fn grows_instead(model: &CachingAllocator<SimDevice>, e: Entry) -> bool {
    let kind = PoolKind::for_size(vramkit_core::rounding::round_size(e.size, &model.config().roundup_power2_divisions));
    model.config().expandable_segments
        && model.segments().iter().any(|s| s.is_expandable && s.stream == e.stream && s.segment_type == kind && s.segment_pool_id == DEFAULT_POOL)
}

/// The model placed the `alloc` at entry `i` at `got`, not where PyTorch
/// did. If `got` lies in a segment read as the default pools' that the
/// snapshot does not name, that segment was a private pool's, or else
/// PyTorch's own segment was (tried second); if only PyTorch's segment is
/// such a one, it was.
fn misplaced(routing: &PoolRouting, i: usize, got: u64) -> Option<Repair> {
    let private = |k: usize| routing.may_become_private(k).then_some((k, PoolRouting::own_pool(k)));
    let pytorchs = routing.unnamed_segment_of(i).and_then(private);
    let models = routing.unnamed_segment_at(i, got).filter(|&k| !routing.is_private(k));
    let (first, otherwise) = match models {
        Some(k) => (private(k).or(pytorchs), pytorchs),
        None => (pytorchs, None),
    };
    let (segment, pool) = first?;
    Some(Repair { at: i, segment, pool, otherwise: otherwise.filter(|&o| o != (segment, pool)) })
}

/// The segment events first differ at position `at` (among the trace's
/// segment events), where the model did `got`. A release of a segment
/// whose pool the snapshot does not name, before PyTorch released it, says
/// it was a private pool's (not yet freeable); a release PyTorch did that
/// the model did not do there says the segment was routed the wrong way.
fn released_wrong(routing: &PoolRouting, events: &Entries, at: usize, got: Option<&SegmentEvent>) -> Option<Repair> {
    let t = events.actions().iter().enumerate().filter(|(_, &a)| is_segment_event(a)).nth(at).map(|(t, _)| t)?;
    if let Some(&(TraceAction::SegmentFree, addr, _)) = got {
        if let Some(k) = routing.unnamed_segment_at(t, addr).filter(|&k| routing.may_become_private(k)) {
            return Some(Repair { at: t, segment: k, pool: PoolRouting::own_pool(k), otherwise: None });
        }
    }
    let k = routing.unnamed_segment_of(t).filter(|_| events.actions()[t] == TraceAction::SegmentFree)?;
    let pool = if routing.is_private(k) { DEFAULT_POOL } else { PoolRouting::own_pool(k) };
    (pool == DEFAULT_POOL || routing.may_become_private(k)).then_some(Repair { at: t, segment: k, pool, otherwise: None })
}

/// PyTorch's `empty_cache()` at `at` released `recorded`, where the model
/// would have released `model`: the default pools' segments first (large,
/// then small), then those of pools every user had released. A segment
/// the model releases first that PyTorch released later or not yet was a
/// private pool's; else a segment PyTorch released there, read as a
/// private pool's, was the default pools'.
fn released_otherwise(routing: &PoolRouting, (at, recorded, model): &crate::drive::ReleaseMismatch) -> Vec<Repair> {
    let early: Vec<Repair> = model
        .iter()
        .filter(|r| !recorded.contains(r))
        .filter_map(|&(_, addr, _)| routing.unnamed_segment_at(*at, addr).filter(|&k| routing.may_become_private(k)))
        .map(|k| Repair { at: *at, segment: k, pool: PoolRouting::own_pool(k), otherwise: None })
        .collect();
    if !early.is_empty() {
        return early;
    }
    let p = recorded.iter().zip(model).position(|(a, b)| a != b).unwrap_or(recorded.len().min(model.len()));
    if let Some(&(_, addr, _)) = model.get(p) {
        if let Some(k) = routing.unnamed_segment_at(*at, addr).filter(|&k| routing.may_become_private(k)) {
            return vec![Repair { at: *at, segment: k, pool: PoolRouting::own_pool(k), otherwise: None }];
        }
    }
    let Some(&(_, addr, _)) = recorded.get(p) else { return Vec::new() };
    let k = routing.unnamed_segment_released_at_or_after(*at, addr).filter(|&k| routing.is_private(k));
    k.map(|k| Repair { at: *at, segment: k, pool: DEFAULT_POOL, otherwise: None }).into_iter().collect()
}

/// The default pools' id.
const DEFAULT_POOL: MempoolId = (0, 0);

/// A segment event as compared: (action, address, bytes).
type SegmentEvent = (TraceAction, u64, u64);

/// The segment events a model makes, read off its history every
/// [`SegmentLog::CHUNK`] entries, so that the history never holds a whole
/// long trace (a million `TraceEntry` values are over 100 MB).
struct SegmentLog {
    events: Vec<SegmentEvent>,
    /// Trace entries applied since the history was last read.
    pending: usize,
}

impl SegmentLog {
    const CHUNK: usize = 1 << 16;
    const HISTORY: HistoryConfig = HistoryConfig { record_trace: true, max_entries: usize::MAX, context: vramkit_core::ContextLevel::Never };

    fn start(model: &mut CachingAllocator<SimDevice>) -> SegmentLog {
        model.record_history(Some(Self::HISTORY));
        SegmentLog { events: Vec::new(), pending: 0 }
    }

    fn after_entry(&mut self, model: &mut CachingAllocator<SimDevice>) {
        self.pending += 1;
        if self.pending == Self::CHUNK {
            self.read(model);
        }
    }

    /// Reads the history so far and starts it again.
    fn read(&mut self, model: &mut CachingAllocator<SimDevice>) {
        let history = model.snapshot().device_traces.into_iter().flatten();
        self.events.extend(segment_events(history.map(|e| Entry { action: e.action, addr: e.addr, size: e.size, stream: e.stream })));
        model.record_history(Some(Self::HISTORY));
        self.pending = 0;
    }

    fn finish(mut self, model: &mut CachingAllocator<SimDevice>) -> Vec<SegmentEvent> {
        self.read(model);
        self.events
    }
}

/// The segment events of `entries`, in order.
fn segment_events(entries: impl Iterator<Item = Entry>) -> Vec<SegmentEvent> {
    entries.filter(|e| is_segment_event(e.action)).map(|e| (e.action, e.addr, e.size)).collect()
}

/// The first difference between two end states, as (expected, got) descriptions.
fn compare_end_state(expected: &[SegmentInfo], got: &[SegmentInfo]) -> Option<(String, String)> {
    type Shape = (u64, u64, Vec<(u64, u64, BlockState)>);
    let shape = |s: &SegmentInfo| -> Shape {
        (s.address, s.total_size, s.blocks.iter().map(|b| (b.address, b.size, b.state)).collect())
    };
    let show = |s: Option<&Shape>| match s {
        None => "no segment".to_string(),
        Some((a, t, blocks)) => format!(
            "segment {a:#x} ({t} bytes): {}",
            blocks.iter().map(|(ba, bs, st)| format!("{ba:#x}+{bs} {}", st.as_str())).collect::<Vec<_>>().join(", ")
        ),
    };
    let e: Vec<Shape> = expected.iter().map(shape).collect();
    let g: Vec<Shape> = got.iter().map(shape).collect();
    let at = (0..e.len().max(g.len())).find(|&i| e.get(i) != g.get(i))?;
    Some((show(e.get(at)), show(g.get(at))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::recorded;
    use crate::synthetic::{record, Workload};

    /// The reading judged by a pass that ends at its last judgement is the
    /// one `verify`'s whole pass judges, and so is the plan made from it:
    /// on programs with `empty_cache()` calls, held frees and refusals
    /// (judged to near their end), and on training steps with none of them,
    /// judged only as far as their last new segment.
    #[test]
    fn a_reading_judged_up_to_its_last_judgement_is_the_whole_pass_reading() {
        let config = AllocatorConfig::pytorch_default();
        let mut traces: Vec<(DeviceTrace, Option<u64>)> = (1..=6)
            .map(|seed| {
                let capacity = if seed % 2 == 0 { 1 << 30 } else { u64::MAX };
                (recorded(seed, capacity), (capacity != u64::MAX).then_some(capacity))
            })
            .collect();
        for events in [3_000, 20_000] {
            traces.push((DeviceTrace::split(&record(&Workload::new(events))).remove(0), None));
        }
        let (mut judged, mut stopped_early) = (0, 0);
        for (n, (trace, capacity)) in traces.iter().enumerate() {
            let short = PreparedTrace::new(trace, config.clone(), *capacity).unwrap();
            let whole = PreparedTrace::new(trace, config.clone(), *capacity).unwrap();
            whole.verify().unwrap();
            let (a, b) = (short.judged().unwrap(), whole.judged().unwrap());
            assert_eq!(a.reading, b.reading, "trace {n}");
            assert_eq!(a.plan, b.plan, "trace {n}");
            judged += a.reading.calls.len() + a.reading.held_pairs.len();
            let last = Driver::judging(&short, Overrides::new()).last_judgement();
            stopped_early += usize::from(last.is_none_or(|l| l < trace.events.len() / 2));
        }
        assert!(judged > 0, "some release runs were judged calls, or some pairs held");
        assert!(stopped_early >= 2, "the training steps are judged in their first half ({stopped_early} traces)");
    }
}

//! `tune`: which `PYTORCH_CUDA_ALLOC_CONF` reserves the least for a trace?
//!
//! [`candidates`] builds the settings to try: the recorded settings, then
//! every combination of `max_split_size_mb` (unset and a geometric range up
//! to the largest segment the trace needs), `roundup_power2_divisions`
//! (unset, the single-number form, two list forms), `expandable_segments`
//! and, when a capacity is known, `garbage_collection_threshold` with a
//! `per_process_memory_fraction` (PyTorch only collects under a fraction
//! limit), simplest first. [`tune`] replays every (trace, candidate) pair in
//! parallel with rayon, each from the trace prepared once
//! ([`PreparedTrace::model_replay`], no timeline): exactly what `vramkit
//! replay --conf` runs, so a candidate's figures are the ones `replay`
//! prints for its string. Candidates proven to replay a trace alike
//! (`alike`: by their settings alone, or by the replay of one that watched
//! the other's `max_split_size_mb`) are replayed once; and when only some
//! rows need exact figures
//! ([`Exact`]), a candidate's replay stops once it cannot be among them
//! (`cutoff`), likely winners going first.
//!
//! Ranking: no out-of-memory at the capacity first, then the lowest peak
//! reserved, then the fewest device calls (`cudaMalloc` plus `cudaFree`, or
//! map plus unmap), then the order of generation: the recorded settings win
//! a full tie, so vramkit never recommends a change that gains nothing.
//! Several traces (one per rank) are tuned against the same candidates, and
//! the candidate whose worst trace is best is named for the whole job.

use crate::alike::{proven_alike, watched_limits, watchers, Requests};
use crate::cutoff::{lock, Cutoff};
use crate::model::{run_watching, ModelRun, PeakState, Watched};
use crate::prepared::PreparedTrace;
use crate::trace::DeviceTrace;
use crate::ReplayError;
use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use vramkit_core::rounding::{get_allocation_size, round_size};
use vramkit_core::{format_size, AllocatorConfig, TraceAction};

const MIB: u64 = 1 << 20;

/// `max_split_size_mb` values start here (R26 refuses less than
/// `large_segment_size_mb`, 20 by default).
const MAX_SPLIT_FLOOR_MIB: u64 = 32;
/// At most this many `max_split_size_mb` values.
const MAX_SPLIT_VALUES: usize = 6;
/// `roundup_power2_divisions` values: the single-number form, then list
/// forms (PyTorch's documented example, rounding only large requests, and
/// its mirror, rounding only small ones).
const ROUNDUP_VALUES: [&str; 5] = ["2", "4", "8", "[256:1,512:2,1024:4,>:8]", "[64:8,512:4,>:1]"];
/// (`garbage_collection_threshold`, `per_process_memory_fraction`) pairs.
const GC_VALUES: [(f64, f64); 4] = [(0.6, 0.99), (0.8, 0.99), (0.6, 0.9), (0.8, 0.9)];

/// A candidate that may stop goes on a piece at a time: first this
/// fraction of the trace, then each piece as long as all before it, up to
/// [`PIECE`]. A loser's figures pass the rows shown early (within the
/// first half percent of the 5 M-entry benchmark trace for every one of
/// its losers), and it goes no further than the piece that shows it.
const FIRST_PIECE: usize = 1024;
/// The largest piece, as a fraction of the trace.
const PIECE: usize = 64;

/// Rows of the ranked table shown unless every row is asked for.
pub const TABLE_ROWS: usize = 20;

/// One setting to try.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The `PYTORCH_CUDA_ALLOC_CONF` string (empty: PyTorch's defaults).
    pub conf: String,
    /// The settings it gives.
    pub config: AllocatorConfig,
}

/// One trace to tune.
#[derive(Clone, Debug)]
pub struct TuneInput<'a> {
    /// How reports name it (a file name, a rank).
    pub label: String,
    /// The trace, prepared under the settings it was recorded with.
    pub prepared: &'a PreparedTrace<'a>,
    /// Device bytes the allocator may use (`None`: unlimited).
    pub capacity_bytes: Option<u64>,
}

impl TuneInput<'_> {
    fn trace(&self) -> &DeviceTrace {
        self.prepared.trace()
    }

    fn recorded(&self) -> &AllocatorConfig {
        self.prepared.recorded()
    }
}

/// How to tune.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TuneOptions {
    /// Try at most this many candidates (the recorded settings always
    /// count, and simpler candidates come first). `None`: all of them.
    pub max_candidates: Option<usize>,
    /// Which candidates need exact figures; the others' replays may stop
    /// once enough finished candidates rank before them (see [`Exact`]).
    pub exact: Exact,
    /// Keep about this many timeline points, and the state at the peak,
    /// of the replays that run to the end whatever their figures (the
    /// recorded settings', and in a stopping tune the first candidate's of
    /// each page size) ([`TuneResult::drawn`]), so that `report` draws them
    /// without replaying them again. 0: none. (Only those: keeping the
    /// state at each new peak of every candidate costs more than the one
    /// replay of the recommended settings it would save.)
    pub timeline_points: usize,
}

/// Which candidates of a [`tune`] need exact figures. A candidate that
/// needs none may stop its replay once it cannot be among those that do;
/// it is then listed after every finished one, with the figures it had
/// reached ([`Outcome::stopped_at`]). Stopping applies to one trace
/// without a capacity; otherwise every replay runs to the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exact {
    /// Every candidate, each replayed to the end.
    #[default]
    All,
    /// The first this many rows of the ranked table and the rows of the
    /// recorded settings, each with its rank ([`TuneResult::table`]).
    Rows(usize),
    /// The best candidate and the recorded settings, not their rank: the
    /// ranks after the first are those of the figures reached (`doctor`).
    Best,
}

/// One candidate replayed against one trace.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Outcome {
    /// The `PYTORCH_CUDA_ALLOC_CONF` string (empty: PyTorch's defaults).
    pub conf: String,
    /// Highest reserved bytes.
    pub peak_reserved_bytes: u64,
    /// `device_mallocs + device_frees`.
    pub device_calls: u64,
    /// Some allocation failed at the capacity.
    pub oom: bool,
    /// 1 for the best.
    pub rank: usize,
    /// Highest allocated bytes.
    pub peak_allocated_bytes: u64,
    /// `cudaMalloc` (or map) calls.
    pub device_mallocs: u64,
    /// `cudaFree` (or unmap) calls.
    pub device_frees: u64,
    /// Allocations that failed.
    pub oom_count: u64,
    /// The first trace entry that failed.
    pub first_oom_event: Option<u64>,
    /// The live-bytes lower bound under this candidate's page size.
    pub lower_bound_bytes: u64,
    /// The replay could not run under this candidate (it then ranks last).
    pub error: Option<String>,
    /// The replay stopped after this many entries, where more than the
    /// candidates that need exact figures ranked before it ([`Exact`]); the
    /// figures are those it had reached, and it ranks after every
    /// candidate replayed to the end. `None`: replayed to the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
}

/// How candidates rank, smaller first: an error, an out-of-memory, failed
/// allocations, peak reserved, device calls, the order of generation. Each
/// part only grows as a replay goes on (`cutoff`).
type Key = (bool, bool, u64, u64, u64, usize);

impl Outcome {
    /// The outcome of a replay of a trace of `events` entries.
    fn new(conf: &str, result: &Result<crate::Metrics, ReplayError>, events: u64) -> Outcome {
        match result {
            Ok(m) => Outcome {
                conf: conf.to_string(),
                peak_reserved_bytes: m.peak_reserved_bytes,
                device_calls: m.device_mallocs + m.device_frees,
                oom: m.first_oom_event.is_some(),
                rank: 0,
                peak_allocated_bytes: m.peak_allocated_bytes,
                device_mallocs: m.device_mallocs,
                device_frees: m.device_frees,
                oom_count: m.oom_count,
                first_oom_event: m.first_oom_event,
                lower_bound_bytes: m.lower_bound_bytes,
                error: None,
                stopped_at: (m.events < events).then_some(m.events),
            },
            Err(e) => Outcome {
                conf: conf.to_string(),
                peak_reserved_bytes: 0,
                device_calls: 0,
                oom: false,
                rank: 0,
                peak_allocated_bytes: 0,
                device_mallocs: 0,
                device_frees: 0,
                oom_count: 0,
                first_oom_event: None,
                lower_bound_bytes: 0,
                error: Some(e.to_string()),
                stopped_at: None,
            },
        }
    }

    /// Smaller is better; `index` is the order of generation.
    fn key(&self, index: usize) -> Key {
        (self.error.is_some(), self.oom, self.oom_count, self.peak_reserved_bytes, self.device_calls, index)
    }
}

/// The result of tuning one trace.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TuneResult {
    /// The input's label.
    pub label: String,
    /// Device index of the trace.
    pub device: i64,
    /// Trace entries replayed per candidate.
    pub events: u64,
    /// The capacity every candidate ran against (`None`: unlimited).
    pub capacity_bytes: Option<u64>,
    /// The recorded settings' outcome.
    pub recorded: Outcome,
    /// The best candidate's outcome.
    pub best: Outcome,
    /// `best.conf`: the string to set.
    pub recommended: String,
    /// The least any candidate's live bytes imply (no setting reserves less).
    pub lower_bound_bytes: u64,
    /// `recorded.peak_reserved_bytes - best.peak_reserved_bytes`.
    pub saving_bytes: i64,
    /// `saving_bytes` as a percentage of the recorded peak.
    pub saving_percent: f64,
    /// Every candidate, best first.
    pub candidates: Vec<Outcome>,
    /// The replays kept to draw (see [`TuneOptions::timeline_points`]),
    /// each with its timeline and its state at the peak.
    #[serde(skip)]
    pub drawn: Vec<Drawn>,
}

/// A candidate replayed to the end, as `report` draws it: the figures of
/// [`PreparedTrace::model_replay_at_peak`] with the same settings, capacity
/// and timeline points.
#[derive(Clone, Debug, PartialEq)]
pub struct Drawn {
    /// The settings replayed.
    pub config: AllocatorConfig,
    /// Timeline points asked for.
    pub timeline_points: usize,
    /// Its figures, with the timeline.
    pub metrics: crate::Metrics,
    /// The state when reserved bytes first reached their peak.
    pub peak: PeakState,
}

/// The candidate whose worst trace is best, when several traces are tuned.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorstCase {
    /// The string to set on every rank.
    pub recommended: String,
    /// Its highest peak reserved over the traces.
    pub worst_peak_reserved_bytes: u64,
    /// The trace with that peak.
    pub worst_label: String,
    /// Some trace runs out of memory even under it.
    pub oom: bool,
    /// Under the recorded settings, the highest peak over the traces.
    pub recorded_worst_peak_reserved_bytes: u64,
    /// Its peak reserved on every trace, in input order.
    pub peaks: Vec<(String, u64)>,
}

/// Everything [`tune`] found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TuneReport {
    /// One result per input, in input order.
    pub results: Vec<TuneResult>,
    /// With more than one input: the best setting for the worst of them.
    pub worst_case: Option<WorstCase>,
}

/// The settings to try for `inputs`: each input's recorded settings, then
/// the generated grid, simplest first, without duplicates (two strings that
/// give the same settings count once), at most `options.max_candidates`.
pub fn candidates(inputs: &[TuneInput<'_>], options: &TuneOptions) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    let push = |out: &mut Vec<Candidate>, c: Candidate| {
        if !out.iter().any(|o| o.config == c.config) {
            out.push(c);
        }
    };
    for input in inputs {
        push(&mut out, Candidate { conf: input.recorded().to_conf_string(), config: input.recorded().clone() });
    }
    let recorded_count = out.len();

    let largest = inputs.iter().map(|i| largest_segment(i.trace())).max().unwrap_or(0);
    let max_split = max_split_values(largest);
    let expandable = ["", "expandable_segments:True"];
    let gc: Vec<String> = if inputs.iter().any(|i| i.capacity_bytes.is_some()) {
        GC_VALUES
            .iter()
            .map(|(t, f)| format!("garbage_collection_threshold:{t},per_process_memory_fraction:{f}"))
            .collect()
    } else {
        Vec::new()
    };
    // (complexity, parts in PYTORCH_CUDA_ALLOC_CONF order)
    let mut grid: Vec<(usize, String)> = Vec::new();
    for (e, expandable_part) in expandable.iter().enumerate() {
        for m in 0..=max_split.len() {
            for r in 0..=ROUNDUP_VALUES.len() {
                for g in 0..=gc.len() {
                    let mut parts: Vec<String> = Vec::new();
                    if m > 0 {
                        parts.push(format!("max_split_size_mb:{}", max_split[m - 1]));
                    }
                    if r > 0 {
                        parts.push(format!("roundup_power2_divisions:{}", ROUNDUP_VALUES[r - 1]));
                    }
                    if g > 0 {
                        parts.push(gc[g - 1].clone());
                    }
                    if e > 0 {
                        parts.push(expandable_part.to_string());
                    }
                    let complexity = [e, m, r, g].iter().filter(|&&i| i > 0).count();
                    grid.push((complexity, parts.join(",")));
                }
            }
        }
    }
    grid.sort_by_key(|(complexity, _)| *complexity);
    let limit = options.max_candidates.unwrap_or(usize::MAX).max(recorded_count);
    for (_, conf) in grid {
        if out.len() >= limit {
            break;
        }
        // Every generated string is valid; a refusal would be a bug in the table above.
        if let Ok(config) = AllocatorConfig::parse(&conf) {
            push(&mut out, Candidate { conf, config });
        } else {
            debug_assert!(false, "generated an invalid setting {conf:?}");
        }
    }
    out
}

/// The largest segment the trace's requests need (or its end state holds).
fn largest_segment(trace: &DeviceTrace) -> u64 {
    let divisions = [0; vramkit_core::rounding::ROUNDUP_INTERVALS];
    // Two columns, not whole entries: this runs before the first replay, twice (`vramkit tune`'s count).
    let events = &trace.events;
    let requests = events
        .actions()
        .iter()
        .zip(events.sizes())
        .filter(|(&a, _)| a == TraceAction::Alloc)
        .map(|(_, size)| get_allocation_size(round_size(size, &divisions), vramkit_core::rounding::LARGE_BUFFER));
    let segments = trace.end_segments.iter().map(|s| s.total_size);
    requests.chain(segments).max().unwrap_or(0)
}

/// Powers of two from 32 MiB up to below `largest` (a value at or above it
/// acts like unset), at most [`MAX_SPLIT_VALUES`] of them, evenly spread.
fn max_split_values(largest: u64) -> Vec<u64> {
    let mut all = Vec::new();
    let mut mib = MAX_SPLIT_FLOOR_MIB;
    while mib * MIB < largest {
        all.push(mib);
        mib *= 2;
    }
    if all.len() <= MAX_SPLIT_VALUES {
        return all;
    }
    let n = all.len();
    (0..MAX_SPLIT_VALUES).map(|k| all[k * (n - 1) / (MAX_SPLIT_VALUES - 1)]).collect()
}

/// Replays every candidate against every input, in parallel, calling
/// `progress` after each replay (from any thread). Fails only when an
/// input cannot be replayed under its recorded settings.
pub fn tune(
    inputs: &[TuneInput<'_>],
    options: &TuneOptions,
    progress: &(dyn Fn() + Sync),
) -> Result<TuneReport, ReplayError> {
    let cands = candidates(inputs, options);
    tune_with(inputs, &cands, options.exact, options.timeline_points, progress)
}

/// [`tune`] with a given candidate list. Each input's recorded settings
/// are added in front when the list lacks them. `exact`: see [`Exact`].
pub fn tune_candidates(
    inputs: &[TuneInput<'_>],
    given: &[Candidate],
    exact: Exact,
    progress: &(dyn Fn() + Sync),
) -> Result<TuneReport, ReplayError> {
    tune_with(inputs, given, exact, 0, progress)
}

/// [`tune_candidates`], keeping `timeline_points` of each candidate
/// replayed to the end ([`TuneOptions::timeline_points`]).
fn tune_with(
    inputs: &[TuneInput<'_>],
    given: &[Candidate],
    exact: Exact,
    timeline_points: usize,
    progress: &(dyn Fn() + Sync),
) -> Result<TuneReport, ReplayError> {
    let mut cands: Vec<Candidate> = Vec::new();
    for input in inputs {
        if !cands.iter().chain(given).any(|c| c.config == *input.recorded()) {
            cands.push(Candidate { conf: input.recorded().to_conf_string(), config: input.recorded().clone() });
        }
    }
    cands.extend(given.iter().cloned());

    // Each trace is read once, under its recorded settings (in parallel,
    // before the candidates, which all follow that reading); a trace whose
    // reading fails fails every candidate with that error. Meanwhile the
    // candidates that replay it alike are found (`alike`).
    let forms: Vec<Vec<AllocatorConfig>> = inputs
        .par_iter()
        .map(|input| {
            let (_, forms) = rayon::join(
                || input.prepared.reading().map(|_| ()),
                || {
                    let mut requests = Requests::of(&input.trace().events, &input.prepared.start().segments);
                    cands.iter().map(|c| requests.form(&c.config)).collect()
                },
            );
            forms
        })
        .collect();
    // Per input: the candidate each one's replay is taken from (the first alike).
    let source: Vec<Vec<usize>> =
        forms.iter().map(|f| f.iter().map(|form| f.iter().position(|g| g == form).expect("itself")).collect()).collect();
    let configs: Vec<&AllocatorConfig> = cands.iter().map(|c| &c.config).collect();
    // Only the rows shown need exact figures, and only a single trace
    // without a capacity (the worst case compares every candidate; where
    // allocations can fail, the lower bound of a stopped one is unknown).
    let stopping = inputs.len() == 1 && inputs[0].capacity_bytes.is_none();
    let drawn: Vec<Mutex<Vec<Drawn>>> = inputs.iter().map(|_| Mutex::new(Vec::new())).collect();
    let keeper = |i: usize| Keeper { events: inputs[i].trace().events.len(), recorded: inputs[i].recorded(), timeline_points, drawn: &drawn[i] };
    let replayed: Vec<Vec<Result<crate::Metrics, ReplayError>>> = match exact {
        Exact::Rows(rows) if stopping && rows < cands.len() => vec![best_rows(&inputs[0], &cands, &forms[0], &source[0], Some(rows), &keeper(0), progress)],
        Exact::Best if stopping => vec![best_rows(&inputs[0], &cands, &forms[0], &source[0], None, &keeper(0), progress)],
        _ => {
            // Per input: the candidate whose replay may stand for each one's
            // (`alike`: `watchers`), but for the recorded settings, whose
            // own replay keeps its timeline (`Keeper`).
            let watchers: Vec<Vec<Option<usize>>> =
                (0..inputs.len()).map(|i| watchers(&configs, &forms[i], &source[i], |c| configs[c] == inputs[i].recorded())).collect();
            let (source, watchers) = (&source, &watchers);
            // The options `vramkit replay --conf` runs with (and the timeline
            // kept to draw); the limits of the candidates it may stand for watched.
            let replay = |i: usize, c: usize| {
                let points = keeper(i).points(&cands[c].config, false);
                let limits = watched_limits(&configs, &watchers[i], c);
                let (run, alike) = run_watching(inputs[i].prepared, &cands[c].config, inputs[i].capacity_bytes, points, points > 0, &limits);
                let result = keeper(i).keep(&cands[c].config, run);
                (0..cands.len()).filter(|&d| source[i][d] == c).for_each(|_| progress());
                (result, alike)
            };
            // First the candidates that need their own replay, then those
            // whose watcher's replay did not prove them alike.
            let pairs: Vec<(usize, usize)> = (0..inputs.len())
                .flat_map(|i| (0..cands.len()).filter(move |&c| source[i][c] == c && watchers[i][c].is_none()).map(move |c| (i, c)))
                .collect();
            let mut runs: Vec<Option<Watched<crate::Metrics>>> =
                pairs.par_iter().map(|&(i, c)| Some(replay(i, c))).collect();
            let mut by_pair: Vec<Vec<Option<Result<crate::Metrics, ReplayError>>>> = vec![vec![None; cands.len()]; inputs.len()];
            let mut alike_of = vec![vec![Vec::new(); cands.len()]; inputs.len()];
            for (&(i, c), run) in pairs.iter().zip(&mut runs) {
                (by_pair[i][c], alike_of[i][c]) = run.take().map(|(r, a)| (Some(r), a)).expect("replayed");
            }
            let mut watched: Vec<(usize, usize)> = Vec::new();
            for (i, c, a) in (0..inputs.len()).flat_map(|i| (0..cands.len()).filter_map(move |c| watchers[i][c].map(|a| (i, c, a)))) {
                if matches!(by_pair[i][a], Some(Ok(_))) && proven_alike(&configs, c, &alike_of[i][a]) {
                    by_pair[i][c] = by_pair[i][a].clone();
                    (0..cands.len()).filter(|&d| source[i][d] == c).for_each(|_| progress());
                } else {
                    watched.push((i, c));
                }
            }
            let mut runs: Vec<Option<Watched<crate::Metrics>>> =
                watched.par_iter().map(|&(i, c)| Some(replay(i, c))).collect();
            for (&(i, c), run) in watched.iter().zip(&mut runs) {
                by_pair[i][c] = run.take().map(|(r, _)| r);
            }
            (0..inputs.len())
                .map(|i| (0..cands.len()).map(|c| by_pair[i][source[i][c]].clone().expect("replayed")).collect())
                .collect()
        }
    };

    let mut results = Vec::with_capacity(inputs.len());
    let mut grid: Vec<Vec<Outcome>> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let row = &replayed[i];
        let recorded_at = cands.iter().position(|c| c.config == *input.recorded()).expect("added above");
        if let Err(e) = &row[recorded_at] {
            return Err(e.clone());
        }
        let outcomes: Vec<Outcome> = cands.iter().zip(row).map(|(c, r)| Outcome::new(&c.conf, r, input.trace().events.len() as u64)).collect();
        let mut order: Vec<usize> = (0..outcomes.len()).collect();
        // Stopped candidates rank after every finished one (see `cutoff`).
        order.sort_by_key(|&k| (outcomes[k].stopped_at.is_some(), outcomes[k].key(k)));
        let mut ranked: Vec<Outcome> = order.iter().map(|&k| outcomes[k].clone()).collect();
        for (r, o) in ranked.iter_mut().enumerate() {
            o.rank = r + 1;
        }
        let recorded = ranked[order.iter().position(|&k| k == recorded_at).expect("ranked")].clone();
        let best = ranked[0].clone();
        let lower_bound_bytes = ranked
            .iter()
            .filter(|o| o.error.is_none() && o.stopped_at.is_none())
            .map(|o| o.lower_bound_bytes)
            .min()
            .unwrap_or(0);
        let saving_bytes = recorded.peak_reserved_bytes as i64 - best.peak_reserved_bytes as i64;
        let saving_percent =
            if recorded.peak_reserved_bytes == 0 { 0.0 } else { 100.0 * saving_bytes as f64 / recorded.peak_reserved_bytes as f64 };
        results.push(TuneResult {
            label: input.label.clone(),
            device: input.trace().device,
            events: input.trace().events.len() as u64,
            capacity_bytes: input.capacity_bytes,
            recommended: best.conf.clone(),
            recorded,
            best,
            lower_bound_bytes,
            saving_bytes,
            saving_percent,
            candidates: ranked,
            drawn: std::mem::take(&mut *lock(&drawn[i])),
        });
        grid.push(outcomes);
    }
    let worst_case = (inputs.len() > 1).then(|| worst_case(inputs, &cands, &grid));
    Ok(TuneReport { results, worst_case })
}

/// Replays the candidates of one trace without a capacity, stopping each
/// once `rows` finished candidates and the rows of the recorded settings
/// rank before it (`cutoff`; `None`: once the best one does, the recorded
/// settings' rank left inexact); candidates alike (`source`) run once.
///
/// The recorded settings run first (with every candidate of the same
/// string, which the table marks as recorded too), and the first candidate
/// of each page size (so every lower bound is known, see below), none of
/// which stops. The others go on a piece at a time (growing from
/// [`FIRST_PIECE`] to [`PIECE`] of the trace), each thread taking next the
/// one whose figures so far rank best: likely winners finish first, and a
/// loser goes on only while it might still be among them; one found out
/// of the rows when its turn comes stops there. Which candidates stop
/// depends on the threads' timing; the rows shown do not (`cutoff`).
///
/// Without a capacity no allocation fails, so a candidate's lower bound
/// depends only on its page size (`LowerBound`): the finished candidate of
/// the same page size has it.
#[allow(clippy::too_many_arguments)] // one trace's candidates and what is known of them
fn best_rows(
    input: &TuneInput<'_>,
    cands: &[Candidate],
    forms: &[AllocatorConfig],
    source: &[usize],
    rows: Option<usize>,
    keeper: &Keeper<'_>,
    progress: &(dyn Fn() + Sync),
) -> Vec<Result<crate::Metrics, ReplayError>> {
    let recorded_at = cands.iter().position(|c| c.config == *input.recorded()).expect("a candidate");
    let page = |c: &Candidate| if c.config.expandable_segments { c.config.large_segment_size_bytes } else { 0 };
    // The table shows every row of the recorded settings' string, with its rank.
    let recorded_rows: Vec<usize> = match rows {
        Some(_) => (0..cands.len()).filter(|&c| cands[c].conf == cands[recorded_at].conf).collect(),
        None => Vec::new(),
    };
    let mut first: Vec<usize> = vec![source[recorded_at]];
    for &r in &recorded_rows {
        if !first.contains(&source[r]) {
            first.push(source[r]);
        }
    }
    for c in (0..cands.len()).filter(|&c| source[c] == c) {
        if !first.iter().any(|&f| page(&cands[f]) == page(&cands[c])) {
            first.push(c);
        }
    }
    // A candidate whose watcher's replay may stand for its own waits for
    // that replay (`alike`: `watchers`); those replayed to the end whatever
    // their figures do not.
    let configs: Vec<&AllocatorConfig> = cands.iter().map(|c| &c.config).collect();
    let watchers = watchers(&configs, forms, source, |c| first.contains(&c));
    let events = input.trace().events.len();
    let (first_piece, piece) = ((events / FIRST_PIECE).max(4096), (events / PIECE).max(4096));
    let cutoff: Cutoff<Key> = Cutoff::new(rows.unwrap_or(1), recorded_rows.len());
    let done: Vec<OnceLock<Result<crate::Metrics, ReplayError>>> = (0..cands.len()).map(|_| OnceLock::new()).collect();
    // Who goes on next: those that never stop first, then the best key so far.
    let queue: Mutex<BinaryHeap<Reverse<(bool, Key)>>> = Mutex::new(
        (0..cands.len())
            .filter(|&c| source[c] == c && watchers[c].is_none())
            .map(|c| Reverse((!first.contains(&c), (false, false, 0, 0, 0, c))))
            .collect(),
    );
    let runs: Vec<Mutex<Option<ModelRun<'_>>>> = (0..cands.len()).map(|_| Mutex::new(None)).collect();
    let busy = AtomicUsize::new(0);
    let finish = |c: usize, result: Result<crate::Metrics, ReplayError>| {
        for d in (0..cands.len()).filter(|&d| source[d] == c) {
            let o = Outcome::new(&cands[d].conf, &result, events as u64);
            if recorded_rows.contains(&d) {
                cutoff.always_shown(o.key(d));
            }
            if o.stopped_at.is_none() {
                cutoff.finished(o.key(d));
            }
            progress();
        }
        let _ = done[c].set(result);
    };
    // Candidate `c`'s replay ended with `result`, under which of its
    // watched limits it was alike: the candidates it stands for take its
    // figures, the others queue for their own replay.
    let stand_in = |c: usize, result: &Result<crate::Metrics, ReplayError>, alike: &[u64]| {
        for d in (0..cands.len()).filter(|&d| watchers[d] == Some(c)) {
            match result {
                Ok(m) if proven_alike(&configs, d, alike) => finish(d, Ok(m.clone())),
                _ => lock(&queue).push(Reverse((true, (false, false, 0, 0, 0, d)))),
            }
        }
    };
    let end = |c: usize, result: Result<crate::Metrics, ReplayError>, alike: &[u64]| {
        stand_in(c, &result, alike);
        finish(c, result);
    };
    let step = |c: usize| -> Option<Key> {
        let mut slot = lock(&runs[c]);
        if slot.is_none() {
            let points = keeper.points(&cands[c].config, first.contains(&c));
            let limits = watched_limits(&configs, &watchers, c);
            match ModelRun::start(input.prepared, &cands[c].config, None, points, points > 0, &limits) {
                Ok(run) => *slot = Some(run),
                Err(e) => {
                    end(c, Err(e), &[]);
                    return None;
                }
            }
        }
        let run = slot.as_mut().expect("started");
        // The first of the candidates alike ranks best of them: its key decides.
        let key_of = |run: &ModelRun<'_>| {
            let so_far = run.so_far();
            (false, so_far.oom_count > 0, so_far.oom_count, so_far.peak_reserved_bytes, so_far.device_calls, c)
        };
        // One found out of the rows while it waited stops where it is.
        let out = run.applied() > 0 && cutoff.passed(&key_of(run));
        if !out {
            let until = if first.contains(&c) { events } else { run.applied() + run.applied().clamp(first_piece, piece) };
            if let Err(e) = run.advance(until) {
                slot.take();
                end(c, Err(e), &[]);
                return None;
            }
        }
        let key = key_of(run);
        if out || run.done() || cutoff.passed(&key) {
            let run = slot.take().expect("started");
            let alike = run.max_split_sizes_alike();
            end(c, keeper.keep(&cands[c].config, Ok(run.finish())), &alike);
            return None;
        }
        Some(key)
    };
    rayon::scope(|s| {
        for _ in 0..rayon::current_num_threads() {
            s.spawn(|_| loop {
                let next = {
                    let mut queue = lock(&queue);
                    let next = queue.pop();
                    if next.is_some() {
                        busy.fetch_add(1, Ordering::SeqCst);
                    }
                    next
                };
                match next {
                    Some(Reverse((later, (.., c)))) => {
                        if let Some(key) = step(c) {
                            lock(&queue).push(Reverse((later, key)));
                        }
                        busy.fetch_sub(1, Ordering::SeqCst);
                    }
                    // Another thread may put its candidate back.
                    None if busy.load(Ordering::SeqCst) > 0 => std::thread::sleep(std::time::Duration::from_millis(1)),
                    None => break,
                }
            });
        }
    });
    (0..cands.len()).map(|c| done[source[c]].get().expect("replayed").clone()).collect()
}

/// Keeps the timeline and state at the peak of one input's recorded
/// settings, replayed to the end, and of the candidates that are replayed
/// to the end whatever their figures (`best_rows`' first ones, which often
/// include the best: `report` then need not replay it again).
struct Keeper<'a> {
    /// The trace's entries.
    events: usize,
    /// The settings the trace was recorded with.
    recorded: &'a AllocatorConfig,
    /// See [`TuneOptions::timeline_points`].
    timeline_points: usize,
    drawn: &'a Mutex<Vec<Drawn>>,
}

impl Keeper<'_> {
    /// The timeline points a replay of `config` keeps (`to_the_end`: it
    /// will not be stopped).
    fn points(&self, config: &AllocatorConfig, to_the_end: bool) -> usize {
        if config == self.recorded || to_the_end {
            self.timeline_points
        } else {
            0
        }
    }

    /// The figures of a replay of `config`, its timeline and state at the
    /// peak kept if it ran to the end (the figures keep no timeline).
    fn keep(&self, config: &AllocatorConfig, run: Result<(crate::Metrics, Option<PeakState>), ReplayError>) -> Result<crate::Metrics, ReplayError> {
        let (mut metrics, peak) = run?;
        if let Some(peak) = peak.filter(|_| metrics.events == self.events as u64) {
            let timeline_points = self.timeline_points;
            lock(self.drawn).push(Drawn { config: config.clone(), timeline_points, metrics: metrics.clone(), peak });
            metrics.timeline = Vec::new();
        }
        Ok(metrics)
    }
}

fn worst_case(inputs: &[TuneInput<'_>], cands: &[Candidate], grid: &[Vec<Outcome>]) -> WorstCase {
    let worst_of = |c: usize| -> (usize, u64) {
        let i = (0..inputs.len()).max_by_key(|&i| grid[i][c].peak_reserved_bytes).expect("inputs");
        (i, grid[i][c].peak_reserved_bytes)
    };
    let key = |c: usize| {
        let any_error = grid.iter().any(|row| row[c].error.is_some());
        let ooms: u64 = grid.iter().map(|row| row[c].oom_count).sum();
        let calls: u64 = grid.iter().map(|row| row[c].device_calls).sum();
        (any_error, ooms > 0, ooms, worst_of(c).1, calls, c)
    };
    let best = (0..cands.len()).min_by_key(|&c| key(c)).expect("candidates");
    let (worst, peak) = worst_of(best);
    let recorded_worst = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let c = cands.iter().position(|c| c.config == *input.recorded()).expect("recorded is a candidate");
            grid[i][c].peak_reserved_bytes
        })
        .max()
        .unwrap_or(0);
    WorstCase {
        recommended: cands[best].conf.clone(),
        worst_peak_reserved_bytes: peak,
        worst_label: inputs[worst].label.clone(),
        oom: grid.iter().any(|row| row[best].oom),
        recorded_worst_peak_reserved_bytes: recorded_worst,
        peaks: inputs.iter().zip(grid).map(|(input, row)| (input.label.clone(), row[best].peak_reserved_bytes)).collect(),
    }
}

/// How a settings string reads in a table: `(PyTorch defaults)` when empty.
pub fn show_conf(conf: &str) -> &str {
    if conf.is_empty() {
        "(PyTorch defaults)"
    } else {
        conf
    }
}

/// How a settings string reads in a sentence.
pub fn describe_conf(conf: &str) -> String {
    if conf.is_empty() {
        "PyTorch's defaults".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF=\"{conf}\"")
    }
}

impl TuneResult {
    /// Whether a table of `rows` rows lists `o`: the first `rows` by rank
    /// among those replayed to the end, and the recorded settings always.
    pub fn shows(&self, o: &Outcome, rows: usize) -> bool {
        (o.rank <= rows && o.stopped_at.is_none()) || o.conf == self.recorded.conf
    }

    /// The ranked table with at most `rows` candidates (the recorded
    /// settings are always shown), then the recommendation.
    pub fn table(&self, rows: usize) -> String {
        let mut out = String::new();
        let capacity = self.capacity_bytes.map_or("unlimited".to_string(), format_size);
        out.push_str(&format!(
            "{} (device {}): {} events, {} settings replayed against capacity {}\n",
            self.label,
            self.device,
            self.events,
            self.candidates.len(),
            capacity
        ));
        out.push_str(&format!(
            "{:>5}  {:>13}  {:>11}  {:>12}  {:<4}  PYTORCH_CUDA_ALLOC_CONF\n",
            "rank", "peak reserved", "vs recorded", "device calls", "OOM"
        ));
        let hide = |o: &Outcome| !self.shows(o, rows);
        for o in &self.candidates {
            let is_recorded = o.conf == self.recorded.conf;
            if hide(o) {
                continue;
            }
            let versus = if self.recorded.peak_reserved_bytes == 0 || o.error.is_some() {
                "-".to_string()
            } else {
                let d = o.peak_reserved_bytes as f64 / self.recorded.peak_reserved_bytes as f64 - 1.0;
                format!("{:+.1}%", 100.0 * d)
            };
            let (peak, calls, oom) = match &o.error {
                Some(_) => ("failed".to_string(), "-".to_string(), "-"),
                None => (format_size(o.peak_reserved_bytes), o.device_calls.to_string(), if o.oom { "yes" } else { "no" }),
            };
            out.push_str(&format!(
                "{:>5}  {:>13}  {:>11}  {:>12}  {:<4}  {}{}\n",
                o.rank,
                peak,
                versus,
                calls,
                oom,
                show_conf(&o.conf),
                if is_recorded { "  <- recorded" } else { "" }
            ));
        }
        let hidden = self.candidates.iter().filter(|o| hide(o)).count();
        if hidden > 0 {
            out.push_str(&format!("  ({hidden} more; --all shows every row)\n"));
        }
        out.push_str(&format!(
            "lower bound: {} (the peak of live bytes, rounded as the allocator must; no setting reserves less)\n",
            format_size(self.lower_bound_bytes)
        ));
        if self.best.oom {
            out.push_str(&format!(
                "no setting tried avoids running out of memory at {capacity}; the one with the fewest failures is below\n"
            ));
        }
        out.push_str(&format!("recommended: PYTORCH_CUDA_ALLOC_CONF=\"{}\"\n", self.recommended));
        if self.best.conf == self.recorded.conf {
            out.push_str("the recorded settings are already the best of those tried\n");
        } else if self.recorded.oom && !self.best.oom {
            out.push_str(&format!(
                "the recorded settings, {}, run out of memory at {capacity}; the recommended ones do not (peak {} -> {})\n",
                describe_conf(&self.recorded.conf),
                format_size(self.recorded.peak_reserved_bytes),
                format_size(self.best.peak_reserved_bytes),
            ));
        } else {
            out.push_str(&format!(
                "saving: {} of peak reserved ({:.1}%) against the recorded settings, {} ({} -> {})\n",
                format_size(self.saving_bytes.unsigned_abs()),
                self.saving_percent,
                describe_conf(&self.recorded.conf),
                format_size(self.recorded.peak_reserved_bytes),
                format_size(self.best.peak_reserved_bytes),
            ));
        }
        out
    }
}

impl fmt::Display for TuneResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(TABLE_ROWS))
    }
}

impl fmt::Display for WorstCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "for every rank: PYTORCH_CUDA_ALLOC_CONF=\"{}\"", self.recommended)?;
        writeln!(
            f,
            "  worst rank {} peaks at {} (recorded settings: worst rank peaks at {}){}",
            self.worst_label,
            format_size(self.worst_peak_reserved_bytes),
            format_size(self.recorded_worst_peak_reserved_bytes),
            if self.oom { "; some rank still runs out of memory" } else { "" }
        )?;
        for (label, peak) in &self.peaks {
            writeln!(f, "  {label}: {}", format_size(*peak))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_split_values_are_powers_of_two_below_the_largest_segment() {
        assert_eq!(max_split_values(0), Vec::<u64>::new());
        assert_eq!(max_split_values(154 * MIB), vec![32, 64, 128]);
        assert_eq!(max_split_values(128 * MIB), vec![32, 64]);
        let many = max_split_values(1 << 50);
        assert_eq!(many.len(), MAX_SPLIT_VALUES);
        assert_eq!(many[0], 32);
        assert!(many.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_generated_setting_parses_and_the_recorded_one_comes_first() {
        let trace = DeviceTrace {
            device: 0,
            end_segments: Vec::new(),
            events: [vramkit_core::TraceEntry::new(TraceAction::Alloc, 0, 300 * MIB, 0)].into_iter().collect(),
        };
        let recorded = AllocatorConfig::parse("max_split_size_mb:200").unwrap();
        let prepared = PreparedTrace::new(&trace, recorded.clone(), None).unwrap();
        let input = TuneInput { label: "t".into(), prepared: &prepared, capacity_bytes: Some(1 << 34) };
        let all = candidates(std::slice::from_ref(&input), &TuneOptions::default());
        assert_eq!(all[0].config, recorded);
        assert_eq!(all[0].conf, "max_split_size_mb:200");
        assert_eq!(all[1].conf, "");
        // 2 expandable x 5 max_split (unset, 32..256) x 6 roundup x 5 gc, less nothing: all distinct.
        assert_eq!(all.len(), 1 + 2 * 5 * 6 * 5);
        for c in &all[1..] {
            assert_eq!(AllocatorConfig::parse(&c.conf).unwrap(), c.config, "{}", c.conf);
        }
        assert!(all.iter().any(|c| c.conf == "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"));
        assert!(all.iter().any(|c| c.conf.contains("garbage_collection_threshold:0.6,per_process_memory_fraction:0.99")));
        // Simplest first: one key at a time before any combination.
        let first_combination = all.iter().position(|c| c.conf.contains(',') && !c.conf.contains("garbage")).unwrap();
        assert!(all[1..first_combination].iter().all(|c| !c.conf.contains(',') || c.conf.starts_with("garbage")));
        let limited = candidates(std::slice::from_ref(&input), &TuneOptions { max_candidates: Some(10), exact: Exact::All, timeline_points: 0 });
        assert_eq!(limited.len(), 10);
        assert_eq!(limited[..], all[..10]);
        // No capacity: no garbage collection (it needs a fraction of a known capacity).
        let input = TuneInput { capacity_bytes: None, ..input };
        assert!(candidates(&[input], &TuneOptions::default()).iter().all(|c| !c.conf.contains("garbage")));
    }

    /// On a synthetic training trace the unlimited replay stands for some
    /// limits and not for others; where it does, each limited candidate's
    /// own replay has its figures.
    #[test]
    fn a_watching_replay_stands_for_the_limits_it_proves_alike() {
        crate::sampled_invariant_checks();
        let snapshot = crate::synthetic::record(&crate::synthetic::Workload::new(30_000));
        let trace = DeviceTrace::split(&snapshot).swap_remove(0);
        let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), None).unwrap();
        let input = TuneInput { label: "t".into(), prepared: &prepared, capacity_bytes: None };
        let cands = candidates(std::slice::from_ref(&input), &TuneOptions::default());
        let configs: Vec<&AllocatorConfig> = cands.iter().map(|c| &c.config).collect();
        let mut requests = Requests::of(&trace.events, &prepared.start().segments);
        let forms: Vec<AllocatorConfig> = configs.iter().map(|c| requests.form(c)).collect();
        let source: Vec<usize> = forms.iter().map(|f| forms.iter().position(|g| g == f).unwrap()).collect();
        let watchers = watchers(&configs, &forms, &source, |_| false);
        let (mut proven, mut refuted) = (0, 0);
        for a in (0..cands.len()).filter(|&a| watchers.contains(&Some(a))) {
            let limits = watched_limits(&configs, &watchers, a);
            let (run, alike) = run_watching(&prepared, configs[a], None, 0, false, &limits);
            let (figures, _) = run.unwrap();
            for c in (0..cands.len()).filter(|&c| watchers[c] == Some(a)) {
                if proven_alike(&configs, c, &alike) {
                    proven += 1;
                    assert_eq!(prepared.model_replay(configs[c], None, 0).unwrap(), figures, "{} for {}", cands[a].conf, cands[c].conf);
                } else {
                    refuted += 1;
                }
            }
        }
        assert!(proven > 0 && refuted > 0, "{proven} proven, {refuted} refuted");
    }
}

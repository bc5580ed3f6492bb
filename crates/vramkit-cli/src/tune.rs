//! `vramkit tune`: the settings that reserve the least, for one snapshot or
//! for every rank of a job.

use crate::cli::{RulesArgs, TuneArgs};
use crate::input::{capacity_for, load_traces, parse_size, prepare, recorded_config, traces_with_events, CliError};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use vramkit_replay::tune::TABLE_ROWS;
use vramkit_replay::{DeviceTrace, Exact, PreparedTrace, TuneInput, TuneOptions, TuneReport, TuneResult};

/// One device trace of one file, prepared to tune.
pub struct Loaded {
    pub label: String,
    pub prepared: PreparedTrace<'static>,
    pub capacity: Option<u64>,
    pub capacity_source: &'static str,
}

/// Reads the snapshots and prepares their device traces with events.
pub fn load_inputs(paths: &[impl AsRef<Path>], capacity: Option<&str>, rules: &RulesArgs) -> Result<Vec<Loaded>, CliError> {
    let given = capacity.map(parse_size).transpose()?;
    let mut out = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let file = load_traces(path)?;
        let recorded = recorded_config(&file, rules)?;
        let traces = traces_with_events(DeviceTrace::split_file(file), path, "tune")?;
        let several = traces.len() > 1;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        for trace in traces {
            let label = if several { format!("{name} device {}", trace.device) } else { name.clone() };
            let prepared = prepare(trace, &recorded, path)?;
            let (capacity, capacity_source) = capacity_for(&prepared, given);
            out.push(Loaded { label, prepared, capacity, capacity_source });
        }
    }
    Ok(out)
}

/// Tunes with a progress bar.
pub fn run_tune(inputs: &[TuneInput<'_>], options: TuneOptions) -> Result<TuneReport, CliError> {
    let count = vramkit_replay::tune::candidates(inputs, &options).len() * inputs.len();
    let bar = crate::progress::bar(count as u64, "tune: replaying settings");
    let report = vramkit_replay::tune(inputs, &options, &|| bar.inc(1)).map_err(|e| CliError::new(e.to_string()))?;
    bar.finish_and_clear();
    Ok(report)
}

impl Loaded {
    pub fn input(&self) -> TuneInput<'_> {
        TuneInput { label: self.label.clone(), prepared: &self.prepared, capacity_bytes: self.capacity }
    }
}

/// The JSON object of one result.
pub fn result_json(r: &TuneResult, capacity_source: &str) -> serde_json::Value {
    serde_json::json!({
        "snapshot": r.label,
        "device": r.device,
        "events": r.events,
        "capacity_bytes": r.capacity_bytes,
        "capacity_source": capacity_source,
        "recorded": r.recorded,
        "recommended": r.recommended,
        "best": r.best,
        "lower_bound_bytes": r.lower_bound_bytes,
        "saving_bytes": r.saving_bytes,
        "saving_percent": r.saving_percent,
        "candidates": r.candidates,
    })
}

pub fn run(args: TuneArgs) -> Result<ExitCode, CliError> {
    let loaded = load_inputs(&args.snapshots, args.capacity.as_deref(), &args.rules)?;
    let inputs: Vec<TuneInput<'_>> = loaded.iter().map(Loaded::input).collect();
    // The table's rows need exact figures; every row (--all, --json) needs them all.
    let exact = if args.all || args.json { Exact::All } else { Exact::Rows(TABLE_ROWS) };
    let report = run_tune(&inputs, TuneOptions { max_candidates: args.max_candidates, exact, timeline_points: 0 })?;
    let fits = report.results.iter().all(|r| !r.best.oom);
    if args.json {
        let results: Vec<serde_json::Value> =
            report.results.iter().zip(&loaded).map(|(r, l)| result_json(r, l.capacity_source)).collect();
        let value = match &report.worst_case {
            None => results.into_iter().next().expect("one result"),
            Some(w) => serde_json::json!({ "snapshots": results, "worst_case": w }),
        };
        let text = serde_json::to_string_pretty(&value).map_err(|e| CliError::new(e.to_string()))?;
        writeln!(std::io::stdout(), "{text}")?;
    } else {
        let mut out = std::io::stdout().lock();
        let rows = if args.all { usize::MAX } else { TABLE_ROWS };
        for (i, (r, l)) in report.results.iter().zip(&loaded).enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            if l.capacity_source == "inferred from the trace" {
                writeln!(out, "(capacity inferred from the trace's refusals; pass --capacity to set it)")?;
            }
            write!(out, "{}", r.table(rows))?;
        }
        if let Some(w) = &report.worst_case {
            writeln!(out)?;
            write!(out, "{w}")?;
        }
    }
    // Nothing tried fits the capacity: a failed check for scripts.
    Ok(if fits { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

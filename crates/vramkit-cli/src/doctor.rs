//! `vramkit doctor`: where the memory goes, in plain words, with a
//! recommendation when the snapshot has events.

use crate::cli::DoctorArgs;
use crate::input::{capacity_for, load_traces, parse_size, prepare, print_devices, recorded_config, CliError};
use crate::tune::run_tune;
use std::io::Write;
use std::process::ExitCode;
use vramkit_replay::doctor::{diagnose, diagnose_trace, Diagnosis};
use vramkit_replay::{DeviceTrace, Exact, PreparedTrace, TuneInput, TuneOptions};

/// What [`diagnoses`] found: one diagnosis per trace, the tune of those
/// with allocations, the capacity each ran against, and those traces as
/// prepared (for further replays).
pub struct Diagnosed<'t> {
    pub diagnoses: Vec<Diagnosis>,
    pub tune: Option<vramkit_replay::TuneReport>,
    pub capacities: Vec<Option<u64>>,
    /// Per trace: prepared if it has allocations.
    pub prepared: Vec<Option<PreparedTrace<'t>>>,
}

/// Diagnoses every device of a snapshot, tuning those with events; each
/// of those is prepared once, for the tune and the diagnosis alike, which
/// runs with `options`.
pub fn diagnoses<'t>(
    traces: &'t [DeviceTrace],
    path: &std::path::Path,
    recorded: &vramkit_core::AllocatorConfig,
    capacity: Option<&str>,
    options: TuneOptions,
) -> Result<Diagnosed<'t>, CliError> {
    let given = capacity.map(parse_size).transpose()?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut capacities = Vec::new();
    let mut prepared = Vec::new();
    for t in traces {
        if t.has_allocations() {
            let p = prepare(t, recorded, path)?;
            capacities.push(capacity_for(&p, given).0);
            prepared.push(Some(p));
        } else {
            capacities.push(given);
            prepared.push(None);
        }
    }
    let inputs: Vec<TuneInput<'_>> = prepared
        .iter()
        .zip(&capacities)
        .filter_map(|(p, &c)| p.as_ref().map(|p| TuneInput { label: name.clone(), prepared: p, capacity_bytes: c }))
        .collect();
    let report = if inputs.is_empty() { None } else { Some(run_tune(&inputs, options)?) };
    drop(inputs);
    let mut next = report.iter().flat_map(|r| r.results.iter());
    let mut out = Vec::new();
    for (t, p) in traces.iter().zip(&prepared) {
        let found = match p {
            Some(p) => diagnose(p, next.next()),
            None => diagnose_trace(t, recorded, None),
        };
        out.push(found.map_err(|e| CliError::new(format!("{}: {e}", path.display())))?);
    }
    Ok(Diagnosed { diagnoses: out, tune: report, capacities, prepared })
}

pub fn run(args: DoctorArgs) -> Result<ExitCode, CliError> {
    let file = load_traces(&args.snapshot)?;
    let recorded = recorded_config(&file, &args.rules)?;
    let traces = DeviceTrace::split_file(file);
    if traces.is_empty() {
        return Err(CliError::new(format!("{}: the snapshot has no segments and no trace", args.snapshot.display())));
    }
    // The recommendation names the best candidate and the recorded settings only.
    let options = TuneOptions { max_candidates: args.max_candidates, exact: Exact::Best, timeline_points: 0 };
    let found = diagnoses(&traces, &args.snapshot, &recorded, args.capacity.as_deref(), options)?.diagnoses;
    if args.json {
        print_devices(found.iter().map(|d| serde_json::to_value(d).expect("serialisable")).collect())?;
    } else {
        let mut out = std::io::stdout().lock();
        for (i, d) in found.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "{d}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `vramkit doctor`: where the memory goes, in plain words, with a
//! recommendation when the snapshot has events.

use crate::cli::DoctorArgs;
use crate::input::{capacity_for, load, parse_size, print_devices, recorded_config, CliError};
use crate::tune::run_tune;
use std::io::Write;
use std::process::ExitCode;
use vramkit_replay::doctor::{diagnose, Diagnosis};
use vramkit_replay::{DeviceTrace, TuneInput};

/// What [`diagnoses`] found: one diagnosis per trace, the tune of those
/// with allocations, and the capacity each ran against.
pub struct Diagnosed {
    pub diagnoses: Vec<Diagnosis>,
    pub tune: Option<vramkit_replay::TuneReport>,
    pub capacities: Vec<Option<u64>>,
}

/// Diagnoses every device of a snapshot, tuning those with events.
pub fn diagnoses(
    traces: &[DeviceTrace],
    path: &std::path::Path,
    recorded: &vramkit_core::AllocatorConfig,
    capacity: Option<&str>,
    max_candidates: Option<usize>,
) -> Result<Diagnosed, CliError> {
    let given = capacity.map(parse_size).transpose()?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut capacities = Vec::new();
    let mut inputs = Vec::new();
    for t in traces {
        if t.has_allocations() {
            let (c, _) = capacity_for(t, recorded, given, path)?;
            capacities.push(c);
            inputs.push(TuneInput { label: name.clone(), trace: t, recorded: recorded.clone(), capacity_bytes: c });
        } else {
            capacities.push(given);
        }
    }
    let report = if inputs.is_empty() { None } else { Some(run_tune(&inputs, max_candidates)?) };
    let mut next = report.iter().flat_map(|r| r.results.iter());
    let mut out = Vec::new();
    for t in traces {
        let tuned = if t.has_allocations() { next.next() } else { None };
        out.push(diagnose(t, recorded, tuned).map_err(|e| CliError::new(format!("{}: {e}", path.display())))?);
    }
    Ok(Diagnosed { diagnoses: out, tune: report, capacities })
}

pub fn run(args: DoctorArgs) -> Result<ExitCode, CliError> {
    let file = load(&args.snapshot)?;
    let recorded = recorded_config(&file, &args.rules)?;
    let traces = DeviceTrace::split(&file.snapshot);
    if traces.is_empty() {
        return Err(CliError::new(format!("{}: the snapshot has no segments and no trace", args.snapshot.display())));
    }
    let found = diagnoses(&traces, &args.snapshot, &recorded, args.capacity.as_deref(), args.max_candidates)?.diagnoses;
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

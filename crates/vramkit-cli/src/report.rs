//! `vramkit report`: one self-contained HTML file.

use crate::cli::ReportArgs;
use crate::doctor::diagnoses;
use crate::input::{load_traces, prepare, recorded_config, CliError};
use std::io::Write;
use std::process::ExitCode;
use vramkit_replay::report::{build, ReportInput, TIMELINE_POINTS};
use vramkit_replay::tune::TABLE_ROWS;
use vramkit_replay::{DeviceTrace, Exact, TuneOptions};

pub fn run(args: ReportArgs) -> Result<ExitCode, CliError> {
    let file = load_traces(&args.snapshot)?;
    let recorded = recorded_config(&file, &args.rules)?;
    let all = DeviceTrace::split_file(file);
    let trace = match args.device {
        Some(d) => all.into_iter().find(|t| t.device == d).ok_or_else(|| {
            CliError::new(format!("{}: no device {d} in the snapshot", args.snapshot.display()))
        })?,
        None => {
            let first_with_events = all.iter().position(DeviceTrace::has_allocations).unwrap_or(0);
            all.into_iter().nth(first_with_events).ok_or_else(|| {
                CliError::new(format!("{}: the snapshot has no segments and no trace", args.snapshot.display()))
            })?
        }
    };
    let traces = [trace];
    // The page's table shows the rows `vramkit tune` shows; the tune keeps
    // the timelines the page draws.
    let options = TuneOptions { max_candidates: args.max_candidates, exact: Exact::Rows(TABLE_ROWS), timeline_points: TIMELINE_POINTS };
    let mut found = diagnoses(&traces, &args.snapshot, &recorded, args.capacity.as_deref(), options)?;
    let prepared = match found.prepared[0].take() {
        Some(p) => p,
        None => prepare(&traces[0], &recorded, &args.snapshot)?,
    };
    let label = args.snapshot.file_name().map_or_else(|| args.snapshot.display().to_string(), |n| n.to_string_lossy().into_owned());
    let spinner = crate::progress::spinner("report: replaying the recorded and recommended settings");
    let report = build(&ReportInput {
        label,
        prepared: &prepared,
        capacity_bytes: found.capacities[0],
        tune: found.tune.as_ref().map(|r| &r.results[0]),
        diagnosis: &found.diagnoses[0],
    })
    .map_err(|e| CliError::new(format!("{}: {e}", args.snapshot.display())))?;
    let html = report.to_html();
    spinner.finish_and_clear();
    std::fs::write(&args.output, &html).map_err(|e| CliError::new(format!("{}: {e}", args.output.display())))?;
    writeln!(std::io::stdout(), "wrote {} ({} KiB)", args.output.display(), html.len().div_ceil(1024))?;
    Ok(ExitCode::SUCCESS)
}

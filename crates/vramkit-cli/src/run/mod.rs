//! `vramkit run`: the user's program on a simulated GPU, its memory explained, its settings tuned
//! for the card, and (`--batch`) the largest batch that fits.
//!
//! # Architecture
//! [`launch::Session::prepare`] checks the inputs, finds the program's Python ([`python`]) and asks
//! it which torch it would import (without importing it) and takes the simulated CUDA stack of that
//! torch's CUDA major (vramkit-simgpu). Each run puts the stack in the program's environment and the
//! start-up [`hook`] first on `PYTHONPATH`; the hook records PyTorch's own memory history and
//! leaves a snapshot and a status file per process ([`recording`]). [`analysis`] reads the snapshot
//! as `vramkit doctor` does, tuning against the card's usable memory, and [`location`] names the
//! line that ran out. `--batch` repeats runs as [`search`] decides, over the values [`batch`]
//! parsed, with the recorded settings and then the recommended ones. Everything found goes into
//! one [`result::RunReport`], printed by [`text`] or as JSON.

mod analysis;
mod batch;
mod hook;
mod launch;
mod location;
mod python;
mod recording;
mod result;
mod search;
mod text;

use crate::cli::RunArgs;
use crate::input::CliError;
use analysis::{analyse, locate_oom, Analysis};
use batch::BatchSpec;
use launch::{Output, Session};
use recording::{Outcome, Recording};
use result::{Batch, Gpu, Oom, Recommended, Run, RunReport, LIMITS};
use std::io::Write;
use std::path::Path;
use search::Start;
use std::process::ExitCode;

pub fn run(args: RunArgs) -> Result<ExitCode, CliError> {
    let session = Session::prepare(&args)?;
    let mut runs: Vec<Recording> = Vec::new();
    // The recorded run the diagnosis is of: the program as given, else (--batch) the largest value
    // that fits with the session's settings, else the first that ran out, run again recording.
    let (mut batch, slope) = match &session.batch {
        None => {
            runs.push(session.run(None, None, Output::Shown, true)?);
            (None, None)
        }
        Some(spec) => {
            let (found, stopped) = search_with(&session, spec, Start::Fresh, None, &mut runs)?;
            if !stopped {
                if let Some(value) = found.largest_fit.or(found.smallest_oom) {
                    runs.push(session.run(Some(value), None, Output::Kept, true)?);
                }
            }
            (Some(Batch::recorded(spec, &found)), found.slope())
        }
    };
    let reported = runs.len() - 1;
    let analysis = analyse(&runs[reported], &session, args.max_candidates)?;
    let recommended = match analysis.as_ref().and_then(Analysis::better_conf) {
        None => None,
        Some(t) => {
            let mut r = Recommended::of(t);
            match (&session.batch, batch.as_mut()) {
                (Some(spec), Some(b)) => {
                    let start = match b.largest_fit {
                        Some(value) => Start::Above { value, peak: r.predicted_peak_reserved_bytes, slope },
                        None => Start::Fresh,
                    };
                    let (found, _) = search_with(&session, spec, start, Some(&r.conf), &mut runs)?;
                    b.best(&r.conf, &found);
                }
                // The replay saw the program only up to its error: run it again to know.
                _ if runs[0].outcome() == Outcome::OutOfMemory && r.predicted_fits => {
                    runs.push(session.run(None, Some(&r.conf), Output::Kept, false)?);
                    r.checked_run = Some(runs.len() - 1);
                }
                _ => {}
            }
            Some(r)
        }
    };
    let snapshot = match (&args.output, runs[reported].snapshot()) {
        (Some(path), Some(snapshot)) => Some(keep(snapshot, path)?),
        _ => None,
    };
    let oom_run = match &batch {
        None => Some(0),
        Some(b) => b.smallest_oom.and_then(|v| runs.iter().position(|r| r.value == Some(v) && r.conf == session.conf)),
    };
    let oom = oom_run.filter(|&i| runs[i].outcome() == Outcome::OutOfMemory).map(|i| oom_of(&runs, i)).transpose()?;
    let mut notes = session.notes.clone();
    if let Some(r) = runs.iter().find(|r| r.gpu_processes > 1) {
        notes.push(format!("{} processes used the GPU; each run reports the first that ran out of memory, else the one that reserved most", r.gpu_processes));
    }
    if let Some(r) = runs.iter().find(|r| r.died_in_teardown()) {
        let run = r.value.map_or_else(String::new, |v| format!("at {v}, "));
        notes.push(format!("{run}{} after its code had finished (Python was exiting): the run is counted as complete", r.exit_text()));
    }
    let report = RunReport {
        gpu: Gpu {
            key: session.preset.key.to_string(),
            name: session.preset.device_name.to_string(),
            default: session.gpu_is_default,
            total_bytes: session.preset.total_bytes,
            reserve_bytes: session.reserve_bytes,
            usable_bytes: session.usable_bytes(),
        },
        torch: session.torch.version.clone().unwrap_or_default(),
        command: session.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        conf: session.conf.clone(),
        notes,
        runs: runs.iter().map(Run::of).collect(),
        reported_run: reported,
        fits: match &batch {
            None => runs[0].outcome() == Outcome::Fits,
            Some(b) => b.largest_fit.or(b.largest_fit_best).is_some(),
        },
        headroom_bytes: session.usable_bytes() as i64 - runs[reported].peak_reserved_bytes() as i64,
        oom,
        recommended,
        batch,
        diagnosis: analysis.map(|a| a.diagnosis),
        snapshot,
        limits: LIMITS,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report).map_err(|e| CliError::new(e.to_string()))?)?;
    } else {
        write!(out, "{report}")?;
    }
    let failed = report.runs.iter().any(|r| r.result == "failed");
    Ok(if report.fits && !failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Why a search ended early.
enum Stop {
    /// The program failed at a value (said on stderr; its row says so).
    Failed,
    Error(CliError),
}

/// Runs the search with `conf` (else the session's settings), recording nothing and keeping
/// every run; `true` beside what it found when a run failed for a reason other than memory,
/// which ends it with nothing found.
fn search_with(
    session: &Session,
    spec: &BatchSpec,
    start: Start,
    conf: Option<&str>,
    runs: &mut Vec<Recording>,
) -> Result<(search::Found, bool), CliError> {
    let settings = vramkit_replay::tune::describe_conf(conf.unwrap_or(&session.conf));
    let spinner = crate::progress::spinner("");
    let found = search::search(&spec.values, session.usable_bytes(), start, |value| {
        spinner.set_message(format!("running the program with {}={value}, {settings}", spec.var));
        let recording = session.run(Some(value), conf, Output::Kept, false).map_err(Stop::Error)?;
        let outcome = recording.outcome();
        let peak = recording.peak_reserved_bytes();
        if let Outcome::Failed(why) = &outcome {
            eprintln!("vramkit: at {}={value} {why}; the end of its output:\n{}", spec.var, recording.output_tail);
        }
        runs.push(recording);
        match outcome {
            Outcome::Fits => Ok(Some(peak)),
            Outcome::OutOfMemory => Ok(None),
            Outcome::Failed(_) => Err(Stop::Failed),
        }
    });
    spinner.finish_and_clear();
    match found {
        Ok(found) => Ok((found, false)),
        Err(Stop::Failed) => Ok((search::Found::default(), true)),
        Err(Stop::Error(e)) => Err(e),
    }
}

/// Where and how run `i` ran out.
fn oom_of(runs: &[Recording], i: usize) -> Result<Oom, CliError> {
    let status = runs[i].status.as_ref().and_then(|s| s.oom.clone()).unwrap_or_default();
    Ok(Oom { run: i, message: status.message, requested_bytes: status.requested_bytes, location: locate_oom(&runs[i])? })
}

/// Copies the snapshot to `-o`'s path.
fn keep(snapshot: &Path, to: &Path) -> Result<std::path::PathBuf, CliError> {
    std::fs::copy(snapshot, to).map_err(|e| CliError::new(format!("-o {}: cannot write the snapshot there: {e}", to.display())))?;
    Ok(to.to_path_buf())
}

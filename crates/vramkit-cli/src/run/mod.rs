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
mod args;
mod batch;
mod hook;
mod launch;
mod location;
mod python;
mod recording;
mod result;
mod search;
mod text;

pub use args::{RunArgs, EXAMPLES};

use crate::input::CliError;
use analysis::{analyse, locate_oom, Analysis};
use batch::BatchSpec;
use launch::Session;
use recording::{Outcome, Recording};
use result::{Batch, Gpu, Oom, Recommended, Run, RunReport, LIMITS};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: RunArgs) -> Result<ExitCode, CliError> {
    let session = Session::prepare(&args)?;
    let mut runs: Vec<Recording> = Vec::new();
    let mut batch = match &session.batch {
        None => {
            runs.push(session.run(None, None, false)?);
            None
        }
        Some(spec) => Some(search_recorded(&session, spec, &mut runs)?),
    };
    // The run explained: the only one, else the largest value that fits with the recorded
    // settings, else the first that ran out.
    let reported = match &batch {
        None => 0,
        Some(b) => find_run(&runs, b.largest_fit.or(b.smallest_oom), &session.conf).unwrap_or(runs.len() - 1),
    };
    let analysis = analyse(&runs[reported], &session, args.max_candidates)?;
    let recommended = match analysis.as_ref().and_then(Analysis::better_conf) {
        None => None,
        Some(t) => {
            let mut r = Recommended {
                conf: t.recommended.clone(),
                predicted_peak_reserved_bytes: t.best.peak_reserved_bytes,
                predicted_fits: !t.best.oom,
                checked_run: None,
            };
            match (&session.batch, batch.as_mut()) {
                (Some(spec), Some(b)) => search_best(&session, spec, b, &r.conf, &mut runs)?,
                // The replay saw the program only up to its error: run it again to know.
                _ if runs[0].outcome() == Outcome::OutOfMemory && r.predicted_fits => {
                    runs.push(session.run(None, Some(&r.conf), true)?);
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
        None => (runs[0].outcome() == Outcome::OutOfMemory).then_some(0),
        Some(b) => find_run(&runs, b.smallest_oom, &session.conf),
    };
    let oom = oom_run.map(|i| oom_of(&runs, i)).transpose()?;
    let mut notes = session.notes.clone();
    if let Some(r) = runs.iter().find(|r| r.gpu_processes > 1) {
        notes.push(format!("{} processes used the GPU; each run reports the first that ran out of memory, else the one that reserved most", r.gpu_processes));
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

/// The `--batch` search with the session's settings.
fn search_recorded(session: &Session, spec: &BatchSpec, runs: &mut Vec<Recording>) -> Result<Batch, CliError> {
    let found = search_with(session, spec, None, None, runs)?;
    Ok(Batch {
        variable: spec.var.clone(),
        values: spec.to_string(),
        largest_fit: found.largest_fit,
        smallest_oom: found.smallest_oom,
        best_conf: None,
        largest_fit_best: None,
        smallest_oom_best: None,
    })
}

/// The search again with the recommended settings, from the largest value that fitted without them.
fn search_best(session: &Session, spec: &BatchSpec, b: &mut Batch, conf: &str, runs: &mut Vec<Recording>) -> Result<(), CliError> {
    b.best_conf = Some(conf.to_string());
    if b.smallest_oom.is_some() {
        let found = search_with(session, spec, b.largest_fit, Some(conf), runs)?;
        (b.largest_fit_best, b.smallest_oom_best) = (found.largest_fit, found.smallest_oom);
    }
    Ok(())
}

/// Why a search ended early.
enum Stop {
    /// The program failed at a value (said on stderr; its row says so).
    Failed,
    Error(CliError),
}

/// Runs the search quietly with `conf` (else the session's settings), keeping every run. A run
/// that fails for a reason other than memory ends it, with nothing found.
fn search_with(
    session: &Session,
    spec: &BatchSpec,
    known_fit: Option<u64>,
    conf: Option<&str>,
    runs: &mut Vec<Recording>,
) -> Result<search::Found, CliError> {
    let settings = vramkit_replay::tune::describe_conf(conf.unwrap_or(&session.conf));
    let spinner = crate::progress::spinner("");
    let found = search::search(&spec.values, known_fit, |value| {
        spinner.set_message(format!("running the program with {}={value}, {settings}", spec.var));
        let recording = session.run(Some(value), conf, true).map_err(Stop::Error)?;
        let outcome = recording.outcome();
        if let Outcome::Failed(why) = &outcome {
            eprintln!("vramkit: at {}={value} {why}; the end of its output:\n{}", spec.var, recording.output_tail);
        }
        runs.push(recording);
        match outcome {
            Outcome::Fits => Ok(true),
            Outcome::OutOfMemory => Ok(false),
            Outcome::Failed(_) => Err(Stop::Failed),
        }
    });
    spinner.finish_and_clear();
    match found {
        Ok(found) => Ok(found),
        Err(Stop::Failed) => Ok(search::Found::default()),
        Err(Stop::Error(e)) => Err(e),
    }
}

/// The run at `value` with the session's own settings.
fn find_run(runs: &[Recording], value: Option<u64>, conf: &str) -> Option<usize> {
    let value = value?;
    runs.iter().position(|r| r.value == Some(value) && r.conf == conf)
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

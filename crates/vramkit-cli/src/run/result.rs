//! What `vramkit run` found: one structure, printed as text or as JSON (`--json`).

use super::batch::BatchSpec;
use super::location::Location;
use super::recording::{Outcome, Recording};
use super::search::Found;
use serde::Serialize;
use std::path::PathBuf;
use vramkit_replay::doctor::Diagnosis;

/// What kernels that do not run and memory outside PyTorch mean for the answer.
pub const LIMITS: &str = "kernels do not run, so tensors hold zeros: a program whose allocations depend on values \
(data-dependent shapes, .item() in control flow) is simulated with zeros; memory outside PyTorch's allocator (the CUDA \
context, NCCL buffers, other processes) is not counted unless --reserve adds it";

/// The simulated card.
#[derive(Clone, Debug, Serialize)]
pub struct Gpu {
    /// `--gpu`'s name for it.
    pub key: String,
    /// What torch.cuda.get_device_name() showed.
    pub name: String,
    /// `--gpu` was not given.
    pub default: bool,
    pub total_bytes: u64,
    /// `--reserve`.
    pub reserve_bytes: u64,
    /// What PyTorch may use: total less reserve.
    pub usable_bytes: u64,
}

/// One run of the program.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The `--batch` value.
    pub value: Option<u64>,
    /// `PYTORCH_CUDA_ALLOC_CONF` (empty: PyTorch's defaults).
    pub conf: String,
    /// `fits`, `out of memory` or `failed`.
    pub result: &'static str,
    /// It recorded a snapshot (the runs of a search do not).
    pub recorded: bool,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// PyTorch's out-of-memory message.
    pub oom_message: Option<String>,
    /// Why the run failed (not by running out of memory).
    pub failure: Option<String>,
}

impl Run {
    pub fn of(r: &Recording) -> Run {
        let outcome = r.outcome();
        let status = r.status.as_ref();
        Run {
            value: r.value,
            conf: r.conf.clone(),
            result: match outcome {
                Outcome::Fits => "fits",
                Outcome::OutOfMemory => "out of memory",
                Outcome::Failed(_) => "failed",
            },
            recorded: r.snapshot().is_some(),
            peak_reserved_bytes: r.peak_reserved_bytes(),
            peak_allocated_bytes: status.and_then(|s| s.peak_allocated_bytes).unwrap_or(0),
            oom_message: status.and_then(|s| s.oom.as_ref()).and_then(|o| o.message.clone()),
            failure: match outcome {
                Outcome::Failed(why) => Some(why),
                _ => None,
            },
        }
    }

    pub fn fits(&self) -> bool {
        self.result == "fits"
    }
}

/// Where and how the program ran out of memory.
#[derive(Clone, Debug, Serialize)]
pub struct Oom {
    /// The run (its index in `runs`).
    pub run: usize,
    /// PyTorch's message.
    pub message: Option<String>,
    pub requested_bytes: u64,
    /// The line of the program that asked.
    pub location: Option<Location>,
}

/// The best settings for the card, by the tune on the recording.
#[derive(Clone, Debug, Serialize)]
pub struct Recommended {
    pub conf: String,
    /// The tune's replay of the recording under it.
    pub predicted_peak_reserved_bytes: u64,
    /// The tune says it does not run out of memory at the usable memory.
    pub predicted_fits: bool,
    /// A run of the program under it (made when the recorded settings ran out), its index in `runs`.
    pub checked_run: Option<usize>,
}

impl Recommended {
    /// The tune's recommendation, not checked by a run yet.
    pub fn of(t: &vramkit_replay::TuneResult) -> Recommended {
        Recommended { conf: t.recommended.clone(), predicted_peak_reserved_bytes: t.best.peak_reserved_bytes, predicted_fits: !t.best.oom, checked_run: None }
    }
}

/// The `--batch` search.
#[derive(Clone, Debug, Serialize)]
pub struct Batch {
    pub variable: String,
    /// As given, e.g. `BS=1..512`.
    pub values: String,
    /// With the recorded settings.
    pub largest_fit: Option<u64>,
    pub smallest_oom: Option<u64>,
    /// With the recommended settings (when they differ from the recorded ones).
    pub best_conf: Option<String>,
    pub largest_fit_best: Option<u64>,
    pub smallest_oom_best: Option<u64>,
}

impl Batch {
    /// What the search with the recorded settings found.
    pub fn recorded(spec: &BatchSpec, found: &Found) -> Batch {
        Batch {
            variable: spec.var.clone(),
            values: spec.to_string(),
            largest_fit: found.largest_fit,
            smallest_oom: found.smallest_oom,
            best_conf: None,
            largest_fit_best: None,
            smallest_oom_best: None,
        }
    }

    /// Adds what the search with the recommended settings `conf` found.
    pub fn best(&mut self, conf: &str, found: &Found) {
        self.best_conf = Some(conf.to_string());
        (self.largest_fit_best, self.smallest_oom_best) = (found.largest_fit, found.smallest_oom);
    }
}

/// Everything `vramkit run` reports.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub gpu: Gpu,
    /// The program's torch, e.g. `2.15.0+cu132`.
    pub torch: String,
    pub command: Vec<String>,
    /// The settings the program ran with (empty: PyTorch's defaults).
    pub conf: String,
    pub notes: Vec<String>,
    /// Every run, in order.
    pub runs: Vec<Run>,
    /// The run the diagnosis is of.
    pub reported_run: usize,
    /// It fits (with --batch: some value fits, with the recorded or the recommended settings).
    pub fits: bool,
    /// Usable memory less the reported run's peak reserved (negative: it did not fit).
    pub headroom_bytes: i64,
    pub oom: Option<Oom>,
    pub recommended: Option<Recommended>,
    pub batch: Option<Batch>,
    /// What `vramkit doctor` finds in the reported run's snapshot.
    pub diagnosis: Option<Diagnosis>,
    /// Where the snapshot was kept (`-o`).
    pub snapshot: Option<PathBuf>,
    pub limits: &'static str,
}

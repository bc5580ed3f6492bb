//! A recording read as `vramkit doctor` reads a snapshot, with the tune against the simulated
//! card's usable memory; and the line where the program ran out.

use super::launch::Session;
use super::location::{locate, Location};
use super::recording::Recording;
use crate::doctor::diagnoses;
use crate::input::{load, load_traces, CliError};
use vramkit_core::TraceAction;
use vramkit_replay::doctor::Diagnosis;
use vramkit_replay::{DeviceTrace, Exact, TuneOptions, TuneResult};

/// What the snapshot of a run says.
#[derive(Debug)]
pub struct Analysis {
    /// What `vramkit doctor` prints.
    pub diagnosis: Diagnosis,
    /// The tune behind its recommendation.
    pub tune: Option<TuneResult>,
}

impl Analysis {
    /// The recommended `PYTORCH_CUDA_ALLOC_CONF`, when it differs from the recorded one.
    pub fn better_conf(&self) -> Option<&TuneResult> {
        self.tune.as_ref().filter(|t| t.recommended != t.recorded.conf && t.best.error.is_none())
    }
}

/// Reads the snapshot of `recording` (`None` when the run left none) and diagnoses its device
/// against the usable memory of the session's card.
pub fn analyse(recording: &Recording, session: &Session, max_candidates: Option<usize>) -> Result<Option<Analysis>, CliError> {
    let Some(path) = recording.snapshot() else { return Ok(None) };
    let file = load_traces(path)?;
    let recorded = file.recorded_config(session.release);
    let Some(trace) = DeviceTrace::split_file(file).into_iter().find(DeviceTrace::has_allocations) else {
        return Ok(None);
    };
    let traces = [trace];
    let capacity = session.usable_bytes().to_string();
    let found = diagnoses(&traces, path, &recorded, Some(&capacity), TuneOptions { max_candidates, exact: Exact::All, timeline_points: 0 })?;
    let tune = found.tune.and_then(|t| t.results.into_iter().next());
    Ok(found.diagnoses.into_iter().next().map(|diagnosis| Analysis { diagnosis, tune }))
}

/// The line where the program of `recording` ran out of memory: from the stack of the snapshot's
/// first `oom` entry when it recorded one (its C++ frames name what autograd was computing), else
/// the allocating thread's Python stack the hook kept; then the main thread's.
pub fn locate_oom(recording: &Recording) -> Result<Option<Location>, CliError> {
    let Some(oom) = recording.status.as_ref().and_then(|s| s.oom.as_ref()) else { return Ok(None) };
    let Some(path) = recording.snapshot() else { return Ok(locate(&oom.stack, &oom.main_thread_stack)) };
    let file = load(path)?;
    let entry = file.snapshot.device_traces.iter().flatten().find(|e| e.action == TraceAction::Oom);
    Ok(entry.and_then(|e| locate(e.frames.as_deref().unwrap_or_default(), &oom.main_thread_stack)))
}

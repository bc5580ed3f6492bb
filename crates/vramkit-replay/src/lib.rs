//! Replaying PyTorch memory traces.
//!
//! # Architecture
//! A snapshot is split by device ([`DeviceTrace`]: the end-state segments
//! and the trace entries, by column). Everything starts from a
//! [`PreparedTrace`], the type to read first: one device trace with what
//! does not depend on the settings replayed worked out once.
//! - The window's start state: a trace is the tail of a ring buffer, so
//!   [`window::rebuild_start`] rebuilds the state at its first entry from
//!   the end-state segments, walking backwards.
//! - The release runs and the capacity they imply (`releases`: which runs
//!   of `segment_free` could have been a retry ladder).
//! - The [`Reading`]: which runs were `empty_cache()` calls, which frees
//!   were held by other streams' work, which segments were private pools'
//!   (`pools`). Judged once, the first time a replay needs it, by a replay
//!   under the recorded settings on a device handing back the recorded
//!   addresses (where the model is PyTorch); then followed as is.
//!
//! The rest are questions asked of a prepared trace, each replaying it from
//! its start state through the one driver (`drive`: how each entry becomes
//! an allocator call):
//! - [`PreparedTrace::verify`] (`verify`): is the simulator PyTorch? The
//!   recorded-settings replay, compared placement by placement, segment
//!   event by segment event and in the end state;
//! - [`PreparedTrace::model_replay`] (`model`): a `CachingAllocator<SimDevice>`
//!   decides placement under any settings; [`PreparedTrace::oracle_replay`]
//!   (`oracle`) follows the trace's own placement (the ground truth over
//!   time); both produce [`Metrics`];
//! - [`tune`](mod@tune) replays every candidate setting of one or more
//!   prepared traces in parallel; [`doctor`] explains a snapshot in plain
//!   words (its first `oom` replayed); [`report`] writes one
//!   self-contained HTML page of both.
//!
//! The free functions taking a [`DeviceTrace`] ([`model_replay`],
//! [`verify()`], [`oracle_replay`], ...) prepare the trace for that one
//! question; to ask several, prepare it once.
//!
//! ```text
//! DeviceTrace -> PreparedTrace { start state, release runs, reading (once) }
//!                   |-> verify        |-> model replay <- tune (every candidate)
//!                   |-> oracle replay |-> doctor (oom explained) -> report
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alike;
mod blocks;
mod cutoff;
pub mod doctor;
mod drive;
mod pools;
pub mod metrics;
pub mod model;
pub mod oracle;
mod plan;
mod prepared;
mod reading;
pub mod releases;
pub mod report;
pub mod synthetic;
pub mod trace;
pub mod tune;
pub mod verify;
pub mod window;

pub use prepared::PreparedTrace;
pub use reading::Reading;
pub use metrics::{stats_from_segments, Metrics, Sample};
pub use model::{model_replay, model_replay_at_peak, ModelOptions, PeakState};
pub use oracle::oracle_replay;
pub use trace::DeviceTrace;

pub use tune::{tune, Candidate, Drawn, Exact, Outcome, TuneInput, TuneOptions, TuneReport, TuneResult, WorstCase};
pub use verify::{inferred_capacity, verify, verify_with_capacity, Divergence, VerifyReport};
pub use window::{rebuild_start, StartState, WindowError};

/// Why a replay could not run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The start state could not be rebuilt.
    #[error(transparent)]
    Window(#[from] WindowError),
    /// The rebuilt state was refused by the allocator.
    #[error("the rebuilt start state is not a valid allocator state: {0}")]
    Restore(#[from] vramkit_core::RestoreError),
    /// The model allocator failed with something other than out-of-memory.
    #[error("the model allocator failed: {0}")]
    Model(String),
}

/// For unit tests that replay whole traces: samples the allocator's
/// invariant checker instead of running it after every operation, which
/// `cargo test --workspace` turns on (the integration tests turn it off).
#[cfg(test)]
pub(crate) fn sampled_invariant_checks() {
    vramkit_core::set_invariant_checks(vramkit_core::InvariantChecks::Sampled);
}

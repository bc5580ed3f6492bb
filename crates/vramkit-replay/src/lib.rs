//! Replaying PyTorch memory traces.
//!
//! # Architecture
//! A snapshot is split by device ([`DeviceTrace`]). Its trace is a window,
//! so [`window::rebuild_start`] first rebuilds the state at the window's
//! first entry from the end-state segments. From there:
//! - [`verify`](mod@verify) replays under the recorded settings with the recorded
//!   segment addresses and compares every placement, segment event and the
//!   end state with what PyTorch did;
//! - the oracle replay follows the trace's own placement (the ground truth
//!   over time), and the model replay lets a `CachingAllocator<SimDevice>`
//!   decide placement under any settings; both produce [`Metrics`].
//!
//! `releases` tells `empty_cache()` calls from the retry ladder.
//!
//! On top of the model replay, [`tune`](mod@tune) sweeps settings in
//! parallel, [`doctor`] explains a snapshot in plain words, and [`report`]
//! writes one self-contained HTML page of both.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod doctor;
mod drive;
mod pools;
pub mod metrics;
pub mod model;
pub mod oracle;
pub mod releases;
pub mod report;
pub mod synthetic;
pub mod trace;
pub mod tune;
pub mod verify;
pub mod window;

pub use drive::Reading;
pub use metrics::{stats_from_segments, Metrics, Sample};
pub use model::{model_replay, model_replay_at_peak, ModelOptions, PeakState};
pub use oracle::oracle_replay;
pub use trace::DeviceTrace;

/// A hash map keyed by device addresses (512-byte aligned), with a cheap hash.
pub(crate) type AddrMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<vramkit_core::AddrHasher>>;
pub use tune::{tune, Candidate, Outcome, TuneInput, TuneOptions, TuneReport, TuneResult, WorstCase};
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

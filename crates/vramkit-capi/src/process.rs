//! The process-wide allocators behind the C entry points, for Rust code
//! linked into the same library (the Python extension module exports the
//! C entry points and reads the same state through these functions).
//!
//! Each function does what its C twin in [`ffi`](crate::ffi) does, but
//! returns a `Result` instead of printing to stderr, and owned Rust values
//! instead of C strings. Like the C calls, nothing here creates a device
//! allocator that does not exist yet, except [`record_history`].

use crate::registry::{registry, select_backend as select, Registry};
use crate::{report, Backend, Error};
use std::collections::BTreeMap;
use vramkit_core::{memory_summary as summary_text, AllocatorConfig, ContextLevel, HistoryConfig, SummaryLayout};

/// Where memory comes from in this process (`VRAMKIT_DEVICE` or the first
/// [`select_backend`]); fixed at first use.
pub fn backend() -> Backend {
    registry().backend()
}

/// Chooses the backend before first use. Choosing the one in use is fine;
/// another one afterwards is [`Error::BackendFixed`].
pub fn select_backend(backend: Backend) -> Result<(), Error> {
    select(backend)
}

/// The settings devices are created with (the environment's, updated by
/// [`update_settings`]).
pub fn settings() -> AllocatorConfig {
    registry().config()
}

/// `vramkit_set_settings`: applies the keys a `PYTORCH_CUDA_ALLOC_CONF`-style
/// string names to every device, now and later. On error nothing changed.
pub fn update_settings(conf: &str) -> Result<(), Error> {
    registry().update_settings(conf)
}

/// `vramkit_memory_stats`: every key of `torch.cuda.memory_stats()`, all
/// zero for a device not used yet.
pub fn memory_stats(device: i32) -> Result<BTreeMap<String, i64>, Error> {
    Registry::check_index(device)?;
    let registry = registry();
    Ok(match registry.existing(device) {
        Some(front) => front.memory_stats(),
        None => registry.empty_stats().to_map(),
    })
}

/// `vramkit_memory_summary`: PyTorch 2's table.
pub fn memory_summary(device: i32, abbreviated: bool) -> Result<String, Error> {
    Registry::check_index(device)?;
    let registry = registry();
    Ok(match registry.existing(device) {
        Some(front) => front.memory_summary(abbreviated),
        None => summary_text(&registry.empty_stats(), i64::from(device), abbreviated, SummaryLayout::V2_0),
    })
}

/// `vramkit_snapshot`: every device's snapshot in PyTorch's dict shape.
pub fn snapshot() -> serde_json::Value {
    let registry = registry();
    let snapshots: Vec<_> = registry.all_existing().map(|(d, front)| (d, front.snapshot())).collect();
    crate::snapshot_json::snapshot_value(&snapshots, &registry.config())
}

/// `vramkit_empty_cache`: every device, even when one fails; the first
/// error is returned.
pub fn empty_cache() -> Result<(), Error> {
    let mut first = Ok(());
    for (_, front) in registry().all_existing() {
        if let Err(error) = front.empty_cache() {
            first = first.and(Err(error));
        }
    }
    first
}

/// `vramkit_reset_peak_stats`.
pub fn reset_peak_stats(device: i32) -> Result<(), Error> {
    Registry::check_index(device)?;
    registry().existing(device).map_or(Ok(()), |front| front.reset_peak_stats())
}

/// `vramkit_reset_accumulated_stats`.
pub fn reset_accumulated_stats(device: i32) -> Result<(), Error> {
    Registry::check_index(device)?;
    registry().existing(device).map_or(Ok(()), |front| front.reset_accumulated_stats())
}

/// `vramkit_record_history`: starts (or stops and clears) the trace that
/// [`snapshot`] reports; `max_entries` bounds it (`None`: unbounded).
/// Creates the device's allocator if needed.
pub fn record_history(device: i32, enabled: bool, max_entries: Option<usize>) -> Result<(), Error> {
    let config = enabled.then_some(HistoryConfig {
        record_trace: true,
        max_entries: max_entries.unwrap_or(usize::MAX),
        context: ContextLevel::Never,
    });
    registry().device(device)?.record_history(config)
}

/// `vramkit_boundary_errors`: misuse reported since the library was loaded.
pub fn boundary_error_count() -> u64 {
    report::misuse_count()
}

/// The device indices that have an allocator (have been used).
pub fn devices_in_use() -> Vec<i32> {
    registry().all_existing().map(|(d, _)| d).collect()
}

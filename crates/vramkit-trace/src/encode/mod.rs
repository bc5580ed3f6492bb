//! Writing: from a [`SnapshotFile`] to a [`Value`] of PyTorch's shape, for
//! the pickle and JSON writers.
//!
//! The layout follows `file.format`; optional keys follow `file.keys` (the
//! keys the source file had), so a file read and written again has the
//! same shape. Shared stacks stay shared: each distinct `Frames` becomes
//! one list value, and equal frames one dict, so the pickle writer emits
//! each once.
//!
//! One file per part of the schema, each an `impl` block of [`Encoder`]
//! (`encoder.rs`: the caches): `top.rs` the root, `segment.rs` segments and
//! blocks, `trace.rs` device traces, `frames.rs` stacks, `settings.rs`
//! `allocator_settings`, `legacy.rs` the 2.0-era block `history`. What is
//! written (`crate::file`, `crate::settings`, `crate::legacy`) knows
//! nothing of this walk.

mod encoder;
mod frames;
mod legacy;
mod segment;
mod settings;
mod top;
mod trace;

use crate::file::SnapshotFile;
use crate::value::Value;
pub(crate) use encoder::Encoder;

/// The whole file as one value.
pub fn to_value(file: &SnapshotFile) -> Value {
    Encoder::new().file(file)
}

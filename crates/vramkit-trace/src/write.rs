//! Writing a snapshot as a pickle or as JSON.

use crate::encode::to_value;
use crate::error::TraceError;
use crate::file::SnapshotFile;
use crate::json;
use crate::pickle;
use std::io::Write;

/// Writes `file` as a protocol-4 pickle that CPython and the
/// pytorch.org/memory_viz viewer both load.
pub fn write_pickle(file: &SnapshotFile, out: impl Write) -> Result<(), TraceError> {
    write_pickle_protocol(file, 4, out)
}

/// Writes `file` as a pickle of `protocol` (2, 3 or 4; PyTorch's C++
/// writer uses 2).
pub fn write_pickle_protocol(file: &SnapshotFile, protocol: u8, out: impl Write) -> Result<(), TraceError> {
    pickle::write::write_value(&to_value(file), protocol, out)
}

/// Writes `file` as JSON of the same shape (tuples become lists).
pub fn write_json(file: &SnapshotFile, out: impl Write) -> Result<(), TraceError> {
    json::write_value(&to_value(file), out)
}

//! Reading: from a parsed document ([`Tree`]) to a [`SnapshotFile`].
//!
//! One pass over the document, no recursion beyond the fixed schema depth;
//! device traces go into columns ([`Entries`](crate::Entries)).
//! One file per part of the schema, each an `impl` block of [`Reader`]
//! (`reader.rs`: typed access and the per-file caches): `top.rs` the root
//! and the key sets, `segment.rs` segments and blocks, `trace.rs` device
//! traces, `frames.rs` stacks, `settings.rs` `allocator_settings`,
//! `legacy.rs` the 2.0-era block `history`. Frames lists are converted once
//! per shared object and handed out as one `Arc`. Key paths for errors
//! (`schema_err.rs`) are built only when an error happens, by each level
//! adding its own segment as the error travels up. What is filled in
//! (`crate::file`, `crate::settings`, `crate::legacy`) knows nothing of
//! this walk.

mod frames;
mod legacy;
mod reader;
mod rows;
mod schema_err;
mod segment;
mod settings;
mod top;
mod trace;

use crate::error::TraceError;
use crate::trace_file::TraceFile;
use crate::tree::{Item, Tree};
use reader::Reader;
use schema_err::SchemaErr;

/// Decodes a whole document. `protocol` is recorded as found.
pub(crate) fn decode(mut tree: Tree, root: Item, protocol: Option<u8>) -> Result<TraceFile, TraceError> {
    let (file, traces) = Reader::new(&tree).file(root, protocol).map_err(SchemaErr::into_trace_error)?;
    let traces = traces.into_iter().map(|t| t.finish(&mut tree.entry_rows)).collect();
    Ok(TraceFile::new(file, traces))
}

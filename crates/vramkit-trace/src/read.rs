//! Reading a snapshot: sniff the encoding from the content, parse, decode.

use crate::decode;
use crate::error::TraceError;
use crate::file::SnapshotFile;
use crate::trace_file::TraceFile;
use crate::json;
use crate::pickle;
use crate::pickle::input::Input;
use std::io::Read;
use std::path::Path;

/// Bytes read to tell a pickle from JSON before the rest is read.
const SNIFF_BYTES: u64 = 64 << 10;

/// How a snapshot's bytes are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// A binary pickle (first byte `0x80`, `PROTO`).
    Pickle,
    /// JSON text (first non-blank character `{` or `[`).
    Json,
}

/// Tells a pickle from JSON by the content, never by the file name.
pub fn sniff(bytes: &[u8]) -> Option<Encoding> {
    if bytes.first() == Some(&0x80) {
        return Some(Encoding::Pickle);
    }
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') => Some(Encoding::Json),
        _ => None,
    }
}

/// Reads a snapshot file (pickle of any protocol 2-5, or JSON).
pub fn read_snapshot(path: impl AsRef<Path>) -> Result<SnapshotFile, TraceError> {
    read_trace_file(path).map(TraceFile::into_snapshot_file)
}

/// Reads a snapshot from bytes (pickle or JSON, sniffed).
pub fn read_snapshot_bytes(bytes: &[u8]) -> Result<SnapshotFile, TraceError> {
    read_trace_file_bytes(bytes).map(TraceFile::into_snapshot_file)
}

/// Reads a snapshot file with its traces by column, for analysis. A
/// pickle is read as it streams in, never held whole: what stays in memory
/// is what it decodes to.
pub fn read_trace_file(path: impl AsRef<Path>) -> Result<TraceFile, TraceError> {
    let path = path.as_ref();
    let io = |source| TraceError::Io { path: path.to_path_buf(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len() as usize;
    // Enough of the start to tell the encoding.
    let mut head = Vec::new();
    (&mut file).take(SNIFF_BYTES).read_to_end(&mut head).map_err(io)?;
    let read = if sniff(&head) == Some(Encoding::Pickle) {
        pickle::read::parse_input(Input::file(head, file, len))
            .and_then(|parsed| decode::decode(parsed.tree, parsed.root, parsed.protocol))
    } else {
        file.read_to_end(&mut head).map_err(io)?;
        read_trace_file_bytes(&head)
    };
    read.map_err(|e| match e {
        // A read that failed midway: the reader knew no path.
        TraceError::Io { source, .. } => io(source),
        e => e.with_path(path),
    })
}

/// Reads a snapshot from bytes (pickle or JSON, sniffed), its traces by column.
pub fn read_trace_file_bytes(bytes: &[u8]) -> Result<TraceFile, TraceError> {
    match sniff(bytes) {
        Some(Encoding::Pickle) => {
            let parsed = pickle::read::parse(bytes)?;
            decode::decode(parsed.tree, parsed.root, parsed.protocol)
        }
        Some(Encoding::Json) => {
            let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            let (tree, root) = json::parse(text)?;
            decode::decode(tree, root, None)
        }
        None => Err(TraceError::UnknownFormat { path: None, found: describe_start(bytes) }),
    }
}

fn describe_start(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "an empty file".to_owned();
    }
    let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("first bytes {} (expected 0x80 for a pickle, or '{{'/'[' for JSON)", head.join(" "))
}

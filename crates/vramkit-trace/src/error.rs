//! The crate's one error type.
//!
//! Every variant that comes from an input names where that input came from
//! (`path`, `None` for bytes handed in by the caller) and the place inside it
//! (a byte offset, a line, or a key path such as `segments[3].blocks[2].size`).

use std::fmt;
use std::path::{Path, PathBuf};

/// Everything that can go wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a pickle this reader understands (truncated,
    /// a wrong type on the stack, an absurd length, a bad memo index...).
    #[error("{}: pickle byte {offset}: {message}", Origin(.path))]
    Pickle {
        /// The file, if the bytes came from one.
        path: Option<PathBuf>,
        /// Offset of the opcode (or of the argument) that failed.
        offset: u64,
        /// What was expected and what was found there.
        message: String,
    },
    /// The pickle asks to import or call something. We never execute
    /// anything, so these opcodes are refused outright.
    #[error(
        "{}: pickle byte {offset}: opcode {name} (0x{opcode:02x}) refused: \
         only plain dict/list/tuple/str/int/float/bool/None pickles are read, \
         nothing is imported or executed",
        Origin(.path)
    )]
    RefusedOpcode {
        /// The file, if the bytes came from one.
        path: Option<PathBuf>,
        /// Offset of the opcode.
        offset: u64,
        /// The opcode byte.
        opcode: u8,
        /// Its name in CPython's `pickletools`, or `"unknown"`.
        name: &'static str,
    },
    /// The JSON text does not parse.
    #[error("{}: JSON line {line}, column {column}: {message}", Origin(.path))]
    Json {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// The document parsed but does not have a snapshot's shape.
    #[error("{}: {key_path}: expected {expected}, found {found}", Origin(.path))]
    Schema {
        /// The file, if the document came from one.
        path: Option<PathBuf>,
        /// Where in the document, e.g. `segments[3].blocks[2].size`.
        key_path: String,
        /// What the reader needed there.
        expected: String,
        /// What it found.
        found: String,
    },
    /// Neither a pickle (first byte 0x80) nor JSON (`{` or `[`).
    #[error("{}: not a PyTorch memory snapshot: {found}", Origin(.path))]
    UnknownFormat {
        /// The file, if the bytes came from one.
        path: Option<PathBuf>,
        /// A description of the first bytes.
        found: String,
    },
    /// A line of an RMM log is malformed.
    #[error("{}: line {line}: {message}", Origin(.path))]
    Rmm {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// 1-based line number.
        line: u64,
        /// What was wrong.
        message: String,
    },
    /// A value cannot be written in the requested format (for example a
    /// dict key that JSON cannot represent).
    #[error("cannot encode {key_path}: {message}")]
    Encode {
        /// Where in the document.
        key_path: String,
        /// Why.
        message: String,
    },
    /// Writing failed.
    #[error("cannot write: {source}")]
    Write {
        /// What the writer said.
        #[source]
        source: std::io::Error,
    },
}

impl TraceError {
    /// Names `path` as the origin of an error that came from bytes.
    pub fn with_path(mut self, new_path: &Path) -> TraceError {
        match &mut self {
            TraceError::Pickle { path, .. }
            | TraceError::RefusedOpcode { path, .. }
            | TraceError::Json { path, .. }
            | TraceError::Schema { path, .. }
            | TraceError::UnknownFormat { path, .. }
            | TraceError::Rmm { path, .. } => {
                if path.is_none() {
                    *path = Some(new_path.to_path_buf());
                }
            }
            TraceError::Io { .. } | TraceError::Encode { .. } | TraceError::Write { .. } => {}
        }
        self
    }

    pub(crate) fn pickle(offset: usize, message: impl Into<String>) -> TraceError {
        TraceError::Pickle { path: None, offset: offset as u64, message: message.into() }
    }
}

/// Displays an optional origin path, `<bytes>` when there is none.
struct Origin<'a>(&'a Option<PathBuf>);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, "{}", path.display()),
            None => f.write_str("<bytes>"),
        }
    }
}

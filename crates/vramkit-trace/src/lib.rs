#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

//! # Architecture
//!
//! Reading is three steps, each in its own module. `read.rs` sniffs the
//! encoding from the first bytes ([`sniff`]). The pickle reader
//! ([`pickle::read`], over `pickle/input.rs`: a slice, or a file streamed
//! through a window so it is never held whole) or the JSON reader
//! (`json.rs`) then builds one *document*: an arena of nodes (`tree.rs`) in
//! which a pickle memo reference is a copied index, so an object PyTorch
//! shares 100k times is parsed once and stays one object. Trace entries,
//! millions of dicts of one shape, skip the arena: `pickle/read/entry.rs` reads
//! each whose bytes have the usual form straight into a row of columns
//! (others take the generic path). Finally `decode/` walks the document
//! once against the snapshot schema (one file per part: segments, traces,
//! rows, frames, settings, legacy history) and fills a [`TraceFile`]: the
//! core model's segments ([`vramkit_core::snapshot`]), each device trace
//! by column ([`Entries`], the reader's rows moved in, not copied), and the
//! parts the core does not model: typed `allocator_settings`,
//! `external_annotations`, unknown top-level keys, the 2.0-era block
//! `history` lists, and which generation and keys the file had.
//! [`read_snapshot`] expands it into a [`SnapshotFile`], whose trace
//! entries are the core's [`TraceEntry`](vramkit_core::TraceEntry) values.
//! Writing runs the other way: `encode/` turns a [`SnapshotFile`] into a
//! [`Value`] of PyTorch's shape (shared stacks stay shared), and
//! [`pickle::write`] or `json.rs` serialises it; a trace too long to hold
//! is streamed out entry by entry instead ([`PickleStream`], `stream.rs`,
//! over the same encoder and writer). The RMM log reader ([`rmm`]) is
//! separate: CSV lines straight to trace entries.
//!
//! The data types stand on their own: `file.rs` ([`SnapshotFile`] and what
//! it holds), `trace_file.rs` ([`TraceFile`]), `entries.rs` ([`Entries`], four of
//! whose columns `narrow.rs` keeps narrow),
//! `settings.rs` ([`AllocatorSettings`] and its mapping to a core config)
//! and `legacy.rs` ([`LegacyHistory`]) know neither walker; the walkers
//! depend on them, one way:
//!
//! ```text
//! read.rs  -> decode/ -> file.rs, trace_file.rs, entries.rs, settings.rs, legacy.rs <- encode/ <- write.rs
//!               |                                                                          |
//!               +-> words.rs, tree.rs -> value.rs <----------------------------------------+
//! ```

mod decode;
mod encode;
mod entries;
mod error;
mod file;
mod fx;
mod json;
mod legacy;
mod narrow;
pub mod pickle;
mod read;
pub mod rmm;
mod settings;
mod stream;
mod trace_file;
mod tree;
mod value;
mod words;
mod write;

pub use encode::to_value;
pub use entries::{Entries, Entry, Iter as EntriesIter};
pub use error::TraceError;
pub use file::{KeySets, ReleaseRange, SkippedEntry, SnapshotFile, SnapshotFormat};
pub use json::write_value as write_json_value;
pub use legacy::{HistoryEntry, LegacyHistory};
pub use value::Value;
pub use read::{read_snapshot, read_snapshot_bytes, read_trace_file, read_trace_file_bytes, sniff, Encoding};
pub use settings::AllocatorSettings;
pub use stream::PickleStream;
pub use trace_file::TraceFile;
pub use write::{write_json, write_pickle, write_pickle_protocol};

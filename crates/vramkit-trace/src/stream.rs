//! [`PickleStream`]: a snapshot pickle written while its trace is being
//! recorded, for traces too long to hold as a [`SnapshotFile`] (50 million
//! entries are some 6 GB as `TraceEntry` values, and more as a document).

use crate::encode::Encoder;
use crate::error::TraceError;
use crate::file::SnapshotFile;
use crate::pickle::op;
use crate::pickle::write::{Writer, BATCH};
use std::io::Write;
use vramkit_core::snapshot::{SegmentInfo, Snapshot, TraceEntry};

/// A protocol-4 pickle of one device's snapshot, written as it comes: the
/// trace entries first, one at a time, then the state at the end
/// (`segments`). It reads back as [`write_pickle`](crate::write_pickle)'s
/// would, the keys in another order; entries share stacks and strings as
/// there.
pub struct PickleStream<W: Write> {
    writer: Writer<W>,
    encoder: Encoder,
    /// Entries in the open `MARK ... APPENDS` batch.
    in_batch: usize,
}

impl<W: Write> std::fmt::Debug for PickleStream<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PickleStream").field("in_batch", &self.in_batch).finish_non_exhaustive()
    }
}

impl<W: Write> PickleStream<W> {
    /// Starts the pickle: the root dict, `device_traces`, and the trace of
    /// device 0.
    pub fn new(out: W) -> Result<PickleStream<W>, TraceError> {
        let mut writer = Writer::new(out, 4)?;
        let mut encoder = Encoder::new();
        writer.op(op::EMPTY_DICT);
        writer.op(op::MARK);
        writer.value(&encoder.key("device_traces"), 0)?;
        writer.op(op::EMPTY_LIST);
        writer.op(op::EMPTY_LIST);
        Ok(PickleStream { writer, encoder, in_batch: 0 })
    }

    /// Appends `entry` to the trace.
    pub fn entry(&mut self, entry: &TraceEntry) -> Result<(), TraceError> {
        if self.in_batch == 0 {
            self.writer.op(op::MARK);
        }
        let pairs = self.encoder.entry_pairs(entry);
        self.writer.unshared_dict(&pairs)?;
        self.in_batch += 1;
        if self.in_batch == BATCH {
            self.writer.op(op::APPENDS);
            self.in_batch = 0;
        }
        Ok(())
    }

    /// Ends the trace, writes `segments` (the state after its last entry)
    /// and ends the pickle; returns the output.
    pub fn finish(mut self, segments: Vec<SegmentInfo>) -> Result<W, TraceError> {
        if self.in_batch > 0 {
            self.writer.op(op::APPENDS);
        }
        // Device 0's trace into the list of devices.
        self.writer.op(op::APPEND);
        let file = SnapshotFile::from_snapshot(Snapshot { segments, device_traces: Vec::new() });
        self.writer.value(&self.encoder.key("segments"), 0)?;
        let segments = self.encoder.segments(&file);
        self.writer.value(&segments, 0)?;
        self.writer.op(op::SETITEMS);
        self.writer.finish()
    }
}

//! [`TraceFile`]: a snapshot file as analysis reads it, its traces by column.

use crate::entries::Entries;
use crate::file::{ReleaseRange, SnapshotFile, SnapshotFormat};
use crate::settings::AllocatorSettings;
use vramkit_core::snapshot::SegmentInfo;
use vramkit_core::{AllocatorConfig, PytorchRelease};

/// What a [`SnapshotFile`] holds, with each device trace as columns
/// ([`Entries`]) instead of one [`TraceEntry`](vramkit_core::TraceEntry)
/// per entry: a 5-million-entry trace then fits in less memory than its
/// pickle. The readers fill it first; [`into_snapshot_file`](Self::into_snapshot_file)
/// expands it into the core model.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceFile {
    /// One per device index (the file's `device_traces`), oldest entry first.
    pub device_traces: Vec<Entries>,
    /// Everything else the file carries; its `snapshot.device_traces` is
    /// empty (the entries are in `device_traces` above).
    rest: SnapshotFile,
}

impl TraceFile {
    pub(crate) fn new(rest: SnapshotFile, device_traces: Vec<Entries>) -> TraceFile {
        debug_assert!(rest.snapshot.device_traces.is_empty());
        TraceFile { device_traces, rest }
    }

    /// Segments at snapshot time, as the file lists them.
    pub fn segments(&self) -> &[SegmentInfo] {
        &self.rest.snapshot.segments
    }

    /// `allocator_settings`, where recorded (newer PyTorch).
    pub fn allocator_settings(&self) -> Option<&AllocatorSettings> {
        self.rest.allocator_settings.as_ref()
    }

    /// The layout generation detected.
    pub fn format(&self) -> SnapshotFormat {
        self.rest.format
    }

    /// Which PyTorch releases could have written this file (see
    /// [`SnapshotFile::release_range`]).
    pub fn release_range(&self) -> Option<ReleaseRange> {
        self.rest.release_range_given(self.device_traces.iter().any(|t| !t.is_empty()))
    }

    /// The settings the file was recorded with (see
    /// [`SnapshotFile::recorded_config`]).
    pub fn recorded_config(&self, release: Option<PytorchRelease>) -> AllocatorConfig {
        self.rest.recorded_config_given(release, self.release_range())
    }

    /// The same file with every entry expanded into the core model.
    pub fn into_snapshot_file(self) -> SnapshotFile {
        let mut file = self.rest;
        file.snapshot.device_traces = self.device_traces.iter().map(Entries::to_trace_entries).collect();
        file
    }
}

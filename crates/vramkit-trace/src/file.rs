//! [`SnapshotFile`]: a snapshot as read from (or written to) a file.

use crate::legacy::LegacyHistory;
use crate::pickle::value::Value;
use crate::settings::AllocatorSettings;
use std::collections::BTreeSet;
use vramkit_core::snapshot::Snapshot;
use vramkit_core::{AllocatorConfig, PytorchRelease};

/// Which generation of PyTorch's snapshot layout a file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SnapshotFormat {
    /// A bare list of segments at the top level (old
    /// `torch.cuda.memory_snapshot()` output); no trace.
    SegmentList,
    /// The PyTorch 2.0-era dict: blocks carry `history` lists of
    /// `{addr, real_size, frames}` and no `address`; segments have no
    /// `segment_pool_id`, `is_expandable` or `frames`.
    Legacy,
    /// The 2.x dict: blocks carry `address` and `frames`; no
    /// `allocator_settings` yet.
    Dict,
    /// The newest dict: `allocator_settings` at the top level, and where
    /// recorded `external_annotations`, and per entry `time_us`,
    /// `compile_context`, `user_metadata`.
    Current,
}

impl SnapshotFormat {
    /// A short name: `segment_list`, `legacy`, `dict` or `current`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SnapshotFormat::SegmentList => "segment_list",
            SnapshotFormat::Legacy => "legacy",
            SnapshotFormat::Dict => "dict",
            SnapshotFormat::Current => "current",
        }
    }
}

/// The keys present in a file, per level (the union over all dicts of
/// that level). The writers use them to reproduce the file's shape. Keys
/// this crate does not know are listed too; below the top level their
/// values are not kept (top-level ones are, in [`SnapshotFile::other`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySets {
    /// Keys of the top-level dict (empty for a segment list).
    pub top: BTreeSet<String>,
    /// Keys of segment dicts.
    pub segment: BTreeSet<String>,
    /// Keys of block dicts.
    pub block: BTreeSet<String>,
    /// Keys of trace entry dicts.
    pub entry: BTreeSet<String>,
}

/// A trace entry whose `action` vramkit does not model (a vendor fork's
/// `workspace_snapshot`, a newer `annotate`, the viewer's legacy `free`...),
/// kept as it was so that writing the file again keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedEntry {
    /// Device index (position in `device_traces`).
    pub device: usize,
    /// Position in that device's trace as the file had it, counting every entry.
    pub index: usize,
    /// The entry, unchanged.
    pub entry: Value,
}

/// A snapshot file: the core [`Snapshot`] plus everything else the file
/// carries, and what was detected about the file itself.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotFile {
    /// Segments and device traces. For `oom` entries, `addr` holds
    /// PyTorch's `device_free`.
    pub snapshot: Snapshot,
    /// `allocator_settings`, where recorded (newer PyTorch).
    pub allocator_settings: Option<AllocatorSettings>,
    /// `external_annotations` (e.g. `{stage, name, device, time_us}` dicts),
    /// where recorded; `Some(empty)` when the key was there with no items.
    pub external_annotations: Option<Vec<Value>>,
    /// Top-level keys this crate does not know, in file order.
    pub other: Vec<(String, Value)>,
    /// The blocks' `history` lists of a 2.0-era file ([`SnapshotFormat::Legacy`],
    /// or a segment list whose blocks carry `history`).
    pub legacy_history: Option<LegacyHistory>,
    /// Trace entries with actions vramkit does not model.
    pub skipped_entries: Vec<SkippedEntry>,
    /// The layout generation detected (and the one the writers produce).
    pub format: SnapshotFormat,
    /// The `PROTO` of the pickle read; `None` for JSON or for a model that
    /// did not come from a pickle.
    pub pickle_protocol: Option<u8>,
    /// The keys the source file had; `None` writes every key of the format.
    pub keys: Option<KeySets>,
}

impl SnapshotFile {
    /// Wraps a snapshot (e.g. one the allocator produced) to be written in
    /// the current layout.
    pub fn from_snapshot(snapshot: Snapshot) -> SnapshotFile {
        SnapshotFile {
            snapshot,
            allocator_settings: None,
            external_annotations: None,
            other: Vec::new(),
            legacy_history: None,
            skipped_entries: Vec::new(),
            format: SnapshotFormat::Current,
            pickle_protocol: None,
            keys: None,
        }
    }

    /// The oldest PyTorch release that writes everything this file has, and
    /// what in the file says so; `None` when nothing does (no
    /// `allocator_settings`: a release before 2.4, or a converted file).
    /// Keys read off the releases' `libtorch_python.so`: trace entries'
    /// `user_metadata` from 2.10, `compile_context` from 2.8; the top-level
    /// `external_annotations` from 2.6; see also [`AllocatorSettings::release`].
    pub fn release(&self) -> Option<(PytorchRelease, &'static str)> {
        let settings = self.allocator_settings.as_ref()?;
        let keys = self.keys.as_ref();
        let entry_has = |k: &str| keys.is_some_and(|keys| keys.entry.contains(k));
        let by_settings = settings.release();
        let evidence = [
            (by_settings, "allocator_settings keys"),
            (if entry_has("user_metadata") { PytorchRelease::new(2, 10) } else { PytorchRelease::OLDEST }, "trace entries' user_metadata"),
            (if entry_has("compile_context") { PytorchRelease::new(2, 8) } else { PytorchRelease::OLDEST }, "trace entries' compile_context"),
            (
                if self.external_annotations.is_some() { PytorchRelease::new(2, 6) } else { PytorchRelease::OLDEST },
                "external_annotations",
            ),
        ];
        // The first of equal candidates names the evidence.
        evidence.into_iter().rev().max_by_key(|(release, _)| *release)
    }

    /// The settings the file was recorded with, under the allocator rules of
    /// `release` when given, else of the release the file shows
    /// ([`release`](Self::release)), else vramkit's defaults; PyTorch's
    /// default settings when the file records none.
    pub fn recorded_config(&self, release: Option<PytorchRelease>) -> AllocatorConfig {
        let compat = release.or_else(|| self.release().map(|(r, _)| r)).map(|r| r.compat()).unwrap_or_default();
        match &self.allocator_settings {
            Some(settings) => settings.to_config_with(compat),
            None => AllocatorConfig { compat, ..AllocatorConfig::default() },
        }
    }

    /// The same data, to be written in the current layout with every key
    /// (what the memory_viz viewer handles best), whatever was read.
    /// Legacy `history` lists are dropped; active blocks keep their
    /// allocation stack in `frames`.
    pub fn into_current_layout(mut self) -> SnapshotFile {
        self.format = SnapshotFormat::Current;
        self.legacy_history = None;
        self.keys = None;
        self
    }
}

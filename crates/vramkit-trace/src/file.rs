//! [`SnapshotFile`]: a snapshot as read from (or written to) a file.

use crate::legacy::LegacyHistory;
use crate::value::Value;
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

/// The releases that could have written a file (both ends included), and
/// the key that says the oldest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRange {
    /// The oldest release that writes every key the file has.
    pub oldest: PytorchRelease,
    /// The newest release that writes none of the keys the file lacks.
    pub newest: PytorchRelease,
    /// Which key fixes `oldest`.
    pub evidence: String,
}

impl ReleaseRange {
    /// The release lines in the range whose allocator rules differ, newest
    /// first: the candidates a verify tries.
    pub fn distinct_rules(&self) -> Vec<PytorchRelease> {
        let mut out: Vec<PytorchRelease> = Vec::new();
        let mut minor = self.newest.minor;
        loop {
            let r = PytorchRelease::new(self.newest.major, minor);
            if out.last().is_none_or(|last| last.compat() != r.compat()) {
                out.push(r);
            }
            if minor == 0 || PytorchRelease::new(self.newest.major, minor - 1) < self.oldest {
                break;
            }
            minor -= 1;
        }
        out
    }
}

impl std::fmt::Display for ReleaseRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.oldest == self.newest {
            write!(f, "torch {}", self.oldest)
        } else if self.newest == PytorchRelease::NEWEST {
            write!(f, "torch {} or later", self.oldest)
        } else {
            write!(f, "torch {} to {}", self.oldest, self.newest)
        }
    }
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

    /// Which PyTorch releases could have written this file, from the keys
    /// it has and the ones it lacks (read off each release's
    /// `libtorch_python.so`): `allocator_settings` from 2.4, the top-level
    /// `external_annotations` from 2.6, trace entries' `compile_context`
    /// from 2.8, `graph_capture_record_stream_reuse` from 2.9, entries'
    /// `user_metadata` from 2.10, `max_round_threshold` from 2.13, entries'
    /// `internal_metadata` from 2.15. A missing entry key says something
    /// only when the file has trace entries. `None` when the file records no
    /// `allocator_settings` (a release before 2.4, or a converted file).
    pub fn release_range(&self) -> Option<ReleaseRange> {
        self.release_range_given(self.snapshot.device_traces.iter().any(|t| !t.is_empty()))
    }

    /// [`release_range`](Self::release_range), told whether the file has trace entries.
    pub(crate) fn release_range_given(&self, has_entries: bool) -> Option<ReleaseRange> {
        let settings = self.allocator_settings.as_ref()?;
        let keys = self.keys.as_ref();
        let entry_has = |k: &str| keys.is_some_and(|keys| keys.entry.contains(k));
        let setting_has = |k: &str| settings.other.iter().any(|(key, _)| key == k);
        // (what, introduced in, present, its absence tells)
        let marks = [
            ("max_round_threshold", PytorchRelease::new(2, 13), setting_has("max_round_threshold"), true),
            ("graph_capture_record_stream_reuse", PytorchRelease::new(2, 9), settings.graph_capture_record_stream_reuse.is_some(), true),
            ("external_annotations", PytorchRelease::new(2, 6), self.external_annotations.is_some(), true),
            ("internal_metadata", PytorchRelease::new(2, 15), entry_has("internal_metadata"), has_entries),
            ("user_metadata", PytorchRelease::new(2, 10), entry_has("user_metadata"), has_entries),
            ("compile_context", PytorchRelease::new(2, 8), entry_has("compile_context"), has_entries),
        ];
        let mut range = ReleaseRange { oldest: PytorchRelease::OLDEST, newest: PytorchRelease::NEWEST, evidence: "allocator_settings".into() };
        for (what, since, present, absence_tells) in marks {
            if present && since > range.oldest {
                range.oldest = since;
                range.evidence = format!("{what} (written since {since})");
            } else if !present && absence_tells && since <= range.newest {
                range.newest = PytorchRelease::new(since.major, since.minor - 1);
            }
        }
        if range.newest < range.oldest {
            // Keys of releases apart: trust what is there.
            range.newest = range.oldest;
        }
        Some(range)
    }

    /// The settings the file was recorded with, under the allocator rules of
    /// `release` when given, else of the newest release the file may come
    /// from ([`release_range`](Self::release_range)), else vramkit's
    /// defaults; PyTorch's default settings when the file records none.
    pub fn recorded_config(&self, release: Option<PytorchRelease>) -> AllocatorConfig {
        self.recorded_config_given(release, self.release_range())
    }

    /// [`recorded_config`](Self::recorded_config), given the file's release range.
    pub(crate) fn recorded_config_given(&self, release: Option<PytorchRelease>, range: Option<ReleaseRange>) -> AllocatorConfig {
        let compat = release.or_else(|| range.map(|r| r.newest)).map(|r| r.compat()).unwrap_or_default();
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

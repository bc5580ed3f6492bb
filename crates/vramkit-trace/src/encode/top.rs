//! The root: a dict of the top-level keys in the file's layout (or a bare
//! list of segments).

use super::encoder::{want, Encoder};
use crate::file::{SnapshotFile, SnapshotFormat};
use crate::value::Value;

impl Encoder {
    pub(super) fn file(&mut self, file: &SnapshotFile) -> Value {
        let keys = file.keys.as_ref();
        let segments = self.segments(file);
        if file.format == SnapshotFormat::SegmentList {
            return segments;
        }
        let mut pairs = vec![(self.key("segments"), segments)];
        let traces = &file.snapshot.device_traces;
        if want(keys.map(|k| &k.top), "device_traces") || !traces.is_empty() || !file.skipped_entries.is_empty() {
            let devices = traces.len().max(file.skipped_entries.iter().map(|s| s.device + 1).max().unwrap_or(0));
            let lists = (0..devices).map(|device| self.trace(file, device)).collect();
            pairs.push((self.key("device_traces"), Value::list(lists)));
        }
        if let Some(settings) = &file.allocator_settings {
            let value = self.settings(settings);
            pairs.push((self.key("allocator_settings"), value));
        }
        if let Some(annotations) = &file.external_annotations {
            pairs.push((self.key("external_annotations"), Value::list(annotations.clone())));
        }
        for (key, value) in &file.other {
            pairs.push((Value::str(key), value.clone()));
        }
        Value::dict(pairs)
    }

    /// The file's segments, as the list of dicts PyTorch writes.
    pub(crate) fn segments(&mut self, file: &SnapshotFile) -> Value {
        let legacy_blocks = file.format == SnapshotFormat::Legacy || file.legacy_history.is_some();
        let segments = file.snapshot.segments.iter().enumerate().map(|(s, segment)| self.segment(file, s, segment, legacy_blocks));
        Value::list(segments.collect())
    }
}

//! The root: a dict of the known top-level keys (or a bare list of
//! segments) to a [`SnapshotFile`], with the generation and the keys seen.

use super::reader::Reader;
use super::schema_err::{AtKey, SchemaErr};
use super::segment::{BLOCK_KEYS, SEGMENT_KEYS};
use super::trace::ENTRY_KEYS;
use super::rows::DecodedTrace;
use crate::file::{KeySets, SnapshotFile, SnapshotFormat};
use crate::legacy::LegacyHistory;
use crate::tree::Item;
use crate::words::Word;
use vramkit_core::snapshot::Snapshot;

/// The top-level keys this crate knows; a key's bit in the top level's
/// [`Seen`](super::reader::Seen) mask is its index here.
const TOP_KEYS: [&str; 4] = ["segments", "device_traces", "allocator_settings", "external_annotations"];

impl Reader<'_> {
    /// The file, but for its device traces (returned apart: rows still in the tree).
    pub(super) fn file(&mut self, root: Item, protocol: Option<u8>) -> Result<(SnapshotFile, Vec<DecodedTrace>), SchemaErr> {
        let mut file = SnapshotFile {
            snapshot: Snapshot::default(),
            allocator_settings: None,
            external_annotations: None,
            other: Vec::new(),
            legacy_history: None,
            skipped_entries: Vec::new(),
            format: SnapshotFormat::Dict,
            pickle_protocol: protocol,
            keys: None,
        };
        let mut history = Vec::new();
        let mut device_traces = Vec::new();
        if self.tree.as_seq(root).is_some() {
            file.format = SnapshotFormat::SegmentList;
            file.snapshot.segments = self.segments(root, &mut history)?;
        } else {
            let pairs = self.tree.as_dict(root).ok_or_else(|| self.wrong("a dict or a list of segments", root))?;
            let mut segments = None;
            for &(k, v) in pairs {
                let word = self.word(k)?;
                let key = word.name();
                match word {
                    Word::Segments => {
                        self.top.mask |= 1;
                        segments = Some(self.segments(v, &mut history).at(key)?);
                    }
                    Word::DeviceTraces => {
                        self.top.mask |= 1 << 1;
                        device_traces = self.device_traces(v, &mut file.skipped_entries).at(key)?;
                    }
                    Word::AllocatorSettings => {
                        self.top.mask |= 1 << 2;
                        file.allocator_settings = Some(self.settings(v).at(key)?);
                    }
                    Word::ExternalAnnotations => {
                        self.top.mask |= 1 << 3;
                        let items = self.seq(v).at(key)?;
                        let mut out = Vec::with_capacity(items.len());
                        for (i, &item) in items.iter().enumerate() {
                            out.push(self.value(item).at_index(i).at(key)?);
                        }
                        file.external_annotations = Some(out);
                    }
                    _ => {
                        let key = self.key_name(k)?;
                        self.top.unknown.insert(key.to_owned());
                        file.other.push((key.to_owned(), self.value(v).at(key)?));
                    }
                }
            }
            file.snapshot.segments = segments.ok_or_else(|| SchemaErr::missing("segments"))?;
            if file.allocator_settings.is_some() {
                file.format = SnapshotFormat::Current;
            }
        }
        if self.block.mask & (1 << 5) != 0 {
            if file.format != SnapshotFormat::SegmentList {
                file.format = SnapshotFormat::Legacy;
            }
            file.legacy_history = Some(LegacyHistory { blocks: history });
        }
        let keys = KeySets {
            top: std::mem::take(&mut self.top).into_set(&TOP_KEYS),
            segment: std::mem::take(&mut self.segment).into_set(&SEGMENT_KEYS),
            block: std::mem::take(&mut self.block).into_set(&BLOCK_KEYS),
            entry: std::mem::take(&mut self.entry).into_set(&ENTRY_KEYS),
        };
        file.keys = Some(keys);
        Ok((file, device_traces))
    }
}

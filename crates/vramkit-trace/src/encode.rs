//! From a [`SnapshotFile`] to a [`Value`] of PyTorch's shape, for the
//! pickle and JSON writers.
//!
//! The layout follows `file.format`; optional keys follow `file.keys` (the
//! keys the source file had), so a file read and written again has the
//! same shape. Shared stacks stay shared: each distinct `Frames` becomes
//! one list value, and equal frames one dict, so the pickle writer emits
//! each once.

use crate::file::{SnapshotFile, SnapshotFormat};
use crate::legacy;
use crate::pickle::value::Value;
use crate::settings;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use vramkit_core::snapshot::{BlockInfo, Frame, Frames, SegmentInfo, TraceAction, TraceEntry};

/// The whole file as one value.
pub fn to_value(file: &SnapshotFile) -> Value {
    Encoder::new().file(file)
}

/// Per-write caches.
pub(crate) struct Encoder<'f> {
    keys: HashMap<&'static str, Value>,
    /// One list value per distinct `Frames` allocation.
    frames: HashMap<usize, Value>,
    /// One dict value per distinct frame content.
    frame_dicts: HashMap<&'f Frame, Value>,
}

fn int(n: u64) -> Value {
    Value::int(i128::from(n))
}

/// A value PyTorch writes as `int64_t` (a stream handle, `time_us`): its 64
/// bits as a signed int, so a negative handle is written as it was read.
fn int64(n: u64) -> Value {
    Value::Int(n as i64)
}

/// Whether to write an optional key: always when the source's keys are
/// unknown, else when the source had it.
fn want(keys: Option<&BTreeSet<String>>, key: &str) -> bool {
    keys.is_none_or(|set| set.contains(key))
}

impl<'f> Encoder<'f> {
    fn new() -> Encoder<'f> {
        Encoder { keys: HashMap::new(), frames: HashMap::new(), frame_dicts: HashMap::new() }
    }

    /// A dict key; one shared string per name.
    pub(crate) fn key(&mut self, name: &'static str) -> Value {
        self.keys.entry(name).or_insert_with(|| Value::str(name)).clone()
    }

    pub(crate) fn frames(&mut self, frames: &'f Frames) -> Value {
        let id = Arc::as_ptr(frames) as *const Frame as usize;
        if let Some(value) = self.frames.get(&id) {
            return value.clone();
        }
        let items = frames.iter().map(|frame| self.frame(frame)).collect();
        let value = Value::list(items);
        self.frames.insert(id, value.clone());
        value
    }

    fn frame(&mut self, frame: &'f Frame) -> Value {
        if let Some(value) = self.frame_dicts.get(frame) {
            return value.clone();
        }
        let value = Value::dict(vec![
            (self.key("name"), Value::str(&frame.name)),
            (self.key("filename"), Value::str(&frame.filename)),
            (self.key("line"), Value::Int(frame.line)),
        ]);
        self.frame_dicts.insert(frame, value.clone());
        value
    }

    fn file(&mut self, file: &'f SnapshotFile) -> Value {
        let keys = file.keys.as_ref();
        let legacy_blocks = file.format == SnapshotFormat::Legacy || file.legacy_history.is_some();
        let segments: Vec<Value> = file
            .snapshot
            .segments
            .iter()
            .enumerate()
            .map(|(s, segment)| self.segment(file, s, segment, legacy_blocks))
            .collect();
        let segments = Value::list(segments);
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
            let value = settings::encode(self, settings);
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

    fn segment(
        &mut self,
        file: &'f SnapshotFile,
        index: usize,
        segment: &'f SegmentInfo,
        legacy_blocks: bool,
    ) -> Value {
        let keys = file.keys.as_ref().map(|k| &k.segment);
        let mut pairs =
            vec![(self.key("device"), Value::Int(segment.device)), (self.key("address"), int(segment.address))];
        pairs.push((self.key("total_size"), int(segment.total_size)));
        for (name, value) in [
            ("allocated_size", segment.allocated_size),
            ("active_size", segment.active_size),
            ("requested_size", segment.requested_size),
        ] {
            if want(keys, name) {
                pairs.push((self.key(name), int(value)));
            }
        }
        pairs.push((self.key("stream"), int64(segment.stream)));
        pairs.push((self.key("segment_type"), Value::str(segment.segment_type.as_str())));
        if want(keys, "segment_pool_id") || segment.segment_pool_id != (0, 0) {
            let (a, b) = segment.segment_pool_id;
            pairs.push((self.key("segment_pool_id"), Value::Tuple(Arc::from(vec![int(a), int(b)]))));
        }
        if want(keys, "is_expandable") || segment.is_expandable {
            pairs.push((self.key("is_expandable"), Value::Bool(segment.is_expandable)));
        }
        if let Some(frames) = &segment.frames {
            let frames = self.frames(frames);
            pairs.push((self.key("frames"), frames));
        }
        let blocks = segment
            .blocks
            .iter()
            .enumerate()
            .map(|(b, block)| self.block(file, index, b, block, legacy_blocks))
            .collect();
        pairs.push((self.key("blocks"), Value::list(blocks)));
        Value::dict(pairs)
    }

    fn block(
        &mut self,
        file: &'f SnapshotFile,
        segment: usize,
        index: usize,
        block: &'f BlockInfo,
        legacy_blocks: bool,
    ) -> Value {
        let keys = file.keys.as_ref().map(|k| &k.block);
        // In the legacy layout, `address` and `frames` were not keys of a
        // block; write them only if the source had them.
        let strict = |key: &str| keys.is_some_and(|set| set.contains(key));
        let mut pairs = Vec::with_capacity(6);
        if if legacy_blocks { strict("address") } else { want(keys, "address") } {
            pairs.push((self.key("address"), int(block.address)));
        }
        pairs.push((self.key("size"), int(block.size)));
        if want(keys, "requested_size") {
            pairs.push((self.key("requested_size"), int(block.requested_size)));
        }
        pairs.push((self.key("state"), Value::str(block.state.as_str())));
        if let Some(frames) = &block.frames {
            if if legacy_blocks { strict("frames") } else { want(keys, "frames") } {
                let frames = self.frames(frames);
                pairs.push((self.key("frames"), frames));
            }
        }
        if legacy_blocks {
            let history = match &file.legacy_history {
                Some(history) => legacy::encode_history(
                    self,
                    history.of(segment, index).iter().map(|h| (h.addr, h.real_size, h.frames.as_ref())),
                ),
                // A model with no recorded history: the live allocation is all we know.
                None => legacy::encode_history(
                    self,
                    block.state.is_active().then_some((block.address, block.requested_size, block.frames.as_ref())),
                ),
            };
            pairs.push((self.key("history"), history));
        }
        Value::dict(pairs)
    }

    fn trace(&mut self, file: &'f SnapshotFile, device: usize) -> Value {
        let entries: &[TraceEntry] = file.snapshot.device_traces.get(device).map_or(&[], Vec::as_slice);
        let mut skipped = file.skipped_entries.iter().filter(|s| s.device == device).peekable();
        let mut out = Vec::with_capacity(entries.len());
        let mut entries = entries.iter();
        loop {
            if let Some(skip) = skipped.next_if(|s| s.index <= out.len()) {
                out.push(skip.entry.clone());
                continue;
            }
            match entries.next() {
                Some(entry) => {
                    let value = self.entry(entry);
                    out.push(value);
                }
                None => break,
            }
        }
        out.extend(skipped.map(|s| s.entry.clone()));
        Value::list(out)
    }

    fn entry(&mut self, entry: &'f TraceEntry) -> Value {
        let mut pairs = Vec::with_capacity(8);
        pairs.push((self.key("action"), self.key(entry.action.as_str())));
        let addr_key = if entry.action == TraceAction::Oom { "device_free" } else { "addr" };
        pairs.push((self.key(addr_key), int(entry.addr)));
        pairs.push((self.key("size"), int(entry.size)));
        pairs.push((self.key("stream"), int64(entry.stream)));
        if let Some(t) = entry.time_us {
            pairs.push((self.key("time_us"), int64(t)));
        }
        if let Some(context) = &entry.compile_context {
            pairs.push((self.key("compile_context"), Value::str(context)));
        }
        if let Some(metadata) = &entry.user_metadata {
            pairs.push((self.key("user_metadata"), Value::str(metadata)));
        }
        if let Some(frames) = &entry.frames {
            let frames = self.frames(frames);
            pairs.push((self.key("frames"), frames));
        }
        Value::dict(pairs)
    }
}

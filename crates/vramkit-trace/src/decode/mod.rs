//! From a parsed document ([`Tree`]) to a [`SnapshotFile`].
//!
//! One pass over the document, no recursion beyond the fixed schema depth.
//! Frames lists are converted once per shared object and handed out as one
//! `Arc`. Key paths for errors are built only when an error happens, by
//! each level adding its own segment as the error travels up.

use crate::error::TraceError;
use crate::file::{KeySets, SkippedEntry, SnapshotFile, SnapshotFormat};
use crate::legacy::{self, HistoryEntry, LegacyHistory};
use crate::settings;
use crate::tree::{FxHashMap, Item, Kind, NodeId, Tree};
use crate::words::Word;
use std::collections::BTreeSet;
use std::sync::Arc;
use vramkit_core::snapshot::{BlockInfo, BlockState, Frame, Frames, SegmentInfo, Snapshot, TraceAction, TraceEntry};
use vramkit_core::PoolKind;

/// Decodes a whole document. `protocol` is recorded as found.
pub(crate) fn decode(tree: &Tree, root: Item, protocol: Option<u8>) -> Result<SnapshotFile, TraceError> {
    let mut reader = Reader::new(tree);
    let file = reader.file(root, protocol).map_err(SchemaErr::into_trace_error)?;
    Ok(file)
}

/// One step of a key path.
#[derive(Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A schema error on its way up; the path is collected innermost first.
#[derive(Debug)]
pub(crate) struct SchemaErr {
    path: Vec<Seg>,
    expected: String,
    found: String,
}

impl SchemaErr {
    pub(crate) fn new(expected: impl Into<String>, found: impl Into<String>) -> SchemaErr {
        SchemaErr { path: Vec::new(), expected: expected.into(), found: found.into() }
    }

    pub(crate) fn missing(key: &str) -> SchemaErr {
        SchemaErr {
            path: vec![Seg::Key(key.to_owned())],
            expected: "this key".to_owned(),
            found: "no such key".to_owned(),
        }
    }

    pub(crate) fn key(mut self, key: &str) -> SchemaErr {
        self.path.push(Seg::Key(key.to_owned()));
        self
    }

    pub(crate) fn index(mut self, index: usize) -> SchemaErr {
        self.path.push(Seg::Index(index));
        self
    }

    fn into_trace_error(self) -> TraceError {
        let mut key_path = String::new();
        for seg in self.path.iter().rev() {
            match seg {
                Seg::Key(key) => {
                    if !key_path.is_empty() {
                        key_path.push('.');
                    }
                    key_path.push_str(key);
                }
                Seg::Index(i) => key_path.push_str(&format!("[{i}]")),
            }
        }
        if key_path.is_empty() {
            key_path.push_str("<root>");
        }
        TraceError::Schema { path: None, key_path, expected: self.expected, found: self.found }
    }
}

/// Adds a key to the path of an error.
pub(crate) trait AtKey<T> {
    fn at(self, key: &str) -> Result<T, SchemaErr>;
    fn at_index(self, index: usize) -> Result<T, SchemaErr>;
}

impl<T> AtKey<T> for Result<T, SchemaErr> {
    fn at(self, key: &str) -> Result<T, SchemaErr> {
        self.map_err(|e| e.key(key))
    }
    fn at_index(self, index: usize) -> Result<T, SchemaErr> {
        self.map_err(|e| e.index(index))
    }
}

/// Bit masks of the known keys seen at one level, plus the unknown ones.
#[derive(Default)]
struct Seen {
    mask: u32,
    unknown: BTreeSet<String>,
}

impl Seen {
    fn into_set(self, names: &[&str]) -> BTreeSet<String> {
        let mut set = self.unknown;
        for (bit, name) in names.iter().enumerate() {
            if self.mask & (1 << bit) != 0 {
                set.insert((*name).to_owned());
            }
        }
        set
    }
}

const TOP_KEYS: [&str; 4] = ["segments", "device_traces", "allocator_settings", "external_annotations"];
const SEGMENT_KEYS: [&str; 12] = [
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
];
const BLOCK_KEYS: [&str; 6] = ["address", "size", "requested_size", "state", "frames", "history"];
const ENTRY_KEYS: [&str; 9] =
    ["action", "addr", "device_free", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"];

/// A list's items as a map key: hashes the length and a few items only
/// (stacks are long), compares all of them.
#[derive(PartialEq, Eq)]
struct ItemsKey<'t>(&'t [Item]);

impl std::hash::Hash for ItemsKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let items = self.0;
        state.write_usize(items.len());
        for &i in &[0, 1, items.len() / 2, items.len().wrapping_sub(2), items.len().wrapping_sub(1)] {
            if let Some(item) = items.get(i) {
                item.hash(state);
            }
        }
    }
}

/// Typed access to a [`Tree`], with the per-file caches.
pub(crate) struct Reader<'t> {
    pub(crate) tree: &'t Tree,
    /// Per node, 0 until decoded, then: for a frames list, 1 + its index in
    /// `decoded_frames`; for a frame dict, 1 + its index in `decoded_frame`;
    /// for a str, its [`Word::code`].
    /// Indexed by node, so no hashing on the hot path.
    node_slot: Vec<u32>,
    /// Frames lists decoded so far.
    decoded_frames: Vec<Frames>,
    /// Frames decoded so far.
    decoded_frame: Vec<Frame>,
    /// Frames by the frame objects they hold (node references only).
    frames_by_items: FxHashMap<ItemsKey<'t>, u32>,
    top: Seen,
    segment: Seen,
    block: Seen,
    entry: Seen,
}

impl<'t> Reader<'t> {
    pub(crate) fn new(tree: &'t Tree) -> Reader<'t> {
        Reader {
            tree,
            node_slot: Vec::new(),
            decoded_frames: Vec::new(),
            decoded_frame: Vec::new(),
            frames_by_items: FxHashMap::default(),
            top: Seen::default(),
            segment: Seen::default(),
            block: Seen::default(),
            entry: Seen::default(),
        }
    }

    fn wrong(&self, expected: &str, item: Item) -> SchemaErr {
        SchemaErr::new(expected, self.tree.describe(item))
    }

    pub(crate) fn dict(&self, item: Item) -> Result<&'t [(Item, Item)], SchemaErr> {
        self.tree.as_dict(item).ok_or_else(|| self.wrong("a dict", item))
    }

    pub(crate) fn seq(&self, item: Item) -> Result<&'t [Item], SchemaErr> {
        self.tree.as_seq(item).ok_or_else(|| self.wrong("a list", item))
    }

    pub(crate) fn str(&self, item: Item) -> Result<&'t str, SchemaErr> {
        self.tree.as_str(item).ok_or_else(|| self.wrong("a str", item))
    }

    /// A dict key that must be a string.
    pub(crate) fn key_name(&self, item: Item) -> Result<&'t str, SchemaErr> {
        self.tree.as_str(item).ok_or_else(|| self.wrong("a str key", item))
    }

    /// A string as a schema word; each string node is classified once.
    pub(crate) fn word(&mut self, item: Item) -> Result<Word, SchemaErr> {
        if !self.tree.is_str(item) {
            return Err(self.wrong("a str", item));
        }
        let id = item.node_id();
        if let Some(&mut code) = id.and_then(|id| self.slot(id)) {
            if code > 0 {
                return Ok(Word::from_code(code));
            }
        }
        let word = Word::classify(self.str(item)?);
        if let Some(slot) = id.and_then(|id| self.slot(id)) {
            *slot = word.code();
        }
        Ok(word)
    }

    pub(crate) fn u64(&self, item: Item) -> Result<u64, SchemaErr> {
        match item.kind() {
            Kind::Int(n) => u64::try_from(n).map_err(|_| self.wrong("a non-negative int below 2^64", item)),
            _ => self
                .tree
                .as_i128(item)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| self.wrong("a non-negative int below 2^64", item)),
        }
    }

    pub(crate) fn i64(&self, item: Item) -> Result<i64, SchemaErr> {
        self.tree
            .as_i128(item)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| self.wrong("an int from -2^63 to 2^63-1", item))
    }

    /// A 64-bit value PyTorch writes signed or unsigned, as its 64 bits
    /// (two's complement): any int from -2^63 to 2^64-1. PyTorch casts
    /// stream handles to `int64_t` (negative where the handle's top bit is
    /// set), writes `time_us` as a signed `time_t`, pool ids unsigned from
    /// Python and signed from C++, and a frame's line as CPython's `int`
    /// cast to `uint64_t` (so "no line", -1, arrives as 2^64-1). Both
    /// spellings of one value read the same.
    pub(crate) fn bits64(&self, item: Item) -> Result<u64, SchemaErr> {
        let n = self.tree.as_i128(item).ok_or_else(|| self.wrong("an int from -2^63 to 2^64-1", item))?;
        match (u64::try_from(n), i64::try_from(n)) {
            (Ok(unsigned), _) => Ok(unsigned),
            (_, Ok(signed)) => Ok(signed as u64),
            _ => Err(self.wrong("an int from -2^63 to 2^64-1", item)),
        }
    }

    /// A finite float; an int is accepted too (JSON writes `0` for `0.0`
    /// sometimes). NaN and the infinities are refused: no setting PyTorch
    /// records is one, and JSON could not carry it (written as `null`, it
    /// would not read back).
    pub(crate) fn f64(&self, item: Item) -> Result<f64, SchemaErr> {
        match item.kind() {
            Kind::Int(n) => Ok(n as f64),
            _ => self.tree.as_f64(item).filter(|x| x.is_finite()).ok_or_else(|| self.wrong("a finite float", item)),
        }
    }

    pub(crate) fn bool(&self, item: Item) -> Result<bool, SchemaErr> {
        match item.kind() {
            Kind::Bool(b) => Ok(b),
            _ => Err(self.wrong("a bool", item)),
        }
    }

    /// An owned copy, for values kept generically.
    pub(crate) fn value(&self, item: Item) -> Result<crate::pickle::value::Value, SchemaErr> {
        self.tree.freeze(item).map_err(|_| {
            SchemaErr::new(
                format!("at most {} levels of nesting", crate::tree::MAX_DEPTH),
                "deeper nesting (or an object that contains itself)",
            )
        })
    }

    /// The slot of node `id` in [`Reader::node_slot`], growing the table
    /// to the tree's node count on first use.
    fn slot(&mut self, id: NodeId) -> Option<&mut u32> {
        if self.node_slot.is_empty() {
            self.node_slot = vec![0; self.tree.nodes.len()];
        }
        self.node_slot.get_mut(id)
    }

    /// A frames list; the same list object gives the same `Arc`.
    pub(crate) fn frames(&mut self, item: Item) -> Result<Frames, SchemaErr> {
        // Check the kind first: the slot of a node means different things
        // for lists, dicts and strs.
        let (Some(id), Some(items)) = (item.node_id(), self.tree.as_seq(item)) else {
            return Err(self.wrong("a list of frames", item));
        };
        if let Some(&mut slot) = self.slot(id) {
            if let Some(frames) = (slot as usize).checked_sub(1).and_then(|i| self.decoded_frames.get(i)) {
                return Ok(frames.clone());
            }
        }
        // Distinct list objects often hold the very same frame objects
        // (PyTorch memoizes each frame dict); such lists share one `Arc`.
        let index = match self.frames_by_items.get(&ItemsKey(items)) {
            Some(&index) => index,
            None => {
                let mut out = Vec::with_capacity(items.len());
                for (i, &frame) in items.iter().enumerate() {
                    out.push(self.frame(frame).at_index(i)?);
                }
                self.decoded_frames.push(Arc::from(out));
                let index = self.decoded_frames.len() as u32;
                if items.iter().all(|item| item.node_id().is_some()) {
                    self.frames_by_items.insert(ItemsKey(items), index);
                }
                index
            }
        };
        if let Some(slot) = self.slot(id) {
            *slot = index;
        }
        Ok(self.decoded_frames[index as usize - 1].clone())
    }

    /// One frame; a frame dict shared by many stacks is decoded once.
    fn frame(&mut self, item: Item) -> Result<Frame, SchemaErr> {
        let pairs = self.dict(item)?;
        let id = item.node_id();
        if let Some(&mut slot) = id.and_then(|id| self.slot(id)) {
            if let Some(frame) = (slot as usize).checked_sub(1).and_then(|i| self.decoded_frame.get(i)) {
                return Ok(frame.clone());
            }
        }
        let (mut filename, mut line, mut name) = (None, None, None);
        for &(k, v) in pairs {
            match self.word(k)? {
                Word::Filename => filename = Some(self.str(v).at("filename")?),
                // Kept signed, as the core stores it: 2^64-1 is -1, "no line".
                Word::Line => line = Some(self.bits64(v).at("line")? as i64),
                Word::Name => name = Some(self.str(v).at("name")?),
                _ => {}
            }
        }
        let frame = Frame {
            filename: filename.ok_or_else(|| SchemaErr::missing("filename"))?.to_owned(),
            line: line.ok_or_else(|| SchemaErr::missing("line"))?,
            name: name.ok_or_else(|| SchemaErr::missing("name"))?.to_owned(),
        };
        self.decoded_frame.push(frame.clone());
        let index = self.decoded_frame.len() as u32;
        if let Some(slot) = id.and_then(|id| self.slot(id)) {
            *slot = index;
        }
        Ok(frame)
    }

    fn file(&mut self, root: Item, protocol: Option<u8>) -> Result<SnapshotFile, SchemaErr> {
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
                        file.snapshot.device_traces = self.device_traces(v, &mut file.skipped_entries).at(key)?;
                    }
                    Word::AllocatorSettings => {
                        self.top.mask |= 1 << 2;
                        file.allocator_settings = Some(settings::decode(self, v).at(key)?);
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
        Ok(file)
    }

    fn segments(
        &mut self,
        item: Item,
        history: &mut Vec<Vec<Vec<HistoryEntry>>>,
    ) -> Result<Vec<SegmentInfo>, SchemaErr> {
        let items = self.seq(item)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, &segment) in items.iter().enumerate() {
            let (segment, block_history) = self.segment(segment).at_index(i)?;
            out.push(segment);
            history.push(block_history);
        }
        Ok(out)
    }

    fn segment(&mut self, item: Item) -> Result<(SegmentInfo, Vec<Vec<HistoryEntry>>), SchemaErr> {
        let mut device = None;
        let mut address = None;
        let mut total_size = None;
        let mut allocated_size = None;
        let mut active_size = None;
        let mut requested_size = None;
        let mut stream = None;
        let mut segment_type = None;
        let mut segment_pool_id = (0, 0);
        let mut is_expandable = false;
        let mut frames = None;
        let mut blocks = None;
        let mut seen = 0u32;
        let pairs = self.dict(item)?;
        for &(k, v) in pairs {
            let word = self.word(k)?;
            let key = word.name();
            match word {
                Word::Device => {
                    seen |= 1;
                    device = Some(self.i64(v).at(key)?);
                }
                Word::Address => {
                    seen |= 1 << 1;
                    address = Some(self.u64(v).at(key)?);
                }
                Word::TotalSize => {
                    seen |= 1 << 2;
                    total_size = Some(self.u64(v).at(key)?);
                }
                Word::AllocatedSize => {
                    seen |= 1 << 3;
                    allocated_size = Some(self.u64(v).at(key)?);
                }
                Word::ActiveSize => {
                    seen |= 1 << 4;
                    active_size = Some(self.u64(v).at(key)?);
                }
                Word::RequestedSize => {
                    seen |= 1 << 5;
                    requested_size = Some(self.u64(v).at(key)?);
                }
                Word::Stream => {
                    seen |= 1 << 6;
                    stream = Some(self.bits64(v).at(key)?);
                }
                Word::SegmentType => {
                    seen |= 1 << 7;
                    segment_type = Some(match self.word(v).at(key)? {
                        Word::Small => PoolKind::Small,
                        Word::Large => PoolKind::Large,
                        _ => return Err(self.wrong("\"small\" or \"large\"", v).key(key)),
                    });
                }
                Word::SegmentPoolId => {
                    seen |= 1 << 8;
                    segment_pool_id = self.pool_id(v).at(key)?;
                }
                Word::IsExpandable => {
                    seen |= 1 << 9;
                    is_expandable = self.bool(v).at(key)?;
                }
                Word::Frames => {
                    seen |= 1 << 10;
                    frames = Some(self.frames(v).at(key)?);
                }
                Word::Blocks => {
                    seen |= 1 << 11;
                    blocks = Some(v);
                }
                _ => {
                    let key = self.key_name(k)?;
                    self.segment.unknown.insert(key.to_owned());
                }
            }
        }
        self.segment.mask |= seen;
        let address = address.ok_or_else(|| SchemaErr::missing("address"))?;
        let blocks_item = blocks.ok_or_else(|| SchemaErr::missing("blocks"))?;
        let (blocks, history) = self.blocks(blocks_item, address).at("blocks")?;
        let mut sums = (0u64, 0u64, 0u64);
        for block in &blocks {
            if block.state == BlockState::ActiveAllocated {
                sums.0 = sums.0.saturating_add(block.size);
            }
            if block.state.is_active() {
                sums.1 = sums.1.saturating_add(block.size);
                sums.2 = sums.2.saturating_add(block.requested_size);
            }
        }
        let segment = SegmentInfo {
            device: device.ok_or_else(|| SchemaErr::missing("device"))?,
            address,
            total_size: total_size.ok_or_else(|| SchemaErr::missing("total_size"))?,
            allocated_size: allocated_size.unwrap_or(sums.0),
            active_size: active_size.unwrap_or(sums.1),
            requested_size: requested_size.unwrap_or(sums.2),
            stream: stream.ok_or_else(|| SchemaErr::missing("stream"))?,
            segment_type: segment_type.ok_or_else(|| SchemaErr::missing("segment_type"))?,
            segment_pool_id,
            is_expandable,
            frames,
            blocks,
        };
        Ok((segment, history))
    }

    fn pool_id(&self, item: Item) -> Result<(u64, u64), SchemaErr> {
        match self.tree.as_seq(item) {
            Some(&[a, b]) => Ok((self.bits64(a).at_index(0)?, self.bits64(b).at_index(1)?)),
            _ => Err(self.wrong("a pair of ints", item)),
        }
    }

    /// Blocks of a segment starting at `address`. A block without an
    /// `address` key (legacy) sits where the previous one ended.
    fn blocks(&mut self, item: Item, address: u64) -> Result<(Vec<BlockInfo>, Vec<Vec<HistoryEntry>>), SchemaErr> {
        let items = self.seq(item)?;
        let mut blocks = Vec::with_capacity(items.len());
        let mut histories = Vec::new();
        let mut next = address;
        for (i, &block) in items.iter().enumerate() {
            let (block, history) = self.block(block, next).at_index(i)?;
            next = block.address.saturating_add(block.size);
            blocks.push(block);
            if let Some(history) = history {
                histories.resize_with(i, Vec::new);
                histories.push(history);
            }
        }
        if !histories.is_empty() {
            histories.resize_with(blocks.len(), Vec::new);
        }
        Ok((blocks, histories))
    }

    fn block(&mut self, item: Item, running_address: u64) -> Result<(BlockInfo, Option<Vec<HistoryEntry>>), SchemaErr> {
        let mut address = None;
        let mut size = None;
        let mut requested_size = None;
        let mut state = None;
        let mut frames = None;
        let mut history = None;
        let mut seen = 0u32;
        for &(k, v) in self.dict(item)? {
            let word = self.word(k)?;
            let key = word.name();
            match word {
                Word::Address => {
                    seen |= 1;
                    address = Some(self.u64(v).at(key)?);
                }
                Word::Size => {
                    seen |= 1 << 1;
                    size = Some(self.u64(v).at(key)?);
                }
                Word::RequestedSize => {
                    seen |= 1 << 2;
                    requested_size = Some(self.u64(v).at(key)?);
                }
                Word::State => {
                    seen |= 1 << 3;
                    state = Some(match self.word(v).at(key)? {
                        Word::ActiveAllocated => BlockState::ActiveAllocated,
                        Word::ActivePendingFree | Word::ActiveAwaitingFree => BlockState::ActivePendingFree,
                        Word::Inactive => BlockState::Inactive,
                        _ => {
                            return Err(self
                                .wrong("\"active_allocated\", \"active_pending_free\" or \"inactive\"", v)
                                .key(key))
                        }
                    });
                }
                Word::Frames => {
                    seen |= 1 << 4;
                    frames = Some(self.frames(v).at(key)?);
                }
                Word::History => {
                    seen |= 1 << 5;
                    history = Some(legacy::decode_history(self, v).at(key)?);
                }
                _ => {
                    let key = self.key_name(k)?;
                    self.block.unknown.insert(key.to_owned());
                }
            }
        }
        self.block.mask |= seen;
        let state = state.ok_or_else(|| SchemaErr::missing("state"))?;
        let requested_size = match (requested_size, &history) {
            (Some(requested), _) => requested,
            (None, Some(history)) => legacy::requested_size(state, history),
            (None, None) => return Err(SchemaErr::missing("requested_size")),
        };
        if frames.is_none() {
            if let Some(history) = &history {
                frames = legacy::frames(state, history);
            }
        }
        let block = BlockInfo {
            address: address.unwrap_or(running_address),
            size: size.ok_or_else(|| SchemaErr::missing("size"))?,
            requested_size,
            state,
            frames,
        };
        Ok((block, history))
    }

    fn device_traces(
        &mut self,
        item: Item,
        skipped: &mut Vec<SkippedEntry>,
    ) -> Result<Vec<Vec<TraceEntry>>, SchemaErr> {
        let devices = self.seq(item)?;
        let mut out = Vec::with_capacity(devices.len());
        for (device, &trace) in devices.iter().enumerate() {
            let entries = self.seq(trace).at_index(device)?;
            let mut decoded = Vec::with_capacity(entries.len());
            for (index, &entry) in entries.iter().enumerate() {
                match self.entry(entry).at_index(index).at_index(device)? {
                    Some(entry) => decoded.push(entry),
                    None => {
                        let entry = self.value(entry).at_index(index).at_index(device)?;
                        skipped.push(SkippedEntry { device, index, entry });
                    }
                }
            }
            out.push(decoded);
        }
        Ok(out)
    }

    /// One trace entry; `None` for an action vramkit does not model.
    fn entry(&mut self, item: Item) -> Result<Option<TraceEntry>, SchemaErr> {
        let mut action = None;
        let mut addr = None;
        let mut device_free = None;
        let mut size = None;
        let mut stream = None;
        let mut entry = TraceEntry::new(TraceAction::Alloc, 0, 0, 0);
        let mut seen = 0u32;
        for &(k, v) in self.dict(item)? {
            let word = self.word(k)?;
            let key = word.name();
            match word {
                Word::Action => {
                    seen |= 1;
                    action = Some(self.word(v).at(key)?);
                }
                Word::Addr => {
                    seen |= 1 << 1;
                    addr = Some(v);
                }
                Word::DeviceFree => {
                    seen |= 1 << 2;
                    device_free = Some(v);
                }
                Word::Size => {
                    seen |= 1 << 3;
                    size = Some(v);
                }
                Word::Stream => {
                    seen |= 1 << 4;
                    stream = Some(v);
                }
                Word::TimeUs => {
                    seen |= 1 << 5;
                    entry.time_us = Some(self.bits64(v).at(key)?);
                }
                Word::CompileContext => {
                    seen |= 1 << 6;
                    entry.compile_context = Some(self.str(v).at(key)?.to_owned());
                }
                Word::UserMetadata => {
                    seen |= 1 << 7;
                    entry.user_metadata = Some(self.str(v).at(key)?.to_owned());
                }
                Word::Frames => {
                    seen |= 1 << 8;
                    entry.frames = Some(self.frames(v).at(key)?);
                }
                _ => {
                    let key = self.key_name(k)?;
                    self.entry.unknown.insert(key.to_owned());
                }
            }
        }
        let action = action.ok_or_else(|| SchemaErr::missing("action"))?;
        entry.action = match action {
            Word::Alloc => TraceAction::Alloc,
            Word::FreeRequested => TraceAction::FreeRequested,
            Word::FreeCompleted => TraceAction::FreeCompleted,
            Word::SegmentAlloc => TraceAction::SegmentAlloc,
            Word::SegmentFree => TraceAction::SegmentFree,
            Word::SegmentMap => TraceAction::SegmentMap,
            Word::SegmentUnmap => TraceAction::SegmentUnmap,
            Word::Snapshot => TraceAction::Snapshot,
            Word::Oom => TraceAction::Oom,
            Word::UserDefined => TraceAction::UserDefined,
            _ => return Ok(None),
        };
        self.entry.mask |= seen;
        // `oom` records the device's free bytes instead of an address.
        let kind = entry.action;
        let (addr_key, addr) = if kind == TraceAction::Oom { ("device_free", device_free) } else { ("addr", addr) };
        let number = |value: Option<Item>, key: &str, read: fn(&Self, Item) -> Result<u64, SchemaErr>| {
            match value {
                Some(v) => read(self, v).at(key),
                // Annotations of PyTorch ~2.4 carry no address or size.
                None if kind == TraceAction::UserDefined => Ok(0),
                None => Err(SchemaErr::missing(key)),
            }
        };
        entry.addr = number(addr, addr_key, Self::u64)?;
        entry.size = number(size, "size", Self::u64)?;
        entry.stream = number(stream, "stream", Self::bits64)?;
        Ok(Some(entry))
    }
}

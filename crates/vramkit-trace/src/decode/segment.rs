//! Segments and their blocks. A legacy block's missing `requested_size`
//! and `frames` come from its `history`.

use super::reader::Reader;
use super::schema_err::{AtKey, SchemaErr};
use crate::legacy::{self, HistoryEntry};
use crate::tree::Item;
use crate::words::Word;
use vramkit_core::snapshot::{BlockInfo, BlockState, SegmentInfo};
use vramkit_core::PoolKind;

/// The keys of a segment dict this crate knows; a key's bit in the
/// segment level's [`Seen`](super::reader::Seen) mask is its index here.
pub(super) const SEGMENT_KEYS: [&str; 12] = [
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
/// The same for a block dict.
pub(super) const BLOCK_KEYS: [&str; 6] = ["address", "size", "requested_size", "state", "frames", "history"];

impl Reader<'_> {
    pub(super) fn segments(
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
                    history = Some(self.history(v).at(key)?);
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
}

//! Blocks: the host-side record of one address range inside a segment.
//!
//! A segment (one `cudaMalloc` range) is a doubly linked list of blocks in
//! address order that tile it exactly:
//!
//! ```text
//!  segment base                                          base + size
//!  |<-- block A -->|<------ block B ------>|<-- block C -->|
//!  | allocated     | free (in a pool)      | allocated     |
//!  prev: None      prev: A                 prev: B
//!  next: B         next: C                 next: None
//! ```
//!
//! Blocks live in an arena (`BlockArena`) and link to each other by
//! [`BlockId`], never by pointer. A block is *split* when it has a
//! neighbour; a segment is *whole* (releasable) when its only block has none.
//!
//! An expandable segment is one reserved address range; its blocks tile the
//! whole reservation, and the parts not backed by memory are *unmapped*
//! blocks (`mapped == false`), kept in the pool's `unmapped` set.

use crate::device::{EventId, StreamId};
use crate::snapshot::Frames;
use std::num::NonZeroU32;

/// Index of a block in the arena. Never 0 (the arena's first slot stays
/// vacant), so an `Option<BlockId>` link takes 4 bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct BlockId(NonZeroU32);

impl BlockId {
    #[inline]
    pub(crate) fn slot(self) -> usize {
        self.0.get() as usize
    }

    /// A block id for tests of structures that only store ids.
    #[cfg(test)]
    pub(crate) fn for_test(i: u32) -> BlockId {
        BlockId(NonZeroU32::new(i + 1).expect("no overflow"))
    }
}

/// Index of an expandable segment in the allocator, plus one (so an
/// `Option<ExpandableId>` takes 4 bytes).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ExpandableId(NonZeroU32);

impl ExpandableId {
    /// The id of the segment at `index` of the allocator's list.
    pub(crate) fn at(index: usize) -> ExpandableId {
        ExpandableId(u32::try_from(index + 1).ok().and_then(NonZeroU32::new).expect("fewer than 4 billion reservations"))
    }

    /// Its index in the allocator's list.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self.0.get() as usize - 1
    }
}

/// Index of a [`crate::pool::BlockPool`] in the allocator.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PoolIdx(pub(crate) u16);

/// One block. Field invariants are checked by `check_invariants`.
///
/// Kept to 72 bytes (a test says so): every cache-hit `malloc` writes a new
/// one when it splits, and `free` reads its neighbours to merge. What
/// almost every block leaves empty (stream uses, pending events, stacks)
/// lives in [`BlockExtras`], boxed.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    /// Device address of the first byte.
    pub addr: u64,
    /// Bytes; `prev.addr + prev.size == addr` when `prev` is set.
    pub size: u64,
    /// Unrounded bytes of the last allocation that used this block (stale when free).
    pub requested_size: u64,
    /// Stream of the whole segment.
    pub stream: StreamId,
    /// The pool this block returns to; every block of a segment has the same one.
    pub pool: PoolIdx,
    /// Lower neighbour in the same segment.
    pub prev: Option<BlockId>,
    /// Upper neighbour in the same segment.
    pub next: Option<BlockId>,
    /// Handed to the user and not yet freed by them.
    pub allocated: bool,
    /// The pool's `get_free_blocks_call_count` when the block last entered the free set.
    pub gc_count_base: u64,
    /// Creation order of the block's segment (PyTorch's registration
    /// counter), which breaks ties in size in the free sets from torch 2.13;
    /// 0 for every block under older releases' rules.
    pub registration_counter: u32,
    /// The expandable segment this block lies in, if any.
    pub expandable: Option<ExpandableId>,
    /// False only for the unmapped address space of an expandable segment.
    pub mapped: bool,
    /// Freed by the user through `free_requested`, waiting for `free_completed`.
    pub held: bool,
    /// Stream uses, pending events and stacks; `None` while all are empty
    /// (a block may also keep an empty one).
    pub extras: Option<Box<BlockExtras>>,
}

/// The parts of a block that almost every block leaves empty.
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockExtras {
    /// Events still pending from `record_stream` uses; the block is reusable only at 0.
    pub event_count: u32,
    /// Other streams that used this block (`record_stream`); sorted, no duplicates,
    /// never the block's own stream.
    pub stream_uses: Vec<StreamId>,
    /// The streams of `stream_uses` recorded while a capture was underway
    /// (PyTorch's `block_to_cudagraph_stream_uses`): work captured into a
    /// graph has finished by the time the capture ends, so when the events
    /// of a free deferred past the capture are recorded, these get none.
    pub capture_stream_uses: Vec<StreamId>,
    /// Stack of the allocation that holds this block.
    pub context_when_allocated: Option<Frames>,
    /// Stack of the `cudaMalloc` that made the segment (kept on the head block).
    pub context_when_segment_allocated: Option<Frames>,
}

impl Block {
    /// A free block with no neighbours, history or stream uses yet.
    pub fn new(addr: u64, size: u64, stream: StreamId, pool: PoolIdx) -> Block {
        Block {
            addr,
            size,
            requested_size: 0,
            stream,
            pool,
            prev: None,
            next: None,
            allocated: false,
            gc_count_base: 0,
            registration_counter: 0,
            expandable: None,
            mapped: true,
            held: false,
            extras: None,
        }
    }

    /// What a vacant arena slot holds.
    fn vacant() -> Block {
        Block::new(0, 0, StreamId(0), PoolIdx(0))
    }

    /// The extras, made on first use.
    #[inline]
    pub fn extras_mut(&mut self) -> &mut BlockExtras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Pending `record_stream` events.
    #[inline]
    pub fn event_count(&self) -> u32 {
        self.extras.as_ref().map_or(0, |e| e.event_count)
    }

    /// Other streams that used the block.
    #[inline]
    pub fn stream_uses(&self) -> &[StreamId] {
        self.extras.as_ref().map_or(&[], |e| &e.stream_uses)
    }

    /// Stack of the allocation that holds this block.
    #[inline]
    pub fn context_when_allocated(&self) -> Option<&Frames> {
        self.extras.as_ref().and_then(|e| e.context_when_allocated.as_ref())
    }

    /// Stack of the `cudaMalloc` that made the segment.
    #[inline]
    pub fn context_when_segment_allocated(&self) -> Option<&Frames> {
        self.extras.as_ref().and_then(|e| e.context_when_segment_allocated.as_ref())
    }

    /// Sets the allocation's stack; no extras are made for `None`.
    #[inline]
    pub fn set_context_when_allocated(&mut self, frames: Option<Frames>) {
        if frames.is_some() || self.extras.is_some() {
            self.extras_mut().context_when_allocated = frames;
        }
    }

    /// Sets the segment's stack; no extras are made for `None`.
    #[inline]
    pub fn set_context_when_segment_allocated(&mut self, frames: Option<Frames>) {
        if frames.is_some() || self.extras.is_some() {
            self.extras_mut().context_when_segment_allocated = frames;
        }
    }

    /// Takes the segment's stack out (a merge moves it to the new head).
    #[inline]
    pub fn take_context_when_segment_allocated(&mut self) -> Option<Frames> {
        self.extras.as_mut().and_then(|e| e.context_when_segment_allocated.take())
    }

    /// Has a neighbour in its segment.
    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    /// Allocated, or freed but waiting on stream events: not reusable.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.allocated || self.held || self.extras.as_ref().is_some_and(|e| e.event_count > 0 || !e.stream_uses.is_empty())
    }
}

/// The arena: a `Vec` of slots with a free list of vacant ones.
#[derive(Clone, Debug)]
pub(crate) struct BlockArena {
    /// Blocks by id; a vacant slot holds a block of size 0 (live blocks
    /// have at least 512 bytes), so a lookup is one bounds check. Slot 0
    /// is always vacant and never on `vacant` (block ids are not 0).
    slots: Vec<Block>,
    vacant: Vec<BlockId>,
}

impl Default for BlockArena {
    fn default() -> Self {
        BlockArena { slots: vec![Block::vacant()], vacant: Vec::new() }
    }
}

impl BlockArena {
    #[inline(always)]
    pub fn insert(&mut self, block: Block) -> BlockId {
        debug_assert!(block.size > 0, "a block of 0 bytes");
        match self.vacant.pop() {
            Some(id) => {
                // A vacant slot holds nothing to drop: no drop glue.
                let vacant = std::mem::replace(&mut self.slots[id.slot()], block);
                debug_assert!(vacant.size == 0 && vacant.extras.is_none());
                std::mem::forget(vacant);
                id
            }
            None => self.push(block),
        }
    }

    #[inline(never)]
    fn push(&mut self, block: Block) -> BlockId {
        let i = u32::try_from(self.slots.len()).ok().and_then(NonZeroU32::new).expect("fewer than 4 billion blocks");
        self.slots.push(block);
        BlockId(i)
    }

    /// Drops the block in place (no copy out).
    #[inline]
    pub fn discard(&mut self, id: BlockId) {
        let slot = &mut self.slots[id.slot()];
        debug_assert!(slot.size > 0, "discard of a vacant block slot");
        // The other fields are left as they were: `insert` overwrites them.
        slot.size = 0;
        // Almost every block has no extras: test before dropping, so the
        // drop glue is called only for those that do.
        if slot.extras.is_some() {
            slot.extras = None;
        }
        self.vacant.push(id);
    }

    #[inline]
    pub fn remove(&mut self, id: BlockId) -> Block {
        let block = std::mem::replace(&mut self.slots[id.slot()], Block::vacant());
        assert!(block.size > 0, "remove of a vacant block slot");
        self.vacant.push(id);
        block
    }

    /// Every live block.
    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &Block)> {
        self.slots.iter().enumerate().filter(|(_, b)| b.size > 0).map(|(i, b)| (BlockId(NonZeroU32::new(i as u32).expect("slot 0 is vacant")), b))
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.slots.len() - 1 - self.vacant.len()
    }
}

impl std::ops::Index<BlockId> for BlockArena {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        let block = &self.slots[id.slot()];
        debug_assert!(block.size > 0, "use of a vacant block slot");
        block
    }
}

impl std::ops::IndexMut<BlockId> for BlockArena {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        let block = &mut self.slots[id.slot()];
        debug_assert!(block.size > 0, "use of a vacant block slot");
        block
    }
}

/// A pending `record_stream` event and the block it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingEvent {
    pub event: EventId,
    pub block: BlockId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_record_fits_in_72_bytes() {
        assert_eq!(std::mem::size_of::<Block>(), 72);
        assert_eq!(std::mem::size_of::<Option<BlockId>>(), 4);
    }
}

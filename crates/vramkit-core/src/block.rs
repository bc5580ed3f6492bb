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

/// Index of a block in the arena.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct BlockId(pub(crate) u32);

/// Index of an expandable segment in the allocator.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ExpandableId(pub(crate) u32);

/// Index of a [`crate::pool::BlockPool`] in the allocator.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PoolIdx(pub(crate) u16);

/// One block. Field invariants are checked by `check_invariants`.
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
    /// Events still pending from `record_stream` uses; the block is reusable only at 0.
    pub event_count: u32,
    /// Other streams that used this block (`record_stream`); sorted, no duplicates,
    /// never the block's own stream. Empty for almost every block.
    pub stream_uses: Vec<StreamId>,
    /// The streams of `stream_uses` recorded while a capture was underway
    /// (PyTorch's `block_to_cudagraph_stream_uses`): work captured into a
    /// graph has finished by the time the capture ends, so when the events
    /// of a free deferred past the capture are recorded, these get none.
    pub capture_stream_uses: Vec<StreamId>,
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
            event_count: 0,
            stream_uses: Vec::new(),
            capture_stream_uses: Vec::new(),
            gc_count_base: 0,
            registration_counter: 0,
            expandable: None,
            mapped: true,
            held: false,
            context_when_allocated: None,
            context_when_segment_allocated: None,
        }
    }

    /// Where the block sorts in its pool's free set (on its stream).
    #[inline]
    pub fn free_key(&self) -> crate::pool::FreeKey {
        crate::pool::FreeKey { size: self.size, counter: self.registration_counter, addr: self.addr }
    }

    /// Has a neighbour in its segment.
    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    /// Allocated, or freed but waiting on stream events: not reusable.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.allocated || self.held || self.event_count > 0 || !self.stream_uses.is_empty()
    }
}

/// The arena: a `Vec` of slots with a free list of vacant ones.
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockArena {
    slots: Vec<Option<Block>>,
    vacant: Vec<u32>,
}

impl BlockArena {
    #[inline]
    pub fn insert(&mut self, block: Block) -> BlockId {
        if let Some(i) = self.vacant.pop() {
            self.slots[i as usize] = Some(block);
            BlockId(i)
        } else {
            let i = u32::try_from(self.slots.len()).expect("more than 4 billion blocks");
            self.slots.push(Some(block));
            BlockId(i)
        }
    }

    /// Drops the block in place (no copy out).
    #[inline]
    pub fn discard(&mut self, id: BlockId) {
        let slot = &mut self.slots[id.0 as usize];
        debug_assert!(slot.is_some(), "discard of a vacant block slot");
        *slot = None;
        self.vacant.push(id.0);
    }

    #[inline]
    pub fn remove(&mut self, id: BlockId) -> Block {
        let block = self.slots[id.0 as usize].take().expect("remove of a vacant block slot");
        self.vacant.push(id.0);
        block
    }

    /// Every live block.
    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &Block)> {
        self.slots.iter().enumerate().filter_map(|(i, b)| b.as_ref().map(|b| (BlockId(i as u32), b)))
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }
}

impl std::ops::Index<BlockId> for BlockArena {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        self.slots[id.0 as usize].as_ref().expect("use of a vacant block slot")
    }
}

impl std::ops::IndexMut<BlockId> for BlockArena {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        self.slots[id.0 as usize].as_mut().expect("use of a vacant block slot")
    }
}

/// A pending `record_stream` event and the block it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingEvent {
    pub event: EventId,
    pub block: BlockId,
}

//! Free-block pools (PyTorch's `BlockPool`).
//!
//! A pool holds the free, mapped blocks of one kind (small or large) of one
//! owner (the default pools or a private pool), ordered by
//! (stream, size, address). Best fit is the first entry at or after
//! (stream, size, 0): the smallest free block on that stream that is big
//! enough, the lowest address among equals.
//!
//! Blocks never move between streams, so the order is kept as one ordered
//! map per stream, keyed by `size << 64 | address` (lossless, and one
//! integer comparison instead of three).

use crate::block::BlockId;
use crate::device::StreamId;
use crate::rounding::PoolKind;
use crate::snapshot::MempoolId;
use std::collections::BTreeMap;

/// One free block as the pool orders it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeEntry {
    pub stream: StreamId,
    pub size: u64,
    pub addr: u64,
    pub id: BlockId,
}

#[inline]
fn key(size: u64, addr: u64) -> u128 {
    (u128::from(size) << 64) | u128::from(addr)
}

#[inline]
fn entry(stream: StreamId, key: u128, id: BlockId) -> FreeEntry {
    FreeEntry { stream, size: (key >> 64) as u64, addr: key as u64, id }
}

/// The free set of one pool: per stream (sorted by stream handle), blocks by (size, address).
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeBlocks {
    streams: Vec<(StreamId, BTreeMap<u128, BlockId>)>,
    len: usize,
}

impl FreeBlocks {
    #[inline]
    fn stream(&self, stream: StreamId) -> Option<&BTreeMap<u128, BlockId>> {
        self.streams.iter().find(|(s, _)| *s == stream).map(|(_, m)| m)
    }

    #[inline]
    fn stream_mut(&mut self, stream: StreamId) -> &mut BTreeMap<u128, BlockId> {
        let at = match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(at) => at,
            None => {
                let at = self.streams.partition_point(|(s, _)| *s < stream);
                self.streams.insert(at, (stream, BTreeMap::new()));
                at
            }
        };
        &mut self.streams[at].1
    }

    /// Inserts a free block; false if it was already there.
    #[inline]
    pub fn insert(&mut self, stream: StreamId, size: u64, addr: u64, id: BlockId) -> bool {
        let inserted = self.stream_mut(stream).insert(key(size, addr), id).is_none();
        self.len += inserted as usize;
        inserted
    }

    /// Removes a free block; false if it was not there.
    #[inline]
    pub fn remove(&mut self, stream: StreamId, size: u64, addr: u64) -> bool {
        let removed = self.stream_mut(stream).remove(&key(size, addr)).is_some();
        self.len -= removed as usize;
        removed
    }

    /// Whether exactly this block is in the set.
    pub fn contains(&self, stream: StreamId, size: u64, addr: u64, id: BlockId) -> bool {
        self.stream(stream).and_then(|m| m.get(&key(size, addr))) == Some(&id)
    }

    /// Number of free blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first free block on `stream` with size >= `size` (lowest address among equals).
    #[inline]
    pub fn lower_bound(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (&k, &id) = self.stream(stream)?.range(key(size, 0)..).next()?;
        Some(entry(stream, k, id))
    }

    /// The free block on `stream` just before the position of (size, 0):
    /// the largest one smaller than `size`.
    #[inline]
    pub fn before(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (&k, &id) = self.stream(stream)?.range(..key(size, 0)).next_back()?;
        Some(entry(stream, k, id))
    }

    /// The free block on the same stream just before `e`.
    #[inline]
    pub fn predecessor(&self, e: FreeEntry) -> Option<FreeEntry> {
        let (&k, &id) = self.stream(e.stream)?.range(..key(e.size, e.addr)).next_back()?;
        Some(entry(e.stream, k, id))
    }

    /// The free block on the same stream just after `e`.
    #[inline]
    pub fn successor(&self, e: FreeEntry) -> Option<FreeEntry> {
        use std::ops::Bound::{Excluded, Unbounded};
        let (&k, &id) = self.stream(e.stream)?.range((Excluded(key(e.size, e.addr)), Unbounded)).next()?;
        Some(entry(e.stream, k, id))
    }

    /// Every free block in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeEntry> + '_ {
        self.streams.iter().flat_map(|(s, m)| m.iter().map(move |(&k, &id)| entry(*s, k, id)))
    }
}

/// One pool of free blocks.
#[derive(Clone, Debug)]
pub(crate) struct BlockPool {
    /// Free mapped blocks. A block is here iff it is not allocated, has no
    /// pending events or stream uses, and is not being handed out.
    pub blocks: FreeBlocks,
    /// Unmapped blocks of expandable segments, by (stream, address).
    pub unmapped: BTreeMap<(StreamId, u64), BlockId>,
    /// Small or large.
    pub kind: PoolKind,
    /// `(0, 0)` for the default pools, else the private pool's id.
    pub owner: MempoolId,
    /// Calls of `get_free_block` on this pool while garbage collection is
    /// active; a block's age is this minus its `gc_count_base`.
    pub get_free_blocks_call_count: u64,
}

impl BlockPool {
    pub fn new(kind: PoolKind, owner: MempoolId) -> BlockPool {
        BlockPool { blocks: FreeBlocks::default(), unmapped: BTreeMap::new(), kind, owner, get_free_blocks_call_count: 0 }
    }

    #[inline]
    pub fn is_small(&self) -> bool {
        self.kind == PoolKind::Small
    }
}

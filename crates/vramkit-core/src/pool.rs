//! Free-block pools (PyTorch's `BlockPool`).
//!
//! A pool holds the free, mapped blocks of one kind (small or large) of one
//! owner (the default pools or a private pool), ordered by
//! (stream, size, segment age, address). Best fit is the first entry at or
//! after (stream, size): the smallest free block on that stream that is big
//! enough; among equals the one in the oldest segment, then the lowest
//! address. Segment age is PyTorch's registration counter (torch 2.13 and
//! later, `BlockComparatorSizeCounterAddress`); for older releases every
//! block's counter is 0, which leaves address order.
//!
//! Blocks never move between streams, so the order is kept as one ordered
//! map per stream, keyed by [`FreeKey`].

use crate::block::BlockId;
use crate::device::StreamId;
use crate::rounding::PoolKind;
use crate::snapshot::MempoolId;
use std::collections::BTreeMap;

/// Where a free block sorts within its stream: size, then the counter of
/// the segment it lies in (older first), then address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FreeKey {
    pub size: u64,
    pub counter: u32,
    pub addr: u64,
}

impl FreeKey {
    /// The first possible key of `size`: before every block of that size.
    #[inline]
    fn first_of(size: u64) -> FreeKey {
        FreeKey { size, counter: 0, addr: 0 }
    }
}

/// One free block as the pool orders it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeEntry {
    pub stream: StreamId,
    pub size: u64,
    pub addr: u64,
    pub counter: u32,
    pub id: BlockId,
}

impl FreeEntry {
    #[inline]
    fn key(&self) -> FreeKey {
        FreeKey { size: self.size, counter: self.counter, addr: self.addr }
    }
}

#[inline]
fn entry(stream: StreamId, key: FreeKey, id: BlockId) -> FreeEntry {
    FreeEntry { stream, size: key.size, addr: key.addr, counter: key.counter, id }
}

/// An ordered map from keys to blocks: a sorted `Vec` while small (the
/// common case: a handful of free blocks per stream, where shifting a few
/// entries beats a tree), a `BTreeMap` once it grows. Same order either way.
#[derive(Clone, Debug)]
enum Ordered {
    Small(Vec<(FreeKey, BlockId)>),
    Large(BTreeMap<FreeKey, BlockId>),
}

/// Entries at which a small map becomes a tree, and a tree becomes small again.
const GROW_AT: usize = 64;
const SHRINK_AT: usize = 16;

impl Default for Ordered {
    fn default() -> Self {
        Ordered::Small(Vec::new())
    }
}

impl Ordered {
    #[inline]
    fn insert(&mut self, k: FreeKey, id: BlockId) -> bool {
        match self {
            Ordered::Small(v) => match v.binary_search_by_key(&k, |e| e.0) {
                Ok(_) => false,
                Err(at) => {
                    v.insert(at, (k, id));
                    if v.len() > GROW_AT {
                        *self = Ordered::Large(v.drain(..).collect());
                    }
                    true
                }
            },
            Ordered::Large(m) => m.insert(k, id).is_none(),
        }
    }

    #[inline]
    fn remove(&mut self, k: FreeKey) -> bool {
        match self {
            Ordered::Small(v) => match v.binary_search_by_key(&k, |e| e.0) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            Ordered::Large(m) => {
                let removed = m.remove(&k).is_some();
                if m.len() < SHRINK_AT {
                    *self = Ordered::Small(std::mem::take(m).into_iter().collect());
                }
                removed
            }
        }
    }

    #[inline]
    fn get(&self, k: FreeKey) -> Option<BlockId> {
        match self {
            Ordered::Small(v) => v.binary_search_by_key(&k, |e| e.0).ok().map(|at| v[at].1),
            Ordered::Large(m) => m.get(&k).copied(),
        }
    }

    /// The first entry with key >= k.
    #[inline]
    fn at_or_after(&self, k: FreeKey) -> Option<(FreeKey, BlockId)> {
        match self {
            Ordered::Small(v) => v.get(v.partition_point(|e| e.0 < k)).copied(),
            Ordered::Large(m) => m.range(k..).next().map(|(&a, &b)| (a, b)),
        }
    }

    /// The first entry with key > k.
    #[inline]
    fn after(&self, k: FreeKey) -> Option<(FreeKey, BlockId)> {
        match self {
            Ordered::Small(v) => v.get(v.partition_point(|e| e.0 <= k)).copied(),
            Ordered::Large(m) => {
                use std::ops::Bound::{Excluded, Unbounded};
                m.range((Excluded(k), Unbounded)).next().map(|(&a, &b)| (a, b))
            }
        }
    }

    /// The last entry with key < k.
    #[inline]
    fn before(&self, k: FreeKey) -> Option<(FreeKey, BlockId)> {
        match self {
            Ordered::Small(v) => v.partition_point(|e| e.0 < k).checked_sub(1).map(|at| v[at]),
            Ordered::Large(m) => m.range(..k).next_back().map(|(&a, &b)| (a, b)),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (FreeKey, BlockId)> + '_> {
        match self {
            Ordered::Small(v) => Box::new(v.iter().copied()),
            Ordered::Large(m) => Box::new(m.iter().map(|(&a, &b)| (a, b))),
        }
    }
}

/// The free set of one pool: per stream (sorted by stream handle), blocks by [`FreeKey`].
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeBlocks {
    streams: Vec<(StreamId, Ordered)>,
    len: usize,
}

impl FreeBlocks {
    #[inline]
    fn stream(&self, stream: StreamId) -> Option<&Ordered> {
        if let Some((s, m)) = self.streams.first() {
            if *s == stream {
                return Some(m);
            }
        }
        self.streams.iter().find(|(s, _)| *s == stream).map(|(_, m)| m)
    }

    #[inline]
    fn stream_mut(&mut self, stream: StreamId) -> &mut Ordered {
        let at = match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(at) => at,
            None => {
                let at = self.streams.partition_point(|(s, _)| *s < stream);
                self.streams.insert(at, (stream, Ordered::default()));
                at
            }
        };
        &mut self.streams[at].1
    }

    /// Inserts a free block; false if it was already there.
    #[inline]
    pub fn insert(&mut self, stream: StreamId, key: FreeKey, id: BlockId) -> bool {
        let inserted = self.stream_mut(stream).insert(key, id);
        self.len += inserted as usize;
        inserted
    }

    /// Removes a free block; false if it was not there.
    #[inline]
    pub fn remove(&mut self, stream: StreamId, key: FreeKey) -> bool {
        let removed = self.stream_mut(stream).remove(key);
        self.len -= removed as usize;
        removed
    }

    /// Whether exactly this block is in the set.
    pub fn contains(&self, stream: StreamId, key: FreeKey, id: BlockId) -> bool {
        self.stream(stream).and_then(|m| m.get(key)) == Some(id)
    }

    /// Number of free blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first free block on `stream` with size >= `size` (the oldest
    /// segment's, then the lowest address, among equals).
    #[inline]
    pub fn lower_bound(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (k, id) = self.stream(stream)?.at_or_after(FreeKey::first_of(size))?;
        Some(entry(stream, k, id))
    }

    /// The free block on `stream` just before the first position of `size`:
    /// the largest one smaller than `size`.
    #[inline]
    pub fn before(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (k, id) = self.stream(stream)?.before(FreeKey::first_of(size))?;
        Some(entry(stream, k, id))
    }

    /// The free block on the same stream just before `e`.
    #[inline]
    pub fn predecessor(&self, e: FreeEntry) -> Option<FreeEntry> {
        let (k, id) = self.stream(e.stream)?.before(e.key())?;
        Some(entry(e.stream, k, id))
    }

    /// The free block on the same stream just after `e`.
    #[inline]
    pub fn successor(&self, e: FreeEntry) -> Option<FreeEntry> {
        let (k, id) = self.stream(e.stream)?.after(e.key())?;
        Some(entry(e.stream, k, id))
    }

    /// Every free block in (stream, size, segment age, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeEntry> + '_ {
        self.streams.iter().flat_map(|(s, m)| m.iter().map(move |(k, id)| entry(*s, k, id)))
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

//! Free-block pools (PyTorch's `BlockPool`).
//!
//! A pool holds the free, mapped blocks of one kind (small or large) of one
//! owner (the default pools or a private pool), ordered by
//! (stream, size, address). Best fit is the first entry at or after
//! (stream, size, 0): the smallest free block on that stream that is big
//! enough, the lowest address among equals.

use crate::block::BlockId;
use crate::device::StreamId;
use crate::rounding::PoolKind;
use crate::snapshot::MempoolId;
use std::collections::BTreeSet;
use std::ops::Bound;

/// Sort key of a free block: (stream, size, address), then the id (addresses
/// are unique, so the id never decides; it is carried to find the block).
pub(crate) type FreeKey = (u64, u64, u64, BlockId);

/// One pool of free blocks.
#[derive(Clone, Debug)]
pub(crate) struct BlockPool {
    /// Free mapped blocks. A block is here iff it is not allocated, has no
    /// pending events or stream uses, and is not being handed out.
    pub blocks: BTreeSet<FreeKey>,
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
        BlockPool { blocks: BTreeSet::new(), kind, owner, get_free_blocks_call_count: 0 }
    }

    #[inline]
    pub fn is_small(&self) -> bool {
        self.kind == PoolKind::Small
    }

    /// The first free block with key >= (stream, size, 0).
    #[inline]
    pub fn lower_bound(&self, stream: StreamId, size: u64) -> Option<FreeKey> {
        self.blocks.range((Bound::Included((stream.0, size, 0, BlockId(0))), Bound::Unbounded)).next().copied()
    }

    /// The free block just before the position of (stream, size, 0).
    #[inline]
    pub fn before(&self, stream: StreamId, size: u64) -> Option<FreeKey> {
        self.blocks.range(..(stream.0, size, 0, BlockId(0))).next_back().copied()
    }
}

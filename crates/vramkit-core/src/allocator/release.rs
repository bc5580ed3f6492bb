//! Giving memory back to the device (spec section 5): one segment,
//! the targeted release before a retry, `empty_cache`, garbage collection.

use super::malloc::AllocParams;
use super::{CachingAllocator, LARGE_POOL, SMALL_POOL};
use crate::block::{BlockId, PoolIdx};
use crate::device::{Device, DeviceAddr, DeviceError};
use crate::error::Error;
use crate::history::ContextLevel;
use crate::snapshot::{Frames, TraceAction};

impl<D: Device> CachingAllocator<D> {
    /// 5.1: `cudaFree` of one whole, free segment.
    pub(crate) fn release_block(&mut self, id: BlockId, context: &Option<Frames>) {
        self.remove_from_pool(id);
        let b = self.blocks.remove(id);
        debug_assert!(!b.is_split(), "release of a split block");
        let frames = match self.trace_frames(context, ContextLevel::Alloc) {
            Some(f) => Some(f),
            None => self.trace_frames(&b.context_when_segment_allocated().cloned(), ContextLevel::Alloc),
        };
        self.record_trace(TraceAction::SegmentFree, b.addr, b.size, b.stream, frames);
        self.device.free(DeviceAddr(b.addr), b.size);
        self.total_allocated_memory -= b.size;
        let kind = self.pools[b.pool.0 as usize].kind;
        let oversize = b.size >= self.config.max_split_size();
        self.stats.account_segment_free(kind, b.size, oversize);
    }

    /// 5.2: before retrying, free cached oversize blocks of the request's
    /// pool and stream: the smallest one big enough, or else from the largest
    /// down until enough is freed. Returns whether enough was freed.
    pub(crate) fn release_available_cached_blocks(
        &mut self,
        params: &AllocParams,
        context: &Option<Frames>,
    ) -> Result<bool, Error> {
        let max_split_size = self.config.max_split_size();
        if max_split_size == u64::MAX {
            self.max_split_watch.note_all();
            return Ok(false);
        }
        let pool = &self.pools[params.pool.0 as usize];
        let key_size = params.size.max(max_split_size);
        let found = pool.blocks.lower_bound(params.stream, key_size);
        if let Some(f) = found {
            self.release_asserts_on(f.id)?;
        }
        Ok(match found {
            Some(found) if self.releasable(found.id) => {
                let id = found.id;
                self.release_block(id, context);
                true
            }
            _ => {
                // No single block is large enough: free oversize blocks from the
                // largest down.
                let mut cursor = pool.blocks.before(params.stream, key_size);
                let mut total_released = 0u64;
                while let Some(e) = cursor {
                    let (size, id) = (e.size, e.id);
                    if total_released >= key_size || size < max_split_size {
                        break;
                    }
                    cursor = self.pools[params.pool.0 as usize].blocks.predecessor(e);
                    // Torch 2.4 releases every oversize block from the
                    // largest down, and dies at the first expandable one.
                    self.release_asserts_on(id)?;
                    if self.releasable(id) {
                        total_released += size;
                        self.release_block(id, context);
                    }
                }
                total_released >= key_size
            }
        })
    }

    /// PyTorch 2.4 tried to cudaFree an expandable block in the targeted
    /// release and died on an internal assert in `release_block` (GitHub
    /// #119452, #123548): the request fails with what its first attempt
    /// left (a new reservation, pages mapped) and no trace entry.
    fn release_asserts_on(&self, id: BlockId) -> Result<(), Error> {
        if self.config.compat.release_considers_expandable && self.blocks[id].expandable.is_some() {
            return Err(Error::Device(DeviceError::Other {
                call: "release_available_cached_blocks",
                message: "INTERNAL ASSERT FAILED: !block->expandable_segment_ (PyTorch 2.4 with expandable_segments and max_split_size_mb, GitHub #119452)".into(),
            }));
        }
        Ok(())
    }

    /// Whole and not part of an expandable segment.
    #[inline]
    fn releasable(&self, id: BlockId) -> bool {
        let b = &self.blocks[id];
        !b.is_split() && b.expandable.is_none()
    }

    /// 5.3: `empty_cache()` and the last stage of the retry ladder: wait for
    /// every pending event, then free every whole segment, large pool first.
    pub(crate) fn release_cached_blocks(&mut self, context: Option<&Option<Frames>>) -> bool {
        let none = None;
        let context = context.unwrap_or(&none);
        if !self.capture_underway() {
            self.synchronize_and_free_events(context);
            self.release_blocks(LARGE_POOL, context);
            self.release_blocks(SMALL_POOL, context);
        }
        self.release_freeable_pools(context);
        true
    }

    /// Frees every whole free segment of one pool, in the pool's order, then
    /// unmaps the whole pages of its free expandable blocks in that order.
    pub(crate) fn release_blocks(&mut self, pool: PoolIdx, context: &Option<Frames>) {
        let mut to_unmap = Vec::new();
        let free: Vec<BlockId> = self.pools[pool.0 as usize].blocks.iter().map(|e| e.id).collect();
        for id in free {
            let b = &self.blocks[id];
            if b.expandable.is_some() {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(id, context);
            }
        }
        for id in to_unmap {
            self.unmap_block(id, context);
            let b = &self.blocks[id];
            if !b.mapped && !b.is_split() {
                self.release_expandable_segment(id);
            }
        }
    }

    /// 5.4: with a fraction limit and `garbage_collection_threshold`, free
    /// whole large-pool segments that have gone unused for longer than
    /// average until reserved memory is back under the threshold.
    pub(crate) fn garbage_collect_cached_blocks(&mut self, context: &Option<Frames>) {
        let threshold =
            (self.config.garbage_collection_threshold * self.allowed_memory_maximum as f64) as u64;
        if self.total_allocated_memory <= threshold {
            return;
        }
        let target = self.total_allocated_memory - threshold;
        let pool = &self.pools[LARGE_POOL.0 as usize];
        let calls = pool.get_free_blocks_call_count;
        let age = |b: &crate::block::Block| calls - b.gc_count_base;
        let mut total_age = 0u64;
        let mut freeable = 0u64;
        for e in pool.blocks.iter() {
            let b = &self.blocks[e.id];
            if !b.is_split() {
                total_age += age(b);
                freeable += 1;
            }
        }
        if freeable == 0 {
            return;
        }
        let mut reclaimed = 0u64;
        let mut block_freed = true;
        while reclaimed < target && block_freed && freeable > 0 {
            let age_threshold = total_age as f64 / freeable as f64;
            block_freed = false;
            let candidates: Vec<BlockId> = self.pools[LARGE_POOL.0 as usize]
                .blocks
                .iter()
                .map(|e| e.id)
                .filter(|&id| {
                    let b = &self.blocks[id];
                    !b.is_split() && b.expandable.is_none() && age(b) as f64 >= age_threshold
                })
                .collect();
            for id in candidates {
                let b = &self.blocks[id];
                block_freed = true;
                reclaimed += b.size;
                total_age -= age(b);
                freeable -= 1;
                self.release_block(id, context);
            }
        }
    }
}

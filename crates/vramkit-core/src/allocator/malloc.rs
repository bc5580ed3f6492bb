//! `malloc` (spec section 3): search the pool, else grow, else climb the
//! retry ladder, else raise an out-of-memory error.

use super::{CachingAllocator, LARGE_POOL, SMALL_POOL};
use crate::block::{Block, BlockId, PoolIdx};
use crate::pool::{BlockPool, FreeEntry, FreeKey, NOWHERE};
use crate::device::{Device, DeviceError, StreamId};
use crate::error::Error;
use crate::history::ContextLevel;
use crate::oom::OutOfMemoryError;
use crate::rounding::{get_allocation_size, round_size, PoolKind, LARGE_SPLIT_REMAINDER, MIN_BLOCK_SIZE, ONE_EXABYTE};
use crate::snapshot::{Frames, TraceAction};
use crate::live_stats::Peak;

/// One request on its way through `malloc` (PyTorch's `AllocParams`).
#[derive(Clone, Debug)]
pub(crate) struct AllocParams {
    pub stream: StreamId,
    /// Bytes asked for.
    pub orig_size: u64,
    /// `round_size(orig_size)`.
    pub size: u64,
    /// Bytes of a new segment for it.
    pub alloc_size: u64,
    pub pool: PoolIdx,
    /// The block found or made; it is in its pool's free set until
    /// `alloc_found_block` takes it (or what it splits off) out.
    pub block: Option<BlockId>,
    /// Where best fit found it in the free set (`FreeEntry::index`).
    pub hint: u32,
}

impl<D: Device> CachingAllocator<D> {
    /// 3: a request, up to the parked free it may take back; the search of
    /// the free set and what follows is `malloc_from_pool`, out of line.
    #[inline(always)]
    pub(crate) fn malloc_impl(
        &mut self,
        orig_size: u64,
        stream: StreamId,
        context: Option<Frames>,
    ) -> Result<u64, Error> {
        if orig_size >= ONE_EXABYTE {
            return Err(self.more_than_one_exabyte(orig_size));
        }
        if self.events_pending() && !self.capture_underway() {
            self.settle_parked();
            self.process_events_impl(&context);
        }

        if let Some(addr) = self.malloc_again(orig_size, stream) {
            return Ok(addr);
        }
        self.repeat = None;
        let size = self.rounded(orig_size);
        let params = self.alloc_params_rounded(orig_size, size, stream);
        if self.parked.is_some() {
            if let Some(p) = self.unparks(&params) {
                self.count_get_free_block(params.pool);
                let (addr, inactive_split) = self.unpark(p, &params);
                self.hand_out(&params, p.block, addr, params.size, inactive_split, Peak::Unchanged, context);
                self.begin_repeat(p, orig_size, inactive_split);
                return Ok(addr);
            }
            return self.malloc_beside_parked(params, context);
        }
        self.malloc_from_pool(params, context)
    }

    /// 3.1 to 3.5 with no parked free: best fit, else a new segment or the
    /// retry ladder; then the split and the bookkeeping.
    #[inline(never)]
    fn malloc_from_pool(&mut self, params: AllocParams, context: Option<Frames>) -> Result<u64, Error> {
        self.count_get_free_block(params.pool);
        let found = self.find_free_block(&params);
        self.malloc_found(params, found, context)
    }

    /// 3.1 to 3.5 beside a parked free that the request does not take back
    /// whole: best fit as if its merge were done. When that picks the
    /// merged block and splits it, the split is made where the parked pair
    /// lies (`resplit`); else the merge is done and the block best fit
    /// found is used, with no second search.
    #[inline(never)]
    fn malloc_beside_parked(&mut self, params: AllocParams, context: Option<Frames>) -> Result<u64, Error> {
        self.count_get_free_block(params.pool);
        let found = self.find_free_block(&params);
        if let Some(p) = self.parked.filter(|p| found.is_some_and(|e| e.id == p.block)) {
            if let Some(inactive_split) = self.resplit(p, &params) {
                let addr = self.blocks[p.block].addr;
                self.hand_out(&params, p.block, addr, params.size, inactive_split, Peak::MayRise, context);
                return Ok(addr);
            }
        }
        self.settle_parked();
        self.malloc_found(params, found, context)
    }

    /// 3.1's result `found` (a free block, or none: grow), carved and accounted.
    #[inline(always)]
    fn malloc_found(&mut self, mut params: AllocParams, found: Option<FreeEntry>, context: Option<Frames>) -> Result<u64, Error> {
        // Free-memory callbacks (CUDA IPC collection in PyTorch) free nothing
        // here, so there is no second search.
        let found = match found {
            Some(e) => {
                params.block = Some(e.id);
                params.hint = e.index;
                true
            }
            None => {
                self.grow(&mut params, &context)?;
                false
            }
        };
        let id = params.block.expect("a block was found or made");
        let (block, addr) = self.alloc_found_block(&params, id, context);
        if found && block != id {
            self.remember_split(params.pool, block, id);
        }
        Ok(addr)
    }

    /// 3.2 to 3.4, when the cache has no block for the request: garbage
    /// collection, a new segment, the retry ladder, else out-of-memory.
    #[inline(never)]
    fn grow(&mut self, params: &mut AllocParams, context: &Option<Frames>) -> Result<(), Error> {
        if self.gc_active() {
            self.garbage_collect_cached_blocks(context);
        }
        let ok = self.alloc_block(params, false, context)?
            || (self.release_available_cached_blocks(params, context)? && self.alloc_block(params, false, context)?)
            || (!self.capture_underway()
                && self.release_cached_blocks(Some(context))
                && self.alloc_block(params, true, context)?);
        if ok {
            Ok(())
        } else {
            Err(self.out_of_memory(params, context.clone()))
        }
    }

    #[cold]
    fn more_than_one_exabyte(&self, orig_size: u64) -> Error {
        Error::OutOfMemory(Box::new(OutOfMemoryError::more_than_one_exabyte(self.device_index, orig_size)))
    }

    /// `round_size(orig_size)`, remembered for the next request: a training
    /// step asks for the same sizes again and again.
    #[inline(always)]
    pub(crate) fn rounded(&mut self, orig_size: u64) -> u64 {
        let (last, rounded) = self.last_rounding;
        if last == orig_size {
            return rounded;
        }
        let size = round_size(orig_size, &self.config.roundup_power2_divisions);
        self.last_rounding = (orig_size, size);
        size
    }

    #[inline]
    pub(crate) fn alloc_params(&self, orig_size: u64, stream: StreamId) -> AllocParams {
        self.alloc_params_rounded(orig_size, round_size(orig_size, &self.config.roundup_power2_divisions), stream)
    }

    /// `alloc_params` for `size`, which is `round_size(orig_size)`.
    #[inline(always)]
    pub(crate) fn alloc_params_rounded(&self, orig_size: u64, size: u64, stream: StreamId) -> AllocParams {
        let pool = self.get_pool(size, stream);
        AllocParams {
            stream,
            orig_size,
            size,
            alloc_size: get_allocation_size(size, self.config.large_segment_size_bytes),
            pool,
            block: None,
            hint: NOWHERE,
        }
    }

    /// The pool for a rounded size. Private-pool routing plugs in here.
    #[inline]
    fn get_pool(&self, size: u64, stream: StreamId) -> PoolIdx {
        let kind = PoolKind::for_size(size);
        self.route(kind, stream).unwrap_or(match kind {
            PoolKind::Small => SMALL_POOL,
            PoolKind::Large => LARGE_POOL,
        })
    }

    /// Garbage collection runs only with a fraction limit and a threshold.
    #[inline]
    pub(crate) fn gc_active(&self) -> bool {
        self.set_fraction && self.config.garbage_collection_threshold > 0.0
    }

    /// Garbage collection ages blocks by the searches of their pool.
    #[inline(always)]
    pub(crate) fn count_get_free_block(&mut self, pool: PoolIdx) {
        if self.gc_active() {
            self.pools[pool.0 as usize].get_free_blocks_call_count += 1;
        }
    }

    /// 3.1: best fit in the request's pool and stream, with the oversize rules.
    pub(crate) fn get_free_block(&mut self, params: &mut AllocParams) -> bool {
        self.count_get_free_block(params.pool);
        let Some(found) = self.find_free_block(params) else {
            return false;
        };
        params.block = Some(found.id);
        params.hint = found.index;
        true
    }

    /// The block `get_free_block` would take, without taking it (with a
    /// parked free's merge done: then possibly the parked block). Inlined:
    /// a found block returned through memory is written field by field and
    /// read back whole, which the processor cannot forward (where this was
    /// a call, perf put a seventh of its samples on that read).
    #[inline(always)]
    pub(crate) fn find_free_block(&self, params: &AllocParams) -> Option<FreeEntry> {
        let pool = &self.pools[params.pool.0 as usize];
        let mut found = match &self.parked {
            Some(p) if p.pool == params.pool && p.stream == params.stream => self.parked_lower_bound(p, params.size)?,
            _ => pool.blocks.lower_bound(params.stream, params.size)?,
        };
        if self.blocks[found.id].expandable.is_some() {
            found = self.past_expandable(pool, found)?;
        }
        let max_split_size = self.config.max_split_size();
        self.max_split_watch.note_found(params.size, found.size, self.config.oversize_tolerance());
        // An oversize cached block is never used for a request that is not oversize.
        if params.size < max_split_size && found.size >= max_split_size {
            return None;
        }
        // An oversize request may reuse a block only a little larger than it.
        if params.size >= max_split_size && found.size >= params.size.saturating_add(self.config.oversize_tolerance()) {
            return None;
        }
        Some(found)
    }

    /// `find_free_block`'s choice when best fit lands on a block of an
    /// expandable segment.
    #[inline(never)]
    fn past_expandable(&self, pool: &BlockPool, mut found: FreeEntry) -> Option<FreeEntry> {
        if self.config.expandable_segments {
            // Judge a block at the growth frontier by the size it can grow
            // to, so interior free blocks are preferred over it.
            let blocks = &self.blocks;
            let expandable_size = |id: BlockId| {
                let b = &blocks[id];
                b.size + b.next.filter(|&n| !blocks[n].mapped).map_or(0, |n| blocks[n].size)
            };
            while self.blocks[found.id].expandable.is_some() {
                match pool.blocks.successor(found) {
                    Some(next) if expandable_size(next.id) < expandable_size(found.id) => found = next,
                    _ => break,
                }
            }
        } else {
            // Expandable segments were turned off after some were made:
            // only non-expandable blocks may be used.
            loop {
                found = pool.blocks.successor(found)?;
                if self.blocks[found.id].expandable.is_none() {
                    break;
                }
            }
        }
        Some(found)
    }

    /// Would a `malloc` that misses the cache now run garbage collection
    /// (a fraction limit, a threshold, and reserved bytes above it)? Changes nothing.
    pub fn gc_would_run(&self) -> bool {
        self.gc_active()
            && self.total_allocated_memory
                > (self.config.garbage_collection_threshold * self.allowed_memory_maximum as f64) as u64
    }

    /// Would `malloc(size, stream)` be served from the cache, without asking
    /// the device for memory? Changes nothing.
    pub fn fits_in_cache(&self, size: u64, stream: StreamId) -> bool {
        let params = self.alloc_params(size, stream);
        self.find_free_block(&params).is_some()
    }

    /// 3.2: a new segment from the device. `Ok(false)` is out-of-memory
    /// (fraction cap or a refused `cudaMalloc`); other device errors are raised.
    pub(crate) fn alloc_block(
        &mut self,
        params: &mut AllocParams,
        is_retry: bool,
        context: &Option<Frames>,
    ) -> Result<bool, Error> {
        if is_retry {
            self.stats.account_alloc_retry();
        }
        let size = params.alloc_size;
        if self.set_fraction && self.total_allocated_memory.saturating_add(size) > self.allowed_memory_maximum {
            return Ok(false);
        }
        let private = self.pools[params.pool.0 as usize].owner != (0, 0);
        if self.expandable_active() && (!private || self.config.compat.expandable_in_private_pools) {
            let block = self.try_allocate_expandable_block(params, context)?;
            params.block = block;
            return Ok(block.is_some());
        }
        let addr = match self.device.malloc(size, params.stream) {
            Ok(addr) => addr,
            Err(DeviceError::OutOfMemory { .. }) => return Ok(false),
            Err(other) => return Err(Error::Device(other)),
        };
        self.total_allocated_memory += size;
        let kind = self.pools[params.pool.0 as usize].kind;
        let oversize = size >= self.config.max_split_size();
        self.stats.account_segment_alloc(kind, size, oversize);
        let frames = self.trace_frames(context, ContextLevel::Alloc);
        self.record_trace(TraceAction::SegmentAlloc, addr.0, size, params.stream, frames);
        let keep_context = self.history.as_ref().is_some_and(|h| h.config.context >= ContextLevel::State);
        let mut block = Block::new(addr.0, size, params.stream, params.pool);
        block.registration_counter = self.register_segment();
        if keep_context {
            block.set_context_when_segment_allocated(context.clone());
        }
        let id = self.blocks.insert(block);
        self.insert_into_pool(id);
        params.block = Some(id);
        Ok(true)
    }

    /// 3.3: split a block of `pool` for a request of `size` bytes, leaving
    /// `remaining`, or hand it out whole?
    #[inline(always)]
    pub(crate) fn should_split(&self, pool: PoolIdx, size: u64, remaining: u64) -> bool {
        if self.pools[pool.0 as usize].is_small() || self.expandable_active() {
            remaining >= MIN_BLOCK_SIZE
        } else {
            self.max_split_watch.note_split(size, remaining, LARGE_SPLIT_REMAINDER);
            size < self.config.max_split_size() && remaining > LARGE_SPLIT_REMAINDER
        }
    }

    /// 3.3 and 3.5: carve the allocation from the low end of `id` (a free
    /// block in its pool), splitting it when the rest is worth keeping, and
    /// account for it. Returns the block handed out and its address.
    pub(crate) fn alloc_found_block(&mut self, params: &AllocParams, id: BlockId, context: Option<Frames>) -> (BlockId, u64) {
        let size = params.size;
        let b = &self.blocks[id];
        let (addr, block_size, prev, expandable, counter) = (b.addr, b.size, b.prev, b.expandable, b.registration_counter);
        let already_split = b.is_split();
        let found_key = FreeKey::of(b);
        let remaining = block_size - size;
        let split = self.should_split(params.pool, size, remaining);
        // inactive_split is not kept for expandable blocks.
        let (block, block_size, inactive_split) = if split {
            // The free block keeps its identity (and free-set entry) as the
            // remainder; a new block takes its low end.
            let registration_counter = self.register_split(counter);
            let new_block = self.blocks.insert(Block {
                prev,
                next: Some(id),
                expandable,
                registration_counter,
                allocated: true,
                requested_size: params.orig_size,
                ..Block::new(addr, size, params.stream, params.pool)
            });
            // As in PyTorch, the segment's cudaMalloc stack stays on the old
            // block even when the new one becomes the head; snapshots then show
            // no segment stack for a split segment.
            if let Some(p) = prev {
                self.blocks[p].next = Some(new_block);
            }
            let r = &mut self.blocks[id];
            r.prev = Some(new_block);
            r.addr = addr + size;
            r.size = remaining;
            self.put_into_pool(id, Some((found_key, params.hint)));
            let inactive_split = match (expandable, already_split) {
                (Some(_), _) => (0, 0),
                (None, true) => (0, -(size as i64)),
                (None, false) => (1, remaining as i64),
            };
            (new_block, size, inactive_split)
        } else {
            let removed = self.pools[params.pool.0 as usize].blocks.remove(params.stream, found_key, params.hint);
            debug_assert!(removed, "block {id:?} was not in its pool");
            let b = &mut self.blocks[id];
            b.allocated = true;
            b.requested_size = params.orig_size;
            b.set_context_when_allocated(None);
            let inactive_split = if already_split && expandable.is_none() { (-1, -(block_size as i64)) } else { (0, 0) };
            (id, block_size, inactive_split)
        };
        let fresh = self.allocated.insert(addr, block);
        debug_assert!(fresh, "{addr:#x} handed out twice");
        self.hand_out(params, block, addr, block_size, inactive_split, Peak::MayRise, context);
        (block, addr)
    }

    /// 3.5's bookkeeping for `block` (at `addr`, `block_size` bytes), now
    /// allocated for `params` and in the address map: history and
    /// statistics (`peak`: whether they may reach new peaks).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // each caller has them at hand; reading them back costs the pair
    pub(crate) fn hand_out(
        &mut self,
        params: &AllocParams,
        block: BlockId,
        addr: u64,
        block_size: u64,
        inactive_split: (i64, i64),
        peak: Peak,
        context: Option<Frames>,
    ) {
        if let Some(h) = &self.history {
            if h.config.context >= ContextLevel::State {
                self.blocks[block].set_context_when_allocated(context.clone());
            }
            let frames = self.trace_frames(&context, ContextLevel::Alloc);
            self.record_trace(TraceAction::Alloc, addr, params.orig_size, params.stream, frames);
        }
        debug_assert_eq!(self.allocated.get(addr), Some(block), "{addr:#x} is not in the address map");
        let kind = self.pools[params.pool.0 as usize].kind;
        let oversize = block_size >= self.config.max_split_size();
        self.stats.account_block_allocated(kind, block_size, params.orig_size, oversize, inactive_split, peak);
    }

    /// Puts a free block into its pool, resetting its age.
    #[inline]
    pub(crate) fn insert_into_pool(&mut self, id: BlockId) {
        self.put_into_pool(id, None);
    }

    /// Puts a free block into its pool, resetting its age, in place of the
    /// entry at `replacing` if given (the key of a block it was split from
    /// or merged with, still in the pool, and where it was found).
    #[inline(always)]
    pub(crate) fn put_into_pool(&mut self, id: BlockId, replacing: Option<(FreeKey, u32)>) {
        let b = &mut self.blocks[id];
        let pool = &mut self.pools[b.pool.0 as usize];
        b.gc_count_base = pool.get_free_blocks_call_count;
        let put = match replacing {
            Some((old, hint)) => pool.blocks.rekey(b.stream, old, hint, FreeKey::of(b), id),
            None => pool.blocks.insert(b.stream, FreeKey::of(b), id),
        };
        debug_assert!(put, "block {id:?} was already in its pool, or what it replaces was not");
    }

    /// Takes a free block out of its pool.
    #[inline]
    pub(crate) fn remove_from_pool(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let set = &mut self.pools[b.pool.0 as usize].blocks;
        let removed = set.remove(b.stream, FreeKey::of(b), set.placed(id));
        debug_assert!(removed, "block {id:?} was not in its pool");
    }

    /// 3.4: record the failure and build the error.
    fn out_of_memory(&mut self, params: &AllocParams, context: Option<Frames>) -> Error {
        let info = self.device.mem_get_info();
        let frames = self.trace_frames(&context, ContextLevel::Alloc);
        self.record_trace(TraceAction::Oom, info.free_bytes, params.size, params.stream, frames);
        self.stats.account_oom();
        Error::OutOfMemory(Box::new(self.oom_error(params, info)))
    }

}

//! Expandable segments (spec section 6): one reserved address range per
//! (stream, pool) that is backed by memory page by page as it grows.
//!
//! ```text
//!  base                                                     base + reservation
//!  |<- mapped: blocks, allocated or free ->|<- unmapped (one block) ------->|
//!  page 0      page 1      page 2          page 3 ...
//! ```
//!
//! Pages are counted from the reservation base, not from address 0: a base
//! is only 2 MiB aligned, so a 20 MiB page grid is relative to it.

use super::malloc::AllocParams;
use super::CachingAllocator;
use crate::block::{Block, BlockId, ExpandableId, PoolIdx};
use crate::device::{Device, DeviceAddr, DeviceError, StreamId};
use crate::error::Error;
use crate::history::ContextLevel;
use crate::rounding::SMALL_BUFFER;
use crate::snapshot::{Frames, TraceAction};

/// Address space reserved per expandable segment, at most (for simulated
/// devices of unlimited memory).
const MAX_RESERVATION: u64 = 1 << 46;

/// One reserved range (PyTorch's `ExpandableSegment`).
#[derive(Clone, Debug)]
pub(crate) struct ExpandableSegment {
    /// Where `cuMemAddressReserve` put it.
    pub base: u64,
    /// Bytes reserved: `page_size * max_pages`.
    pub size: u64,
    /// 2 MiB for small pools, `large_segment_size` for large ones.
    pub page_size: u64,
    pub stream: StreamId,
    pub pool: PoolIdx,
}

impl ExpandableSegment {
    /// The pages wholly or partly covering `[ptr, ptr + size)`, for mapping.
    fn pages_covering(&self, ptr: u64, size: u64) -> (u64, u64) {
        let begin = (ptr - self.base) / self.page_size;
        let end = (ptr + size - self.base).div_ceil(self.page_size);
        (begin, end)
    }

    /// The pages wholly inside `[ptr, ptr + size)`, for unmapping.
    fn pages_inside(&self, ptr: u64, size: u64) -> (u64, u64) {
        let begin = (ptr - self.base).div_ceil(self.page_size);
        let end = (ptr + size - self.base) / self.page_size;
        (begin, end)
    }

    fn page_addr(&self, page: u64) -> u64 {
        self.base + page * self.page_size
    }
}

impl<D: Device> CachingAllocator<D> {
    /// `expandable_segments` is on and the device can do it.
    #[inline]
    pub(crate) fn expandable_active(&self) -> bool {
        self.config.expandable_segments && self.device.supports_virtual_memory()
    }

    /// Sum of block sizes up to `size`, walking free (allocatable) blocks from `b`.
    fn has_available_address_space(&self, mut b: Option<BlockId>, size: u64) -> bool {
        let mut bytes = 0u64;
        while bytes < size {
            match b {
                Some(id) if !self.blocks[id].is_active() => {
                    bytes += self.blocks[id].size;
                    b = self.blocks[id].next;
                }
                _ => break,
            }
        }
        bytes >= size
    }

    /// 6.2: the lowest-address place on this stream with `size` bytes of free
    /// and unmapped space, or a new reservation's unmapped block.
    fn find_expandable_block(&mut self, params: &AllocParams) -> Result<BlockId, Error> {
        let pool = &self.pools[params.pool.0 as usize];
        let candidates: Vec<BlockId> =
            pool.unmapped.range((params.stream, 0)..).take_while(|((s, _), _)| *s == params.stream).map(|(_, &id)| id).collect();
        for unmapped in candidates {
            let mut c = unmapped;
            if let Some(p) = self.blocks[c].prev {
                if !self.blocks[p].is_active() {
                    c = p;
                }
            }
            if self.has_available_address_space(Some(c), params.size) {
                return Ok(c);
            }
        }
        self.new_expandable_segment(params.stream, params.pool)
    }

    /// A new reservation (PyTorch's `new ExpandableSegment`) for `pool` on
    /// `stream`: one unmapped block covering it, in the pool's unmapped set.
    fn new_expandable_segment(&mut self, stream: StreamId, pool: PoolIdx) -> Result<BlockId, Error> {
        let small = self.pools[pool.0 as usize].is_small();
        let page_size = if small { SMALL_BUFFER } else { self.config.large_segment_size_bytes };
        let total = self.device.mem_get_info().total_bytes;
        let address_space = total.saturating_add(total / 8).min(MAX_RESERVATION);
        let size = address_space.div_ceil(page_size).max(1) * page_size;
        let base = self.device.reserve_address_range(size)?;
        let id = ExpandableId::at(self.expandable_segments.len());
        self.expandable_segments.push(Some(ExpandableSegment { base: base.0, size, page_size, stream, pool }));
        let registration_counter = self.register_segment();
        let block = self.blocks.insert(Block {
            expandable: Some(id),
            mapped: false,
            registration_counter,
            ..Block::new(base.0, size, stream, pool)
        });
        self.pools[pool.0 as usize].unmapped.insert((stream, base.0), block);
        Ok(block)
    }

    /// Leaves a new, wholly unmapped reservation for the pool that a
    /// `malloc(size, stream)` would use, as a request leaves it when its
    /// first attempt reserved a range and could not map it, and the request
    /// then died before it was served or refused (torch 2.4's targeted
    /// release asserts on an expandable block, GitHub #119452): no trace
    /// entry records it. Its base is the one the device hands out next
    /// (a replay queues the recorded one). Nothing is mapped, and
    /// `empty_cache()` does not release it (it holds no free block); a
    /// later request on that stream finds it by address like any other.
    ///
    /// Returns its base. An error when that pool grows no expandable
    /// segments (they are off, or it is a private pool of a release that
    /// gives those classic ones), or the device cannot reserve.
    pub fn leave_expandable_reservation(&mut self, size: u64, stream: StreamId) -> Result<DeviceAddr, Error> {
        self.settle_parked();
        let params = self.alloc_params(size, stream);
        let private = self.pools[params.pool.0 as usize].owner != (0, 0);
        if !self.expandable_active() || (private && !self.config.compat.expandable_in_private_pools) {
            return Err(Error::Device(DeviceError::Other {
                call: "leave_expandable_reservation",
                message: "the request's pool grows no expandable segments".into(),
            }));
        }
        let block = self.new_expandable_segment(stream, params.pool)?;
        Ok(DeviceAddr(self.blocks[block].addr))
    }

    /// 6.3: map pages until a free block of `params.size` exists at the
    /// place `find_expandable_block` chose; returns it (in the free set).
    /// `Ok(None)` when the device has no memory for the pages.
    pub(crate) fn try_allocate_expandable_block(
        &mut self,
        params: &AllocParams,
        context: &Option<Frames>,
    ) -> Result<Option<BlockId>, Error> {
        let mut candidate = self.find_expandable_block(params)?;
        if !self.blocks[candidate].mapped {
            let n = self.blocks[candidate].size.min(params.size);
            if !self.map_block(candidate, n, context)? {
                return Ok(None);
            }
        }
        while self.blocks[candidate].size < params.size {
            let remaining = params.size - self.blocks[candidate].size;
            let next = self.blocks[candidate].next.expect("free space continues into an unmapped block");
            let n = remaining.min(self.blocks[next].size);
            if !self.map_block(next, n, context)? {
                return Ok(None);
            }
            candidate = next;
        }
        Ok(Some(candidate))
    }

    /// Maps the first `size` bytes of the unmapped block at `addr` on
    /// `stream`, as a request's first attempt maps an unmapped stretch
    /// before a free block and then fails to map the next one, and the
    /// request then dies (torch 2.4's targeted release asserts on an
    /// expandable block, GitHub #119452): the pages stay mapped, a free
    /// block merged with its free neighbours, and the `segment_map` is the
    /// only entry the request leaves. `Ok(false)` when the device has no
    /// memory for them; an error when no unmapped block starts at `addr`
    /// or `size` is not within it.
    pub fn map_left_by_failed_request(&mut self, addr: DeviceAddr, size: u64, stream: StreamId) -> Result<bool, Error> {
        self.settle_parked();
        let found = self.pools.iter().find_map(|p| p.unmapped.get(&(stream, addr.0)).copied());
        let Some(id) = found.filter(|&id| size > 0 && size <= self.blocks[id].size) else {
            return Err(Error::Device(DeviceError::Other {
                call: "map_left_by_failed_request",
                message: format!("no unmapped block of {size} bytes or more starts at {addr} on stream {}", stream.0),
            }));
        };
        self.map_block(id, size, &None)
    }

    /// Maps the pages under the first `size` bytes of the unmapped block `id`;
    /// the mapped part becomes a free block merged with free neighbours.
    fn map_block(&mut self, id: BlockId, size: u64, context: &Option<Frames>) -> Result<bool, Error> {
        let (addr, block_size, seg_id, stream, pool) = {
            let b = &self.blocks[id];
            debug_assert!(!b.mapped && size <= b.size);
            (b.addr, b.size, b.expandable.expect("unmapped blocks are expandable"), b.stream, b.pool)
        };
        let seg = self.expandable_segments[seg_id.index()].as_ref().expect("live segment");
        let (begin, end) = seg.pages_covering(addr, size);
        debug_assert_eq!(seg.page_addr(begin), addr);
        let mapped_addr = seg.page_addr(begin);
        let mapped_size = (end - begin) * seg.page_size;
        let page = seg.page_size;
        match self.device.map(DeviceAddr(mapped_addr), mapped_size, page) {
            Ok(()) => {}
            Err(DeviceError::OutOfMemory { .. }) => return Ok(false),
            Err(other) => return Err(Error::Device(other)),
        }
        self.pools[pool.0 as usize].unmapped.remove(&(stream, addr));
        self.blocks[id].mapped = true;
        if mapped_size < block_size {
            let next = self.blocks[id].next;
            let registration_counter = self.register_split(self.blocks[id].registration_counter);
            let rest = self.blocks.insert(Block {
                prev: Some(id),
                next,
                expandable: Some(seg_id),
                mapped: false,
                registration_counter,
                ..Block::new(addr + mapped_size, block_size - mapped_size, stream, pool)
            });
            if let Some(n) = next {
                self.blocks[n].prev = Some(rest);
            }
            self.blocks[id].next = Some(rest);
            self.blocks[id].size = mapped_size;
            self.pools[pool.0 as usize].unmapped.insert((stream, addr + mapped_size), rest);
        }
        self.merge_and_pool(id);
        self.total_allocated_memory += mapped_size;
        let kind = self.pools[pool.0 as usize].kind;
        self.stats.account_map(kind, mapped_size);
        let frames = self.trace_frames(context, ContextLevel::Alloc);
        self.record_trace(TraceAction::SegmentMap, mapped_addr, mapped_size, stream, frames);
        let keep_context = self.history.as_ref().is_some_and(|h| h.config.context >= ContextLevel::State);
        let b = &mut self.blocks[id];
        if b.prev.is_none() && b.context_when_segment_allocated().is_none() && keep_context {
            b.set_context_when_segment_allocated(context.clone());
        }
        Ok(true)
    }

    /// 6.4: unmaps the whole pages inside the free block `id` (which is in
    /// its pool's free set), leaving free mapped parts before and after.
    pub(crate) fn unmap_block(&mut self, id: BlockId, context: &Option<Frames>) {
        let (addr, size, seg_id, stream, pool, from) = {
            let b = &self.blocks[id];
            (b.addr, b.size, b.expandable.expect("expandable"), b.stream, b.pool, b.registration_counter)
        };
        let seg = self.expandable_segments[seg_id.index()].as_ref().expect("live segment");
        let (begin, end) = seg.pages_inside(addr, size);
        if begin >= end {
            return;
        }
        let unmapped_addr = seg.page_addr(begin);
        let unmapped_size = (end - begin) * seg.page_size;
        self.remove_from_pool(id);
        let before_size = unmapped_addr - addr;
        let after_size = size - before_size - unmapped_size;
        let free_part = |a: u64, s: u64, prev, next, registration_counter| Block {
            prev,
            next,
            expandable: Some(seg_id),
            registration_counter,
            ..Block::new(a, s, stream, pool)
        };
        if before_size > 0 {
            let prev = self.blocks[id].prev;
            let counter = self.register_split(from);
            let before = self.blocks.insert(free_part(addr, before_size, prev, Some(id), counter));
            if let Some(p) = prev {
                self.blocks[p].next = Some(before);
            }
            self.blocks[id].prev = Some(before);
            self.insert_into_pool(before);
        }
        if after_size > 0 {
            let next = self.blocks[id].next;
            let counter = self.register_split(from);
            let after = self.blocks.insert(free_part(unmapped_addr + unmapped_size, after_size, Some(id), next, counter));
            if let Some(n) = next {
                self.blocks[n].prev = Some(after);
            }
            self.blocks[id].next = Some(after);
            self.insert_into_pool(after);
        }
        self.device.unmap(DeviceAddr(unmapped_addr), unmapped_size);
        let b = &mut self.blocks[id];
        b.addr = unmapped_addr;
        b.size = unmapped_size;
        b.mapped = false;
        self.merge_and_pool(id);
        self.total_allocated_memory -= unmapped_size;
        let kind = self.pools[pool.0 as usize].kind;
        self.stats.account_unmap(kind, unmapped_size);
        let frames = self.trace_frames(context, ContextLevel::Alloc);
        self.record_trace(TraceAction::SegmentUnmap, unmapped_addr, unmapped_size, stream, frames);
    }

    /// Frees the reservation of a segment whose one block is all unmapped.
    pub(crate) fn release_expandable_segment(&mut self, id: BlockId) {
        let b = self.blocks.remove(id);
        debug_assert!(!b.mapped && !b.is_split());
        let seg_id = b.expandable.expect("expandable");
        let seg = self.expandable_segments[seg_id.index()].take().expect("live segment");
        debug_assert_eq!(seg.size, b.size);
        self.pools[b.pool.0 as usize].unmapped.remove(&(b.stream, b.addr));
        self.device.release_address_range(DeviceAddr(seg.base), seg.size);
    }

    /// The reservation an expandable block lies in.
    pub(crate) fn expandable_segment(&self, id: ExpandableId) -> &ExpandableSegment {
        self.expandable_segments[id.index()].as_ref().expect("live segment")
    }

    /// Live expandable segments.
    pub(crate) fn live_expandable_segments(&self) -> impl Iterator<Item = (ExpandableId, &ExpandableSegment)> {
        self.expandable_segments.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (ExpandableId::at(i), s)))
    }

}

//! Private pools (spec section 2.4): CUDA-graph pools and `torch.cuda.MemPool`.
//!
//! A private pool has its own small and large free sets. While an
//! "allocate to pool" is active, requests whose stream matches its filter go
//! to it. Its memory never serves the default pools. When its users are
//! gone (`release_pool` brought its use count to 0) it becomes freeable:
//! `empty_cache` then frees its whole segments and drops it once it has none.

use super::CachingAllocator;
use crate::block::PoolIdx;
use crate::device::{Device, StreamId};
use crate::error::PoolError;
use crate::pool::BlockPool;
use crate::rounding::PoolKind;
use crate::snapshot::MempoolId;

/// Which requests an active "allocate to pool" captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFilter {
    /// Requests on this stream (a capturing stream).
    Stream(StreamId),
    /// Every request (`torch.cuda.use_mem_pool` on the current thread).
    All,
}

impl StreamFilter {
    fn matches(self, stream: StreamId) -> bool {
        match self {
            StreamFilter::Stream(s) => s == stream,
            StreamFilter::All => true,
        }
    }
}

/// One private pool.
#[derive(Clone, Debug)]
pub(crate) struct PrivatePool {
    pub small: PoolIdx,
    pub large: PoolIdx,
    /// Users: graphs or MemPool objects holding it. Freeable at 0.
    pub use_count: u32,
}

impl<D: Device> CachingAllocator<D> {
    /// Makes a private pool, or adds a user to an existing one
    /// (PyTorch's `create_or_incref_pool`).
    pub fn create_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        self.settle_parked();
        if id == (0, 0) {
            return Err(PoolError::DefaultId);
        }
        if let Some(p) = self.private_pools.get_mut(&id) {
            p.use_count += 1;
            self.freeable_pools.retain(|&f| f != id);
            return Ok(());
        }
        let small = PoolIdx(self.pools.len() as u16);
        self.pools.push(BlockPool::new(PoolKind::Small, id));
        let large = PoolIdx(self.pools.len() as u16);
        self.pools.push(BlockPool::new(PoolKind::Large, id));
        self.private_pools.insert(id, PrivatePool { small, large, use_count: 1 });
        Ok(())
    }

    /// `beginAllocateToPool`: from now on, requests matching `filter` are
    /// served from private pool `id` (made if needed, with one more user).
    pub fn begin_allocate_to_pool(&mut self, id: MempoolId, filter: StreamFilter) -> Result<(), PoolError> {
        self.settle_parked();
        if self.captures_underway.iter().any(|(c, _)| *c == id) {
            return Err(PoolError::AlreadyAllocating { id });
        }
        self.create_pool(id)?;
        self.captures_underway.push((id, filter));
        Ok(())
    }

    /// `endAllocateToPool`: stop routing requests to `id`.
    pub fn end_allocate_to_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        self.settle_parked();
        let at = self.captures_underway.iter().position(|(c, _)| *c == id).ok_or(PoolError::NotActive { id, what: "being allocated to" })?;
        self.captures_underway.remove(at);
        Ok(())
    }

    /// `releasePool`: one user less; at none the pool's cached segments are
    /// freed by the next `empty_cache` (or last-retry release).
    pub fn release_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        self.settle_parked();
        let p = self.private_pools.get_mut(&id).ok_or(PoolError::NotActive { id, what: "a live pool" })?;
        if p.use_count == 0 {
            return Err(PoolError::NotActive { id, what: "in use" });
        }
        p.use_count -= 1;
        if p.use_count == 0 {
            self.freeable_pools.push(id);
        }
        Ok(())
    }

    /// A request served from private pool `id` (made with one user if it
    /// does not exist), as when a capture routes this one request there:
    /// for replays, which know where an allocation went but not when the
    /// capture began and ended. The pool's users do not change.
    pub fn malloc_in_pool(&mut self, size: u64, stream: StreamId, id: MempoolId) -> Result<crate::device::DeviceAddr, crate::Error> {
        if !self.private_pools.contains_key(&id) {
            self.create_pool(id)?;
        }
        self.captures_underway.push((id, StreamFilter::All));
        let result = self.malloc(size, stream);
        self.captures_underway.retain(|(c, f)| !(*c == id && *f == StreamFilter::All));
        result
    }

    /// The parameters of a request served from private pool `id` (`None`:
    /// routed as now); `None` when that pool does not exist.
    pub(crate) fn alloc_params_in(&self, size: u64, stream: StreamId, id: Option<MempoolId>) -> Option<super::malloc::AllocParams> {
        let mut params = self.alloc_params(size, stream);
        if let Some(id) = id {
            let p = self.private_pools.get(&id)?;
            params.pool = match PoolKind::for_size(params.size) {
                PoolKind::Small => p.small,
                PoolKind::Large => p.large,
            };
        }
        Some(params)
    }

    /// Every user of private pool `id` has released it: from now on
    /// `empty_cache` frees its whole segments. For replays, which see that
    /// only when a release frees one of them. No-op for an unknown or
    /// already freeable pool.
    pub fn release_pool_entirely(&mut self, id: MempoolId) {
        self.settle_parked();
        if let Some(p) = self.private_pools.get_mut(&id) {
            if p.use_count > 0 {
                p.use_count = 0;
                self.freeable_pools.push(id);
            }
        }
    }

    /// Whether the steps a CUDA-graph capture forbids are skipped now:
    /// while any allocate-to-pool is active, or from torch 2.13 only while
    /// the device says the current stream is capturing.
    #[inline]
    pub(crate) fn capture_underway(&self) -> bool {
        !self.captures_underway.is_empty()
            && (!self.config.compat.capture_guards_ask_the_stream || self.device.is_capturing())
    }

    /// Ids of the live private pools.
    pub fn private_pool_ids(&self) -> Vec<MempoolId> {
        self.private_pools.keys().copied().collect()
    }

    /// The pool a request goes to: the first matching active private pool
    /// (most recent first in R26, first registered in R24), else the default.
    #[inline]
    pub(crate) fn route(&self, kind: PoolKind, stream: StreamId) -> Option<PoolIdx> {
        if self.captures_underway.is_empty() {
            return None;
        }
        let pick = |(id, filter): &(MempoolId, StreamFilter)| filter.matches(stream).then_some(*id);
        let id = if self.config.compat.private_pool_first_registered {
            self.captures_underway.iter().find_map(pick)
        } else {
            self.captures_underway.iter().rev().find_map(pick)
        }?;
        let p = &self.private_pools[&id];
        Some(match kind {
            PoolKind::Small => p.small,
            PoolKind::Large => p.large,
        })
    }

    /// Releases the whole segments of freeable private pools (small, then
    /// large) and drops those left with no segments.
    pub(crate) fn release_freeable_pools(&mut self, context: &Option<crate::snapshot::Frames>) {
        let freeable = std::mem::take(&mut self.freeable_pools);
        for id in freeable {
            let p = self.private_pools[&id].clone();
            self.release_blocks(p.small, context);
            self.release_blocks(p.large, context);
            let has_segments = self.blocks.iter().any(|(_, b)| b.pool == p.small || b.pool == p.large);
            if has_segments {
                self.freeable_pools.push(id);
            } else {
                self.private_pools.remove(&id);
                // The pools' slots stay (indices are stable); they are empty.
            }
        }
    }

    /// Free bytes cached in private pools (the OOM message's "private pools" figure).
    pub(crate) fn private_pool_free_bytes(&self) -> u64 {
        self.private_pools
            .values()
            .flat_map(|p| [p.small, p.large])
            .flat_map(|i| self.pools[i.0 as usize].blocks.iter())
            .map(|e| e.size)
            .sum()
    }
}

//! The OOM diagnosis: measure the free cache, and retry the failed request
//! on a copy of the allocator's state under other settings.

use super::malloc::AllocParams;
use super::CachingAllocator;
use crate::config::AllocatorConfig;
use crate::device::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};
use crate::oom::{OomDiagnosis, OutOfMemoryError};
use crate::snapshot::MempoolId;

/// A stand-in device for what-if runs: it has the real device's free bytes
/// left, hands out fresh addresses above everything, and completes events at once.
#[derive(Clone, Debug)]
pub(crate) struct WhatIfDevice {
    free_bytes: u64,
    total_bytes: u64,
    next_address: u64,
}

impl WhatIfDevice {
    /// An empty device of `capacity` bytes, for tests.
    #[cfg(test)]
    pub(crate) fn with_capacity(capacity: u64) -> WhatIfDevice {
        WhatIfDevice { free_bytes: capacity, total_bytes: capacity, next_address: 1 << 40 }
    }

    /// One with `device`'s free and total bytes, handing out addresses from
    /// half the address space up.
    pub(crate) fn like(device: &impl Device) -> WhatIfDevice {
        let info = device.mem_get_info();
        WhatIfDevice { free_bytes: info.free_bytes, total_bytes: info.total_bytes, next_address: u64::MAX / 2 }
    }
}

impl Device for WhatIfDevice {
    fn malloc(&mut self, size_bytes: u64, _stream: StreamId) -> Result<DeviceAddr, DeviceError> {
        if size_bytes > self.free_bytes {
            return Err(DeviceError::OutOfMemory { requested_bytes: size_bytes });
        }
        self.free_bytes -= size_bytes;
        let addr = self.next_address;
        self.next_address += size_bytes.div_ceil(2 << 20) * (2 << 20);
        Ok(DeviceAddr(addr))
    }
    fn free(&mut self, _addr: DeviceAddr, size_bytes: u64) {
        self.free_bytes += size_bytes;
    }
    fn mem_get_info(&self) -> MemInfo {
        MemInfo { free_bytes: self.free_bytes, total_bytes: self.total_bytes }
    }
    fn record_event(&mut self, _stream: StreamId) -> EventId {
        EventId(0)
    }
    fn query_event(&mut self, _event: EventId) -> bool {
        true
    }
    fn synchronize_event(&mut self, _event: EventId) {}
    fn destroy_event(&mut self, _event: EventId) {}
}

/// What [`CachingAllocator::after_empty_cache`] sees.
#[derive(Debug)]
pub struct AfterEmptyCache {
    copy: CachingAllocator<WhatIfDevice>,
    released: Vec<(crate::snapshot::TraceAction, u64, u64)>,
}

impl AfterEmptyCache {
    /// What `empty_cache()` would release, in order: (action, address,
    /// bytes) of each `segment_free` and `segment_unmap`.
    pub fn released(&self) -> &[(crate::snapshot::TraceAction, u64, u64)] {
        &self.released
    }

    /// Would `malloc(size, stream)` then be served from the cache?
    pub fn fits_in_cache(&self, size: u64, stream: StreamId) -> bool {
        self.copy.fits_in_cache(size, stream)
    }

    /// The address the cache would then serve `malloc(size, stream)` at;
    /// `None` when it would need the device.
    pub fn cache_address(&self, size: u64, stream: StreamId) -> Option<DeviceAddr> {
        self.cache_address_in(size, stream, None)
    }

    /// [`cache_address`](Self::cache_address) for a request served from
    /// private pool `pool` (`None`: routed as now), as when a capture
    /// routes it there. A pool that does not exist caches nothing.
    pub fn cache_address_in(&self, size: u64, stream: StreamId, pool: Option<MempoolId>) -> Option<DeviceAddr> {
        let params = self.copy.alloc_params_in(size, stream, pool)?;
        self.copy.find_free_block(&params).map(|found| DeviceAddr(found.addr))
    }

    /// [`fits_in_cache`](Self::fits_in_cache) for a request served from
    /// private pool `pool` (`None`: routed as now).
    pub fn fits_in_cache_in(&self, size: u64, stream: StreamId, pool: Option<MempoolId>) -> bool {
        self.cache_address_in(size, stream, pool).is_some()
    }
}

impl<D: Device> CachingAllocator<D> {
    /// A copy of every block, pool and statistic, on another device, with
    /// a parked free's merge done.
    pub(crate) fn clone_state_onto<E: Device>(&self, device: E) -> CachingAllocator<E> {
        let mut copy = CachingAllocator {
            device,
            device_index: self.device_index,
            config: self.config.clone(),
            blocks: self.blocks.clone(),
            pools: self.pools.clone(),
            allocated: self.allocated.clone(),
            held: self.held.clone(),
            cuda_events: self.cuda_events.clone(),
            stats: self.stats,
            total_allocated_memory: self.total_allocated_memory,
            set_fraction: self.set_fraction,
            allowed_memory_maximum: self.allowed_memory_maximum,
            history: None,
            max_split_size_changed: self.max_split_size_changed,
            next_registration_counter: self.next_registration_counter,
            expandable_segments: self.expandable_segments.clone(),
            private_pools: self.private_pools.clone(),
            freeable_pools: self.freeable_pools.clone(),
            captures_underway: self.captures_underway.clone(),
            deferred_frees: self.deferred_frees.clone(),
            parked: self.parked,
            split_memo: self.split_memo,
            repeat: None,
            parking: self.parking,
            last_rounding: self.last_rounding,
            max_split_watch: super::max_split_watch::MaxSplitWatch::default(),
        };
        copy.settle_parked();
        copy
    }

    /// Would `malloc(size, stream)` succeed from the current state under `config`?
    /// The allocator itself is not changed.
    pub fn would_fit_with(&self, size: u64, stream: StreamId, config: &AllocatorConfig) -> bool {
        let info = self.device.mem_get_info();
        let top = self.blocks.iter().map(|(_, b)| b.addr + b.size).max().unwrap_or(0);
        let device = WhatIfDevice {
            free_bytes: info.free_bytes,
            total_bytes: info.total_bytes,
            next_address: (top + (2 << 20)).next_multiple_of(2 << 20),
        };
        let mut copy = self.clone_state_onto(device);
        if copy.set_config(config.clone()).is_err() {
            return false;
        }
        copy.malloc_impl(size, stream, None).is_ok()
    }

    /// Would `malloc(size, stream)` succeed at its first attempt, before the
    /// retry ladder (the cache, garbage collection, then the device asked
    /// once), on a copy of this allocator and its device? The allocator
    /// itself is not changed.
    pub fn first_attempt_fits(&self, size: u64, stream: StreamId) -> bool
    where
        D: Clone,
    {
        self.first_attempt_fits_in(size, stream, None)
    }

    /// [`first_attempt_fits`](Self::first_attempt_fits) for a request served
    /// from private pool `pool` (`None`: routed as now), as
    /// [`malloc_in_pool`](Self::malloc_in_pool) serves it: the pool is made
    /// if it does not exist, and an allocation to it is underway (which
    /// skips processing events where the release does).
    pub fn first_attempt_fits_in(&self, size: u64, stream: StreamId, pool: Option<MempoolId>) -> bool
    where
        D: Clone,
    {
        let mut copy = self.clone_state_onto(self.device.clone());
        copy.history = None;
        if let Some(id) = pool {
            if !copy.private_pools.contains_key(&id) && copy.create_pool(id).is_err() {
                return false;
            }
            copy.captures_underway.push((id, crate::StreamFilter::All));
        }
        let context = None;
        if !copy.capture_underway() {
            copy.process_events_impl(&context);
        }
        let mut params = copy.alloc_params(size, stream);
        if copy.get_free_block(&mut params) {
            return true;
        }
        if copy.gc_active() {
            copy.garbage_collect_cached_blocks(&context);
        }
        copy.alloc_block(&mut params, false, &context).unwrap_or(false)
    }

    /// The address `malloc(size, stream)` would return now, retry ladder and
    /// all, after an `empty_cache()` call first when `empty_cache_first`,
    /// on a copy of this allocator and its device; `None` when it would run
    /// out of memory. The allocator itself is not changed.
    pub fn malloc_address(&self, size: u64, stream: StreamId, empty_cache_first: bool) -> Option<DeviceAddr>
    where
        D: Clone,
    {
        self.malloc_address_in(size, stream, empty_cache_first, None)
    }

    /// [`malloc_address`](Self::malloc_address) for a request served from
    /// private pool `pool` (`None`: routed as now), as
    /// [`malloc_in_pool`](Self::malloc_in_pool) serves it; the
    /// `empty_cache()` call comes before the allocation to the pool begins.
    pub fn malloc_address_in(&self, size: u64, stream: StreamId, empty_cache_first: bool, pool: Option<MempoolId>) -> Option<DeviceAddr>
    where
        D: Clone,
    {
        let mut copy = self.clone_state_onto(self.device.clone());
        copy.history = None;
        if empty_cache_first {
            copy.release_cached_blocks(None);
        }
        match pool {
            Some(id) => copy.malloc_in_pool(size, stream, id).ok(),
            None => copy.malloc_impl(size, stream, None).ok().map(DeviceAddr),
        }
    }

    /// Would `malloc(size, stream)` be served from the cache if the block
    /// allocated at `ptr` were freed first (merging with its free
    /// neighbours)? `false` when `ptr` is not allocated. Changes nothing.
    pub fn fits_in_cache_after_free(&self, ptr: DeviceAddr, size: u64, stream: StreamId) -> bool {
        self.fits_in_cache_after_free_in(ptr, size, stream, None)
    }

    /// [`fits_in_cache_after_free`](Self::fits_in_cache_after_free) for a
    /// request served from private pool `pool` (`None`: where it would be
    /// routed now), as when a capture routes it there. A pool that does not
    /// exist yet caches nothing.
    pub fn fits_in_cache_after_free_in(&self, ptr: DeviceAddr, size: u64, stream: StreamId, pool: Option<MempoolId>) -> bool {
        let Some(id) = self.allocated_block(ptr) else { return false };
        let Some(params) = self.alloc_params_in(size, stream, pool) else { return false };
        let block = &self.blocks[id];
        // A block on another stream or in another pool is never a candidate,
        // so freeing it changes nothing: no copy needed.
        if block.stream != stream || block.pool != params.pool {
            return self.find_free_block(&params).is_some();
        }
        let mut copy = self.clone_state_onto(WhatIfDevice::like(&self.device));
        copy.free(ptr).is_ok() && copy.find_free_block(&params).is_some()
    }

    /// The allocator as `empty_cache()` would leave it now (its
    /// synchronisation frees blocks still waiting on events), and what it
    /// would release. The allocator itself is not changed.
    pub fn after_empty_cache(&self) -> AfterEmptyCache {
        let mut copy = self.clone_state_onto(WhatIfDevice::like(&self.device));
        copy.history = Some(crate::history::History::new(crate::history::HistoryConfig {
            record_trace: true,
            max_entries: usize::MAX,
            context: crate::history::ContextLevel::Never,
        }));
        copy.release_cached_blocks(None);
        let history = copy.history.take().expect("set above");
        let released = history
            .entries()
            .filter(|e| matches!(e.action, crate::snapshot::TraceAction::SegmentFree | crate::snapshot::TraceAction::SegmentUnmap))
            .map(|e| (e.action, e.addr, e.size))
            .collect();
        AfterEmptyCache { copy, released }
    }

    /// The settings worth trying for a failed request, as (conf string, config).
    fn candidate_fixes(&self) -> Vec<(String, AllocatorConfig)> {
        let mut out = Vec::new();
        let base = &self.config;
        if self.set_fraction {
            let mut c = base.clone();
            c.per_process_memory_fraction = 1.0;
            c.compat.fraction_limit_when_ever_set = false;
            out.push(("per_process_memory_fraction:1.0".to_string(), c));
        }
        if base.roundup_power2_divisions.iter().any(|&d| d > 1) {
            let mut c = base.clone();
            c.roundup_power2_divisions = [0; crate::rounding::ROUNDUP_INTERVALS];
            out.push(("roundup_power2_divisions:[>:0] (no power-of-two rounding)".to_string(), c));
        }
        if base.max_split_size_bytes.is_some() {
            let mut c = base.clone();
            c.max_split_size_bytes = None;
            out.push(("max_split_size_mb unset".to_string(), c));
        }
        out
    }

    /// Builds the error for a request that the retry ladder could not serve.
    pub(crate) fn oom_error(&self, params: &AllocParams, info: MemInfo) -> OutOfMemoryError {
        let pool = &self.pools[params.pool.0 as usize];
        let (mut free_bytes, mut free_blocks, mut largest) = (0u64, 0u64, 0u64);
        for e in pool.blocks.iter().filter(|e| e.stream == params.stream) {
            free_bytes += e.size;
            free_blocks += 1;
            largest = largest.max(e.size);
        }
        let free_all: u64 = self.pools.iter().flat_map(|p| p.blocks.iter()).map(|e| e.size).sum();
        let pending: u64 = self
            .blocks
            .iter()
            .filter(|(_, b)| !b.allocated && b.is_active())
            .map(|(_, b)| b.size)
            .sum();
        let mut fits = Vec::new();
        let mut tried = Vec::new();
        for (name, config) in self.candidate_fixes() {
            if self.would_fit_with(params.orig_size, params.stream, &config) {
                fits.push(name);
            } else {
                tried.push(name);
            }
        }
        OutOfMemoryError {
            device: self.device_index,
            requested_bytes: params.orig_size,
            alloc_size_bytes: params.alloc_size,
            total_capacity_bytes: info.total_bytes,
            device_free_bytes: info.free_bytes,
            limit_bytes: self.memory_limit_bytes(),
            allocated_bytes: self.stats.current_bytes().allocated,
            reserved_bytes: self.stats.current_bytes().reserved,
            private_pool_free_bytes: self.private_pool_free_bytes(),
            process_memory_bytes: self.device.process_memory_bytes(),
            expandable_segments: self.expandable_active(),
            more_than_one_exabyte: false,
            diagnosis: Some(OomDiagnosis {
                rounded_size_bytes: params.size,
                free_cached_bytes: free_bytes,
                free_cached_blocks: free_blocks,
                largest_free_block_bytes: largest,
                free_cached_bytes_all_pools: free_all,
                pending_free_bytes: pending,
                fragmentation: free_bytes >= params.size && largest < params.size,
                settings_that_fit: fits,
                settings_tried: tried,
            }),
        }
    }
}

//! `CachingAllocator`: PyTorch's `DeviceCachingAllocator` for one device.
//!
//! The public operations live here; the algorithm is split by job:
//! `malloc.rs` (search, new segments, the retry ladder, splitting),
//! `free.rs` (free, merging, stream events), `parked.rs` (a free whose
//! merge waits for the next request, which may split it back), `release.rs` (returning
//! segments to the device: targeted release, `empty_cache`, garbage
//! collection), `snapshot.rs` (state export), `invariants.rs` (the checker),
//! `max_split_watch.rs` (would another `max_split_size_mb` have decided
//! otherwise?).

mod expandable;
mod free;
mod invariants;
mod malloc;
mod max_split_watch;
mod parked;
mod private_pool;
mod release;
mod restore;
mod snapshot;
mod temporary;
mod what_if;

pub use invariants::{set_invariant_checks, InvariantChecks, InvariantViolation, SAMPLED_BLOCKS};
pub use max_split_watch::MAX_WATCHED;
pub use private_pool::StreamFilter;
pub use restore::RestoreError;
pub use what_if::AfterEmptyCache;

use crate::addr_map::AddrMap;
use crate::block::{BlockArena, BlockId, PendingEvent, PoolIdx};
use crate::config::AllocatorConfig;
use crate::device::{Device, DeviceAddr, StreamId};
use crate::error::Error;
use crate::history::{History, HistoryConfig};
use crate::pool::BlockPool;
use crate::rounding::PoolKind;
use crate::snapshot::{Frames, MempoolId};
use crate::live_stats::{CurrentBytes, LiveStats};
use crate::stats::DeviceStats;
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hasher;

/// The default large pool's index.
pub(crate) const LARGE_POOL: PoolIdx = PoolIdx(0);
/// The default small pool's index.
pub(crate) const SMALL_POOL: PoolIdx = PoolIdx(1);

/// A caching allocator for one device, with PyTorch's semantics.
///
/// ```
/// use vramkit_core::{AllocatorConfig, CachingAllocator, StreamId};
/// use vramkit_sim::SimDevice;
///
/// let mut alloc = CachingAllocator::new(SimDevice::new(8 << 30), AllocatorConfig::pytorch_default());
/// let p = alloc.malloc(1000, StreamId(0)).unwrap();
/// alloc.free(p).unwrap();
/// assert_eq!(alloc.stats().reserved_bytes.all.current, 2 << 20); // cached, not returned
/// alloc.empty_cache();
/// assert_eq!(alloc.stats().reserved_bytes.all.current, 0);
/// ```
#[derive(Debug)]
pub struct CachingAllocator<D: Device> {
    pub(crate) device: D,
    pub(crate) device_index: i64,
    pub(crate) config: AllocatorConfig,
    pub(crate) blocks: BlockArena,
    /// Index 0: default large pool, 1: default small pool; private pools after.
    pub(crate) pools: Vec<BlockPool>,
    /// Allocated blocks by address (PyTorch's `allocated_blocks`).
    pub(crate) allocated: AddrMap<BlockId>,
    /// Blocks freed with `free_requested`, waiting for `free_completed`.
    pub(crate) held: AddrMap<BlockId>,
    /// Pending `record_stream` events per stream, oldest first. Streams are
    /// walked from the highest handle down. PyTorch walks them in the order
    /// of its hash map of c10 stream ids, which a device handle does not
    /// give; for the first two pool streams a program takes (PyTorch's
    /// harness, measured) that is the later one first, and their handles
    /// grow. Only the peaks of `inactive_split` can tell the orders apart.
    pub(crate) cuda_events: BTreeMap<StreamId, VecDeque<PendingEvent>>,
    pub(crate) stats: LiveStats,
    /// Bytes of all segments and mapped pages of this device, all pools.
    pub(crate) total_allocated_memory: u64,
    /// A fraction limit is in effect (PyTorch's `set_fraction`).
    pub(crate) set_fraction: bool,
    /// The limit in bytes when `set_fraction`.
    pub(crate) allowed_memory_maximum: u64,
    pub(crate) history: Option<History>,
    /// Live private pools by id.
    pub(crate) private_pools: BTreeMap<MempoolId, private_pool::PrivatePool>,
    /// Private pools with no users left, whose segments `empty_cache` frees.
    pub(crate) freeable_pools: Vec<MempoolId>,
    /// Blocks freed with stream uses during a capture; their events are
    /// recorded once no capture is underway.
    pub(crate) deferred_frees: Vec<BlockId>,
    /// Active "allocate to pool" routings, oldest first.
    pub(crate) captures_underway: Vec<(MempoolId, StreamFilter)>,
    /// Expandable segments by id; `None` once released.
    pub(crate) expandable_segments: Vec<Option<expandable::ExpandableSegment>>,
    /// `max_split_size` has been changed since construction, so the oversize
    /// counters mix thresholds (as in PyTorch) and cannot be recomputed.
    pub(crate) max_split_size_changed: bool,
    /// The registration counter the next segment gets.
    pub(crate) next_registration_counter: u32,
    /// A free whose merge is put off (`parked.rs`); every operation but
    /// `malloc`, `free` and the readers that know about it does the merge first.
    pub(crate) parked: Option<parked::Parked>,
    /// The last split best fit chose, while its pool's free set is as the
    /// split left it (`parked.rs`).
    pub(crate) split_memo: Option<parked::SplitMemo>,
    /// The last parked free and its taking back, while nothing else has
    /// happened since (`parked.rs`, "Repeats").
    pub(crate) repeat: Option<parked::Repeat>,
    /// Whether frees may be parked (always, but for the tests that compare
    /// against the allocator without it).
    pub(crate) parking: bool,
    /// The last size `malloc` rounded and what it rounded to
    /// (`NO_ROUNDING` when none, or the settings changed since).
    pub(crate) last_rounding: (u64, u64),
    /// Other `max_split_size_mb` values watched (`max_split_watch.rs`).
    pub(crate) max_split_watch: max_split_watch::MaxSplitWatch,
}

/// `last_rounding` when there is none: a size no request reaches rounding with.
pub(crate) const NO_ROUNDING: (u64, u64) = (u64::MAX, 0);

/// A fast hasher for 512-byte-aligned addresses.
#[derive(Default, Clone, Copy, Debug)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (x >> 9).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl<D: Device> CachingAllocator<D> {
    /// An allocator for `device` with `config`, as PyTorch constructs one on
    /// first use of a device: `max_split_size` is captured for the stats and
    /// `per_process_memory_fraction` is applied.
    pub fn new(device: D, config: AllocatorConfig) -> Self {
        let mut allocator = CachingAllocator {
            device,
            device_index: 0,
            stats: LiveStats::new(config.max_split_size_bytes.map_or(-1, |b| b as i64)),
            pools: vec![BlockPool::new(PoolKind::Large, (0, 0)), BlockPool::new(PoolKind::Small, (0, 0))],
            config,
            blocks: BlockArena::default(),
            allocated: AddrMap::default(),
            held: AddrMap::default(),
            cuda_events: BTreeMap::new(),
            total_allocated_memory: 0,
            set_fraction: false,
            allowed_memory_maximum: 0,
            history: None,
            max_split_size_changed: false,
            next_registration_counter: 0,
            expandable_segments: Vec::new(),
            private_pools: BTreeMap::new(),
            freeable_pools: Vec::new(),
            captures_underway: Vec::new(),
            deferred_frees: Vec::new(),
            parked: None,
            split_memo: None,
            repeat: None,
            parking: true,
            last_rounding: NO_ROUNDING,
            max_split_watch: max_split_watch::MaxSplitWatch::default(),
        };
        if allocator.config.per_process_memory_fraction < 1.0 {
            allocator.apply_memory_fraction(allocator.config.per_process_memory_fraction);
        }
        allocator
    }

    /// The registration counter of a new segment's block (a `cudaMalloc`
    /// or an expandable reservation): creation order where the release
    /// breaks size ties by age, else 0 for every block (address order).
    pub(crate) fn register_segment(&mut self) -> u32 {
        if self.config.compat.size_ties == crate::config::SizeTies::Address {
            return 0;
        }
        let counter = self.next_registration_counter;
        self.next_registration_counter = counter.wrapping_add(1);
        counter
    }

    /// The registration counter of a block split off `from` (the allocated
    /// part of a split, the parts a map or an unmap leaves): a new one under
    /// torch 2.12's block-age rule, else `from`'s.
    pub(crate) fn register_split(&mut self, from: u32) -> u32 {
        if self.config.compat.size_ties == crate::config::SizeTies::BlockAge {
            self.register_segment()
        } else {
            from
        }
    }

    /// Sets the device index shown in snapshots, summaries and OOM messages.
    pub fn with_device_index(mut self, index: i64) -> Self {
        self.device_index = index;
        self
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably (tests use it to complete events or inject failures).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The current settings.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The statistics (`torch.cuda.memory_stats()` as a struct), worked
    /// out from the counts the allocator keeps: call it once and read the
    /// figures from the value, not once per figure.
    pub fn stats(&self) -> DeviceStats {
        self.stats.view()
    }

    /// `allocated_bytes`, `reserved_bytes` and `requested_bytes` now (the
    /// aggregates' `current`): what a replay samples after every entry,
    /// without the rest of [`stats`](Self::stats).
    #[inline]
    pub fn current_bytes(&self) -> CurrentBytes {
        self.stats.current_bytes()
    }

    /// `reserved_bytes.all.peak`, and `num_device_alloc + num_device_free`:
    /// what a replay checks as it goes, without the rest of [`stats`](Self::stats).
    #[inline]
    pub fn peak_reserved_and_device_calls(&self) -> (u64, u64) {
        (self.stats.peak_reserved_bytes() as u64, self.stats.device_calls() as u64)
    }

    /// `torch.cuda.memory_stats()`: every key, sorted.
    pub fn memory_stats(&self) -> BTreeMap<String, i64> {
        self.stats().to_map()
    }

    /// `torch.cuda.memory_summary()`: PyTorch's table (2.x layout).
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        crate::summary::memory_summary(&self.stats(), self.device_index, abbreviated, crate::summary::SummaryLayout::default())
    }

    /// Bytes of all segments and mapped pages (PyTorch's `total_allocated_memory`).
    pub fn total_reserved_bytes(&self) -> u64 {
        self.total_allocated_memory
    }

    /// `malloc` with no stack context. A zero-byte request returns the null
    /// address and changes nothing, as PyTorch's front end does.
    #[inline]
    pub fn malloc(&mut self, size: u64, stream: StreamId) -> Result<DeviceAddr, Error> {
        self.malloc_with_context(size, stream, None)
    }

    /// `malloc`, remembering `context` (the caller's stack) for snapshots and history.
    /// Inlined up to the parked free it may take back (the search is out
    /// of line): the cache-hit pair then makes no call.
    #[inline(always)]
    pub fn malloc_with_context(
        &mut self,
        size: u64,
        stream: StreamId,
        context: Option<Frames>,
    ) -> Result<DeviceAddr, Error> {
        if size == 0 {
            return Ok(DeviceAddr(0));
        }
        let result = self.malloc_impl(size, stream, context).map(DeviceAddr);
        self.validate();
        result
    }

    /// `free` of an address `malloc` returned. Freeing the null address does nothing.
    #[inline]
    pub fn free(&mut self, ptr: DeviceAddr) -> Result<(), Error> {
        self.free_with_context(ptr, None)
    }

    /// `free`, with the stack of the free site for history at context level `All`.
    #[inline]
    pub fn free_with_context(&mut self, ptr: DeviceAddr, context: Option<Frames>) -> Result<(), Error> {
        self.free_inner(ptr, context).map(|_| ())
    }

    /// `free`, returning the size `malloc` was asked for (0 for the null
    /// address): what a front end compares with the size its caller passes
    /// back, without a second lookup.
    #[inline]
    pub fn free_returning_requested_size(&mut self, ptr: DeviceAddr) -> Result<u64, Error> {
        self.free_inner(ptr, None)
    }

    #[inline(always)]
    fn free_inner(&mut self, ptr: DeviceAddr, context: Option<Frames>) -> Result<u64, Error> {
        if ptr.0 == 0 {
            return Ok(0);
        }
        if let Some(requested) = self.free_again(ptr.0) {
            self.validate();
            return Ok(requested);
        }
        // The state a parked free stands for is the merged one: settling
        // it first changes nothing a caller can see, even if this free
        // fails, and the slot found below stays where it is.
        self.settle_parked();
        let unknown = || Error::UnknownPointer { addr: ptr };
        let slot = self.allocated.find(ptr.0).ok_or_else(unknown)?;
        let id = self.allocated.at(slot);
        // With the parked free settled, every block in the map is
        // allocated; a freed one found here would be a double free.
        if !self.blocks[id].allocated {
            return Err(unknown());
        }
        let requested = self.blocks[id].requested_size;
        self.free_impl(id, context);
        if self.parked.is_none_or(|p| p.block != id) {
            self.allocated.remove_found(slot);
        }
        self.validate();
        Ok(requested)
    }

    /// `Tensor.record_stream(stream)`: the block at `ptr` is also used on
    /// `stream`, so after it is freed it is not reused until the work queued
    /// on `stream` so far has completed. Uses on the block's own stream are ignored.
    pub fn record_stream(&mut self, ptr: DeviceAddr, stream: StreamId) -> Result<(), Error> {
        self.settle_parked();
        let id = self.allocated.get(ptr.0).ok_or(Error::UnknownPointer { addr: ptr })?;
        let in_capture = self.capture_underway();
        let block = &mut self.blocks[id];
        if block.stream != stream {
            let extras = block.extras_mut();
            if let Err(at) = extras.stream_uses.binary_search(&stream) {
                extras.stream_uses.insert(at, stream);
            }
            if in_capture && !extras.capture_stream_uses.contains(&stream) {
                extras.capture_stream_uses.push(stream);
            }
        }
        self.validate();
        Ok(())
    }

    /// `torch.cuda.empty_cache()`: wait for pending stream events, then give
    /// every wholly free segment back to the device.
    pub fn empty_cache(&mut self) {
        self.settle_parked();
        self.release_cached_blocks(None);
        self.validate();
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&mut self) {
        // A parked free taken back counts on the peaks staying where they
        // were at the free (`live_stats::Peak::Unchanged`).
        self.settle_parked();
        self.stats.reset_peak();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&mut self) {
        self.stats.reset_accumulated();
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`: cap this
    /// allocator's reserved bytes at `fraction` of the device's memory.
    pub fn set_memory_fraction(&mut self, fraction: f64) -> Result<(), Error> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidFraction { fraction });
        }
        self.settle_parked();
        self.config.per_process_memory_fraction = fraction;
        self.apply_memory_fraction(fraction);
        Ok(())
    }

    fn apply_memory_fraction(&mut self, fraction: f64) {
        let total = self.device.mem_get_info().total_bytes;
        self.allowed_memory_maximum = (fraction * total as f64) as u64;
        self.set_fraction = fraction < 1.0 || self.config.compat.fraction_limit_when_ever_set;
    }

    /// The fraction limit in bytes, when one is in effect.
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        self.set_fraction.then_some(self.allowed_memory_maximum)
    }

    /// Applies the keys a `PYTORCH_CUDA_ALLOC_CONF`-style string names and
    /// leaves the others as they are. `memory_stats()["max_split_size"]`
    /// keeps its construction-time value, as in PyTorch.
    pub fn update_settings(&mut self, conf: &str) -> Result<(), Error> {
        self.settle_parked();
        let fraction_before = self.config.per_process_memory_fraction;
        let max_split_before = self.config.max_split_size_bytes;
        self.last_rounding = NO_ROUNDING;
        self.config.update(conf)?;
        self.max_split_watch.note_all();
        self.max_split_size_changed |= self.config.max_split_size_bytes != max_split_before;
        if self.config.per_process_memory_fraction != fraction_before {
            self.apply_memory_fraction(self.config.per_process_memory_fraction);
        }
        Ok(())
    }

    /// Watches other `max_split_size_mb` values, in bytes (at most
    /// [`MAX_WATCHED`]), while this allocator runs with it unset: from now
    /// on every test of the limit notes those under which it would have
    /// answered otherwise (`max_split_watch.rs`). With a limit set, or
    /// once the settings change, every value counts as noted.
    pub fn watch_max_split_sizes(&mut self, limits: &[u64]) {
        self.max_split_watch = max_split_watch::MaxSplitWatch::new(limits);
        if self.config.max_split_size_bytes.is_some() {
            self.max_split_watch.note_all();
        }
    }

    /// The watched `max_split_size_mb` values under which no test of the
    /// limit would have answered otherwise since the watch began: from
    /// where it began, the allocator under such a limit makes the same
    /// device calls, hands out the same blocks at the same addresses and
    /// keeps every statistic alike but the oversize counts. What-if copies
    /// and queries made on them are not watched.
    pub fn max_split_sizes_alike(&self) -> Vec<u64> {
        self.max_split_watch.alike()
    }

    /// Replaces every setting at once (the fraction is re-applied).
    pub fn set_config(&mut self, config: AllocatorConfig) -> Result<(), Error> {
        config.validate()?;
        self.settle_parked();
        self.max_split_size_changed |= config.max_split_size_bytes != self.config.max_split_size_bytes;
        self.max_split_watch.note_all();
        self.config = config;
        self.last_rounding = NO_ROUNDING;
        self.apply_memory_fraction(self.config.per_process_memory_fraction);
        Ok(())
    }

    /// `max_split_size_mb` at run time, in bytes (`None`: unlimited).
    pub fn set_max_split_size(&mut self, bytes: Option<u64>) -> Result<(), Error> {
        let config = AllocatorConfig { max_split_size_bytes: bytes, ..self.config.clone() };
        self.set_config(config)
    }

    /// `garbage_collection_threshold` at run time (0 turns it off).
    pub fn set_garbage_collection_threshold(&mut self, threshold: f64) -> Result<(), Error> {
        let config = AllocatorConfig { garbage_collection_threshold: threshold, ..self.config.clone() };
        self.set_config(config)
    }

    /// `roundup_power2_divisions:N` at run time.
    pub fn set_roundup_power2_divisions(&mut self, divisions: u64) -> Result<(), Error> {
        let config = AllocatorConfig {
            roundup_power2_divisions: [divisions; crate::rounding::ROUNDUP_INTERVALS],
            ..self.config.clone()
        };
        self.set_config(config)
    }

    /// Starts (or with `None` stops and clears) history recording.
    pub fn record_history(&mut self, config: Option<HistoryConfig>) {
        self.settle_parked();
        self.history = config.map(History::new);
    }

    /// The rounded size of the block at `ptr`, if it is allocated here.
    pub fn block_size(&self, ptr: DeviceAddr) -> Option<u64> {
        self.allocated_block(ptr).map(|id| self.blocks[id].size)
    }

    /// The requested (unrounded) size of the block at `ptr`, if it is allocated here.
    pub fn requested_size(&self, ptr: DeviceAddr) -> Option<u64> {
        self.allocated_block(ptr).map(|id| self.blocks[id].requested_size)
    }

    /// The allocated block at `ptr`: in the address map, and not a parked
    /// free's block (which keeps its entry, `parked.rs`).
    pub(crate) fn allocated_block(&self, ptr: DeviceAddr) -> Option<BlockId> {
        self.allocated.get(ptr.0).filter(|&id| self.blocks[id].allocated)
    }

    /// Frees the blocks whose stream events have completed, as the start of
    /// every `malloc` does. Replays call it at the end of a trace.
    pub fn process_events(&mut self) {
        self.settle_parked();
        if !self.capture_underway() {
            self.process_events_impl(&None);
        }
        self.validate();
    }

    /// Number of allocated blocks.
    pub fn allocated_count(&self) -> usize {
        self.allocated.len() - usize::from(self.parked.is_some())
    }

    #[inline]
    pub(crate) fn record_trace(
        &mut self,
        action: crate::snapshot::TraceAction,
        addr: u64,
        size: u64,
        stream: StreamId,
        frames: Option<Frames>,
    ) {
        if let Some(history) = &mut self.history {
            let time_us = self.device.time_us();
            history.record(action, addr, size, stream.0, time_us, frames);
        }
    }

    /// Frames to keep on a trace entry, given the recording's context level.
    #[inline]
    pub(crate) fn trace_frames(&self, frames: &Option<Frames>, min: crate::history::ContextLevel) -> Option<Frames> {
        match &self.history {
            Some(h) if h.config.context >= min => frames.clone(),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn pool_id_of(&self, pool: PoolIdx) -> MempoolId {
        self.pools[pool.0 as usize].owner
    }

}

//! Statistics with the names and update points of `torch.cuda.memory_stats()`
//! (spec section 7).
//!
//! The counters are plain `Copy` data. The allocator changes them only
//! through the `account_*` methods at the bottom of this file, each called
//! from exactly one place in the allocator, so every update point of
//! PyTorch's has one line here.

use crate::rounding::PoolKind;
use std::collections::BTreeMap;

/// One statistic: PyTorch's `Stat`.
///
/// Invariant: `peak >= current` (until `reset_peak` sets them equal), and
/// without a `reset_accumulated`, `current == allocated - freed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stat {
    /// The value now.
    pub current: i64,
    /// The highest `current` since the last peak reset.
    pub peak: i64,
    /// Sum of all increases since the last accumulated reset.
    pub allocated: i64,
    /// Sum of all decreases since the last accumulated reset.
    pub freed: i64,
}

/// Whether an increase may set a new peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peak {
    /// Any increase.
    MayRise,
    /// An increase back to a value the stat had since its peak was last
    /// reset: the request right after a free taking the same block back
    /// (a parked free, `allocator/parked.rs`) returns the counts that free
    /// lowered to where they were, so there is no peak to compare with.
    Unchanged,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, amount: i64) {
        self.increase_with(amount, Peak::MayRise);
    }

    #[inline(always)]
    fn increase_with(&mut self, amount: i64, peak: Peak) {
        self.current += amount;
        self.allocated += amount;
        debug_assert!(peak == Peak::MayRise || self.current <= self.peak, "an increase past the peak it was said not to reach");
        // Past the first steps of a program a new peak is rare: a branch
        // the processor predicts, and no store, beats a conditional move.
        if peak == Peak::MayRise && self.current > self.peak {
            self.raise_peak();
        }
    }

    #[cold]
    #[inline(never)]
    fn raise_peak(&mut self) {
        self.peak = self.current;
    }

    #[inline]
    pub(crate) fn decrease(&mut self, amount: i64) {
        self.current -= amount;
        self.freed += amount;
    }

    /// Adds a signed change: an increase when positive, a decrease when negative.
    #[inline(always)]
    fn add(&mut self, delta: i64, peak: Peak) {
        if delta >= 0 {
            self.increase_with(delta, peak)
        } else {
            self.decrease(-delta)
        }
    }

    fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Which entry of a [`StatArray`] a value is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatType {
    /// The aggregate over both pools (`all`).
    Aggregate,
    /// `small_pool`.
    SmallPool,
    /// `large_pool`.
    LargePool,
}

impl StatType {
    /// The key part PyTorch uses: `all`, `small_pool`, `large_pool`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StatType::Aggregate => "all",
            StatType::SmallPool => "small_pool",
            StatType::LargePool => "large_pool",
        }
    }
}

/// A statistic kept for the aggregate and for each pool kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// The small pool (blocks <= 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    /// The entry for one stat type.
    pub fn get(&self, which: StatType) -> &Stat {
        match which {
            StatType::Aggregate => &self.all,
            StatType::SmallPool => &self.small_pool,
            StatType::LargePool => &self.large_pool,
        }
    }

    /// The entry for one stat type, mutably.
    pub fn get_mut(&mut self, which: StatType) -> &mut Stat {
        match which {
            StatType::Aggregate => &mut self.all,
            StatType::SmallPool => &mut self.small_pool,
            StatType::LargePool => &mut self.large_pool,
        }
    }

    /// The entry of a pool kind: one address computed from the kind, so
    /// that each update below is written (and compiled) once, not per kind.
    #[inline(always)]
    fn of_kind(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    /// Every update goes to the aggregate and to the block's pool kind.
    #[inline]
    fn add(&mut self, pool: PoolKind, delta: i64) {
        self.add_with(pool, delta, Peak::MayRise);
    }

    #[inline(always)]
    fn add_with(&mut self, pool: PoolKind, delta: i64, peak: Peak) {
        self.all.add(delta, peak);
        self.of_kind(pool).add(delta, peak);
    }

    /// An increase of the aggregate and the pool's entry.
    #[inline(always)]
    fn inc(&mut self, pool: PoolKind, amount: u64, peak: Peak) {
        let amount = amount as i64;
        self.all.increase_with(amount, peak);
        self.of_kind(pool).increase_with(amount, peak);
    }

    /// A decrease of the aggregate and the pool's entry.
    #[inline]
    fn dec(&mut self, pool: PoolKind, amount: u64) {
        let amount = amount as i64;
        self.all.decrease(amount);
        self.of_kind(pool).decrease(amount);
    }

    fn for_each(&mut self, f: impl Fn(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }
}

/// PyTorch's `DeviceStats`: every key of `torch.cuda.memory_stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    /// Blocks handed out and not yet freed by the user (`allocation`).
    pub allocation: StatArray,
    /// `cudaMalloc`'d segments (`segment`). Expandable mappings do not count.
    pub segment: StatArray,
    /// Blocks allocated or waiting on stream events (`active`).
    pub active: StatArray,
    /// Free blocks inside split, non-expandable segments (`inactive_split`).
    pub inactive_split: StatArray,
    /// Bytes of allocated blocks, rounded (`allocated_bytes`).
    pub allocated_bytes: StatArray,
    /// Bytes of segments and mapped expandable pages (`reserved_bytes`).
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks (`active_bytes`).
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks (`inactive_split_bytes`): cached but not releasable.
    pub inactive_split_bytes: StatArray,
    /// Unrounded bytes the user asked for, of active blocks (`requested_bytes`).
    pub requested_bytes: StatArray,
    /// Allocated blocks of at least `max_split_size` (`oversize_allocations`).
    pub oversize_allocations: Stat,
    /// `cudaMalloc`'d segments of at least `max_split_size` (`oversize_segments`).
    pub oversize_segments: Stat,
    /// Full cache flushes followed by a last retry (`num_alloc_retries`).
    pub num_alloc_retries: i64,
    /// Out-of-memory errors raised (`num_ooms`).
    pub num_ooms: i64,
    /// Waits for every pending stream event (`num_sync_all_streams`).
    pub num_sync_all_streams: i64,
    /// Successful `cudaMalloc` and `map` calls (`num_device_alloc`).
    pub num_device_alloc: i64,
    /// `cudaFree` and `unmap` calls (`num_device_free`).
    pub num_device_free: i64,
    /// Requests refused before the device was asked (`num_oom_rejections`,
    /// torch 2.13 and later: its `throw_on_cudamalloc_oom` path, which
    /// vramkit does not model, so this stays 0).
    pub num_oom_rejections: i64,
    /// `max_split_size` when the allocator was made, in bytes; -1 when unlimited.
    pub max_split_size: i64,
}

/// The nine StatArray metrics in the order `memory_stats()` builds them.
pub const STAT_ARRAY_NAMES: [&str; 9] = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
];

impl DeviceStats {
    /// A StatArray metric by its PyTorch name.
    pub fn array(&self, name: &str) -> Option<&StatArray> {
        Some(match name {
            "allocation" => &self.allocation,
            "segment" => &self.segment,
            "active" => &self.active,
            "inactive_split" => &self.inactive_split,
            "allocated_bytes" => &self.allocated_bytes,
            "reserved_bytes" => &self.reserved_bytes,
            "active_bytes" => &self.active_bytes,
            "inactive_split_bytes" => &self.inactive_split_bytes,
            "requested_bytes" => &self.requested_bytes,
            _ => return None,
        })
    }

    /// A StatArray metric by its PyTorch name, mutably.
    pub fn array_mut(&mut self, name: &str) -> Option<&mut StatArray> {
        Some(match name {
            "allocation" => &mut self.allocation,
            "segment" => &mut self.segment,
            "active" => &mut self.active,
            "inactive_split" => &mut self.inactive_split,
            "allocated_bytes" => &mut self.allocated_bytes,
            "reserved_bytes" => &mut self.reserved_bytes,
            "active_bytes" => &mut self.active_bytes,
            "inactive_split_bytes" => &mut self.inactive_split_bytes,
            "requested_bytes" => &mut self.requested_bytes,
            _ => return None,
        })
    }

    /// `torch.cuda.memory_stats()`: the flattened keys, sorted as Python sorts them.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut map = BTreeMap::new();
        let mut put_stat = |prefix: &str, stat: &Stat| {
            map.insert(format!("{prefix}.allocated"), stat.allocated);
            map.insert(format!("{prefix}.current"), stat.current);
            map.insert(format!("{prefix}.freed"), stat.freed);
            map.insert(format!("{prefix}.peak"), stat.peak);
        };
        for name in STAT_ARRAY_NAMES {
            let array = self.array(name).expect("every listed name is a metric");
            for which in [StatType::Aggregate, StatType::SmallPool, StatType::LargePool] {
                put_stat(&format!("{name}.{}", which.as_str()), array.get(which));
            }
        }
        put_stat("oversize_allocations", &self.oversize_allocations);
        put_stat("oversize_segments", &self.oversize_segments);
        map.insert("num_alloc_retries".into(), self.num_alloc_retries);
        map.insert("num_ooms".into(), self.num_ooms);
        map.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        map.insert("num_device_alloc".into(), self.num_device_alloc);
        map.insert("num_device_free".into(), self.num_device_free);
        map.insert("num_oom_rejections".into(), self.num_oom_rejections);
        map.insert("max_split_size".into(), self.max_split_size);
        map
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak(&mut self) {
        for name in STAT_ARRAY_NAMES {
            self.array_mut(name).expect("listed").for_each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated(&mut self) {
        for name in STAT_ARRAY_NAMES {
            self.array_mut(name).expect("listed").for_each(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.num_oom_rejections = 0;
    }
}

// --- update points -----------------------------------------------------------
// Each method below is PyTorch's update at one place of the algorithm; the
// comment names the spec section.

impl DeviceStats {
    /// 3.2: a new `cudaMalloc` segment.
    #[inline]
    pub(crate) fn account_segment_alloc(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        self.segment.add(pool, 1);
        self.reserved_bytes.add(pool, size as i64);
        if oversize {
            self.oversize_segments.increase(1);
        }
        self.num_device_alloc += 1;
    }

    /// 5.1: a segment handed back with `cudaFree`.
    #[inline]
    pub(crate) fn account_segment_free(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        self.segment.add(pool, -1);
        self.reserved_bytes.add(pool, -(size as i64));
        if oversize {
            self.oversize_segments.decrease(1);
        }
        self.num_device_free += 1;
    }

    /// 3.5: a block handed to the user. With `Peak::Unchanged` it is the
    /// block the previous call freed, of the same size, and nothing but the
    /// bytes requested can reach a new peak.
    #[inline(always)]
    pub(crate) fn account_block_allocated(
        &mut self,
        pool: PoolKind,
        size: u64,
        requested: u64,
        oversize: bool,
        inactive_split_delta: (i64, i64),
        peak: Peak,
    ) {
        if inactive_split_delta != (0, 0) {
            self.inactive_split.add_with(pool, inactive_split_delta.0, peak);
            self.inactive_split_bytes.add_with(pool, inactive_split_delta.1, peak);
        }
        self.allocation.inc(pool, 1, peak);
        self.allocated_bytes.inc(pool, size, peak);
        self.active.inc(pool, 1, peak);
        self.active_bytes.inc(pool, size, peak);
        self.requested_bytes.inc(pool, requested, Peak::MayRise);
        if oversize {
            self.oversize_allocations.increase_with(1, peak);
        }
    }

    /// 4.1: the user freed a block (`free_requested`).
    #[inline(always)]
    pub(crate) fn account_free_requested(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        self.allocation.dec(pool, 1);
        self.allocated_bytes.dec(pool, size);
        if oversize {
            self.oversize_allocations.decrease(1);
        }
    }

    /// 4.2: a block became reusable (`free_completed`).
    #[inline(always)]
    pub(crate) fn account_free_completed(
        &mut self,
        pool: PoolKind,
        size_before_merge: u64,
        requested: u64,
        inactive_split_delta: (i64, i64),
    ) {
        if inactive_split_delta != (0, 0) {
            self.inactive_split.add(pool, inactive_split_delta.0);
            self.inactive_split_bytes.add(pool, inactive_split_delta.1);
        }
        self.active.dec(pool, 1);
        self.active_bytes.dec(pool, size_before_merge);
        self.requested_bytes.dec(pool, requested);
    }

    /// A segment rebuilt from a snapshot (`restore`): counted as if allocated.
    pub(crate) fn account_restored_segment(&mut self, pool: PoolKind, size: u64, oversize: bool, inactive_split: (i64, i64)) {
        self.segment.add(pool, 1);
        self.reserved_bytes.add(pool, size as i64);
        if oversize {
            self.oversize_segments.increase(1);
        }
        self.inactive_split.add(pool, inactive_split.0);
        self.inactive_split_bytes.add(pool, inactive_split.1);
    }

    /// 6.3: pages mapped into an expandable segment. No segment count, no
    /// oversize count: PyTorch keeps only reserved bytes for these.
    #[inline]
    pub(crate) fn account_map(&mut self, pool: PoolKind, size: u64) {
        self.reserved_bytes.add(pool, size as i64);
        self.num_device_alloc += 1;
    }

    /// 6.4: pages unmapped from an expandable segment.
    #[inline]
    pub(crate) fn account_unmap(&mut self, pool: PoolKind, size: u64) {
        self.reserved_bytes.add(pool, -(size as i64));
        self.num_device_free += 1;
    }

    /// 3.2: `alloc_block(retry=true)`.
    #[inline]
    pub(crate) fn account_alloc_retry(&mut self) {
        self.num_alloc_retries += 1;
    }

    /// 3.4: an out-of-memory error.
    #[inline]
    pub(crate) fn account_oom(&mut self) {
        self.num_ooms += 1;
    }

    /// 5.3: `synchronize_and_free_events`.
    #[inline]
    pub(crate) fn account_sync_all_streams(&mut self) {
        self.num_sync_all_streams += 1;
    }
}

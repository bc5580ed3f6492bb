//! Statistics with the names of `torch.cuda.memory_stats()` (spec section
//! 7): the figures as a reader sees them. The allocator keeps them in a
//! cheaper form and updates them at PyTorch's update points
//! (`live_stats.rs`); [`crate::CachingAllocator::stats`] gives them in this one.

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
}

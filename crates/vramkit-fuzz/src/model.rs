//! The allocator action model: one [`Action`] enum and a [`Shadow`] that
//! applies actions to a `CachingAllocator<SimDevice>` while keeping its own
//! record of the live ranges.
//!
//! The property test in `vramkit-core` generates actions with proptest
//! strategies, the `actions` fuzz target with [`arbitrary`], and the
//! device-fault soak from a seeded generator; all of them run the same
//! shadow. Build with `vramkit-core`'s `validate` feature (every consumer
//! does: the crates' tests and `fuzz/`), so the invariant checker also runs
//! after every allocator operation.
//!
//! What the shadow checks after every action:
//! - a new block is 512-aligned, at least the size asked, and overlaps no
//!   live block;
//! - an out-of-memory error is one PyTorch would raise: the segment it
//!   tried does not fit under the device's capacity or the fraction limit
//!   even after every cached segment was released, or the device refused a
//!   call by an injected fault;
//! - allocated bytes and counts equal the live blocks';
//! - the bytes the device holds equal the allocator's reserved bytes;
//! - `empty_cache` with nothing live returns the device to zero;
//! - at the end, freeing everything and emptying the cache leaves nothing
//!   on the device: no range, no mapped page, no pending event.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, Error, StreamId};
use vramkit_sim::{EventMode, SimDevice};

/// 1 KiB.
pub const KIB: u64 = 1 << 10;
/// 1 MiB.
pub const MIB: u64 = 1 << 20;
/// 1 GiB.
pub const GIB: u64 = 1 << 30;

/// Device memory a shadow starts with.
pub const CAPACITY_BYTES: u64 = 8 * GIB;

/// Streams actions use: 0, 1 and 2.
pub const STREAMS: u8 = 3;

/// One thing a program (or the world around it) does to the allocator.
#[derive(Clone, Debug, Arbitrary)]
pub enum Action {
    /// Allocate `size` bytes on stream `stream`.
    Malloc {
        /// Bytes asked for.
        #[arbitrary(with = arbitrary_size)]
        size: u64,
        /// Stream, below [`STREAMS`].
        #[arbitrary(with = arbitrary_stream)]
        stream: u8,
    },
    /// Free the `index % live`-th live allocation.
    Free {
        /// Which live allocation.
        index: usize,
    },
    /// Free an address twice or one never handed out.
    BadFree {
        /// Which freed address.
        index: usize,
    },
    /// `record_stream` of a live allocation on another stream.
    RecordStream {
        /// Which live allocation.
        index: usize,
        /// The stream it is used on.
        #[arbitrary(with = arbitrary_stream)]
        stream: u8,
    },
    /// Complete every pending event of one stream.
    CompleteStream {
        /// The stream.
        #[arbitrary(with = arbitrary_stream)]
        stream: u8,
    },
    /// `empty_cache()`.
    EmptyCache,
    /// Refuse the next `n` device mallocs and maps.
    InjectFailures {
        /// How many.
        n: u8,
    },
    /// Change a setting at run time.
    UpdateSettings {
        /// Which change (see [`Shadow::apply`]).
        which: u8,
    },
    /// Other processes take or give back memory: the device now has
    /// `gib % 8 + 1` GiB, possibly less than it holds.
    SetCapacity {
        /// Capacity selector.
        gib: u8,
    },
    /// From now on every device malloc and map fails with probability
    /// `percent % 51` percent (0 turns faults off).
    SetFaultRate {
        /// Rate selector.
        percent: u8,
    },
}

/// Sizes with the same mix as the property test's strategy: small and
/// large pools, the 1 MiB / 10 MiB / 20 MiB boundaries, oversize blocks, and
/// requests that do not fit.
fn arbitrary_size(u: &mut Unstructured<'_>) -> arbitrary::Result<u64> {
    const EDGES: [u64; 8] = [MIB, MIB + 1, MIB - 1, 10 * MIB, 10 * MIB - 1, 10 * MIB + 1, 20 * MIB, 20 * MIB + 1];
    Ok(match u.int_in_range(0u8..=13)? {
        0..=2 => u.int_in_range(1..=4096)?,
        3..=5 => u.int_in_range(4097..=MIB)?,
        6 => 1,
        7 => *u.choose(&EDGES)?,
        8..=10 => u.int_in_range(MIB + 1..=64 * MIB)?,
        11 => u.int_in_range(64 * MIB..=512 * MIB)?,
        12 => u.int_in_range(GIB..=3 * GIB)?,
        _ => u.arbitrary()?,
    })
}

fn arbitrary_stream(u: &mut Unstructured<'_>) -> arbitrary::Result<u8> {
    u.int_in_range(0..=STREAMS - 1)
}

/// The config presets every model run is repeated under.
pub const PRESETS: [&str; 10] = [
    "default",
    "max_split_small",
    "max_split_large",
    "roundup_single",
    "roundup_list",
    "gc_threshold",
    "memory_fraction",
    "expandable",
    "expandable_max_split",
    "expandable_gc_fraction",
];

/// The settings of one of [`PRESETS`].
///
/// # Panics
/// On a name not in [`PRESETS`].
pub fn preset(name: &str) -> AllocatorConfig {
    let b = AllocatorConfig::builder();
    match name {
        "default" => b,
        "max_split_small" => b.max_split_size_bytes(Some(32 * MIB)),
        "max_split_large" => b.max_split_size_bytes(Some(1024 * MIB)),
        "roundup_single" => b.roundup_power2_divisions(4),
        "roundup_list" => {
            // [1:4, 16:2, 64:8, >:1], resolved.
            let mut t = [0u64; 16];
            t[..5].fill(4);
            t[4] = 2;
            t[6] = 8;
            t[7..].fill(1);
            b.roundup_power2_division_table(t)
        }
        "gc_threshold" => b.garbage_collection_threshold(0.6).per_process_memory_fraction(0.8),
        "memory_fraction" => b.per_process_memory_fraction(0.25),
        "expandable" => b.expandable_segments(true),
        "expandable_max_split" => b.expandable_segments(true).max_split_size_bytes(Some(64 * MIB)),
        "expandable_gc_fraction" => b.expandable_segments(true).garbage_collection_threshold(0.5).per_process_memory_fraction(0.5),
        other => panic!("no preset {other:?}"),
    }
    .build()
    .expect("presets are valid")
}

/// What a shadow has done, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelCounts {
    /// Actions applied.
    pub actions: u64,
    /// Successful mallocs.
    pub mallocs: u64,
    /// Mallocs that raised out-of-memory.
    pub ooms: u64,
    /// Frees of live blocks.
    pub frees: u64,
}

/// A live allocation in the shadow model.
#[derive(Clone, Copy, Debug)]
struct Live {
    size: u64,
    requested: u64,
}

/// An allocator on a simulated device, and what the model knows it must hold.
#[derive(Debug)]
pub struct Shadow {
    alloc: CachingAllocator<SimDevice>,
    live: BTreeMap<u64, Live>,
    freed: Vec<u64>,
    /// The largest capacity the device has had: reserved bytes never exceed it.
    max_capacity_bytes: u64,
    counts: ModelCounts,
}

impl Shadow {
    /// An allocator with `config` on a device of [`CAPACITY_BYTES`] whose
    /// events complete only when an action says so.
    pub fn new(config: AllocatorConfig) -> Shadow {
        let device = SimDevice::new(CAPACITY_BYTES).with_event_mode(EventMode::Manual);
        Shadow::on(device, config)
    }

    /// An allocator with `config` on `device`.
    pub fn on(device: SimDevice, config: AllocatorConfig) -> Shadow {
        let max_capacity_bytes = device.capacity_bytes();
        Shadow {
            alloc: CachingAllocator::new(device, config),
            live: BTreeMap::new(),
            freed: Vec::new(),
            max_capacity_bytes,
            counts: ModelCounts::default(),
        }
    }

    /// The allocator.
    pub fn allocator(&self) -> &CachingAllocator<SimDevice> {
        &self.alloc
    }

    /// What has been done so far.
    pub fn counts(&self) -> ModelCounts {
        self.counts
    }

    /// Live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    fn nth_live(&self, index: usize) -> Option<u64> {
        if self.live.is_empty() {
            return None;
        }
        self.live.keys().nth(index % self.live.len()).copied()
    }

    /// Applies one action and checks the model; panics on any disagreement.
    pub fn apply(&mut self, action: &Action) {
        self.counts.actions += 1;
        match *action {
            Action::Malloc { size, stream } => self.malloc(size, stream),
            Action::Free { index } => {
                if let Some(ptr) = self.nth_live(index) {
                    self.alloc.free(DeviceAddr(ptr)).expect("free of a live allocation");
                    self.live.remove(&ptr);
                    self.freed.push(ptr);
                    self.counts.frees += 1;
                }
            }
            Action::BadFree { index } => {
                let ptr = if self.freed.is_empty() { 0xdead_0000 } else { self.freed[index % self.freed.len()] };
                if !self.live.contains_key(&ptr) {
                    let before = self.alloc.stats();
                    assert!(matches!(self.alloc.free(DeviceAddr(ptr)), Err(Error::UnknownPointer { .. })));
                    assert_eq!(before, self.alloc.stats());
                }
            }
            Action::RecordStream { index, stream } => {
                if let Some(ptr) = self.nth_live(index) {
                    self.alloc.record_stream(DeviceAddr(ptr), StreamId(u64::from(stream))).unwrap();
                }
            }
            Action::CompleteStream { stream } => self.alloc.device_mut().complete_stream(StreamId(u64::from(stream))),
            Action::EmptyCache => {
                self.alloc.empty_cache();
                if self.live.is_empty() {
                    assert_eq!(self.alloc.device().used_bytes(), 0, "empty_cache with nothing live returns everything");
                    assert_eq!(self.alloc.stats().reserved_bytes.all.current, 0);
                }
            }
            Action::InjectFailures { n } => self.alloc.device_mut().fail_next_mallocs(u64::from(n)),
            Action::UpdateSettings { which } => {
                let mut config = self.alloc.config().clone();
                match which % 7 {
                    0 => config.max_split_size_bytes = None,
                    1 => config.max_split_size_bytes = Some(64 * MIB),
                    2 => config.roundup_power2_divisions = [0; 16],
                    3 => config.roundup_power2_divisions = [4; 16],
                    4 => config.garbage_collection_threshold = 0.0,
                    5 => config.garbage_collection_threshold = 0.5,
                    _ => config.expandable_segments = !config.expandable_segments,
                }
                self.alloc.set_config(config).expect("valid settings");
            }
            Action::SetCapacity { gib } => {
                let capacity = (u64::from(gib % 8) + 1) * GIB;
                self.max_capacity_bytes = self.max_capacity_bytes.max(capacity);
                self.alloc.device_mut().set_capacity(capacity);
            }
            Action::SetFaultRate { percent } => {
                let rate = f64::from(percent % 51) / 100.0;
                let seed = self.counts.actions;
                self.alloc.device_mut().fail_at_random(rate, seed);
            }
        }
        self.check_totals();
    }

    fn malloc(&mut self, size: u64, stream: u8) {
        let injected_before = self.alloc.device().counters().injected_failures;
        match self.alloc.malloc(size, StreamId(u64::from(stream))) {
            Ok(ptr) if size == 0 => assert_eq!(ptr, DeviceAddr(0), "a zero-byte request returns the null address"),
            Ok(ptr) => {
                self.check_new_allocation(ptr, size);
                self.counts.mallocs += 1;
            }
            Err(Error::OutOfMemory(oom)) => {
                // The ladder released every cached segment before giving up,
                // so an OOM means the segment really does not fit now, or the
                // device refused by an injected fault.
                let device = self.alloc.device();
                let used = device.used_bytes();
                let limit = oom.limit_bytes.unwrap_or(u64::MAX).min(device.capacity_bytes());
                let injected = device.counters().injected_failures - injected_before;
                // PyTorch reports the segment size even for expandable
                // segments, which map whole pages (2 MiB small, 20 MiB large).
                let config = self.alloc.config();
                let tried = if config.expandable_segments {
                    let page = if oom.alloc_size_bytes <= 2 * MIB { 2 * MIB } else { config.large_segment_size_bytes };
                    oom.alloc_size_bytes.div_ceil(page).saturating_mul(page)
                } else {
                    oom.alloc_size_bytes
                };
                assert!(
                    oom.more_than_one_exabyte || used.saturating_add(tried) > limit || injected >= 1,
                    "OOM for {size} bytes with {used} used of {limit} and no injected fault: {oom}"
                );
                // The 1 EB refusal comes before any accounting and reports no figures.
                if !oom.more_than_one_exabyte {
                    assert_eq!(oom.reserved_bytes as i64, self.alloc.stats().reserved_bytes.all.current);
                }
                self.counts.ooms += 1;
            }
            Err(other) => panic!("malloc failed with a non-OOM error: {other}"),
        }
    }

    fn check_new_allocation(&mut self, ptr: DeviceAddr, requested: u64) {
        let size = self.alloc.block_size(ptr).expect("a new allocation has a block");
        assert_eq!(ptr.0 % 512, 0, "misaligned {ptr}");
        assert!(size >= requested, "block of {size} for {requested} bytes");
        if let Some((&a, l)) = self.live.range(..ptr.0 + size).next_back() {
            assert!(a + l.size <= ptr.0, "{ptr}+{size} overlaps live {a:#x}+{}", l.size);
        }
        self.live.insert(ptr.0, Live { size, requested });
    }

    fn check_totals(&self) {
        let stats = self.alloc.stats();
        let live_bytes: u64 = self.live.values().map(|l| l.size).sum();
        let live_requested: u64 = self.live.values().map(|l| l.requested).sum();
        assert_eq!(stats.allocated_bytes.all.current, live_bytes as i64);
        assert_eq!(stats.allocation.all.current, self.live.len() as i64);
        assert!(stats.requested_bytes.all.current >= live_requested as i64);
        assert!(stats.active_bytes.all.current >= live_bytes as i64);
        assert_eq!(self.alloc.device().used_bytes(), self.alloc.total_reserved_bytes(), "device bytes == reserved bytes");
        assert_eq!(stats.reserved_bytes.all.current as u64, self.alloc.total_reserved_bytes());
        assert!(self.alloc.total_reserved_bytes() <= self.max_capacity_bytes);
    }

    /// Frees everything, empties the cache, and checks that nothing is
    /// left on the device. Returns what was done.
    pub fn finish(mut self) -> ModelCounts {
        for ptr in std::mem::take(&mut self.live).into_keys() {
            self.alloc.free(DeviceAddr(ptr)).unwrap();
        }
        self.alloc.empty_cache();
        if let Err(violation) = self.alloc.check_invariants() {
            panic!("allocator invariant broken at the end: {violation}");
        }
        let device = self.alloc.device();
        assert_eq!(device.used_bytes(), 0, "nothing leaked");
        assert_eq!(device.live_ranges(), 0);
        assert_eq!(device.mapped_bytes(), 0);
        assert_eq!(device.pending_events(), 0);
        self.counts
    }
}

/// Runs `actions` on a fresh shadow with `config`, then [`Shadow::finish`].
pub fn run(config: AllocatorConfig, actions: &[Action]) -> ModelCounts {
    let mut shadow = Shadow::new(config);
    for action in actions {
        shadow.apply(action);
    }
    shadow.finish()
}

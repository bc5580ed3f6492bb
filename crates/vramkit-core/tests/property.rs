//! Model-based property test: random operation sequences against a shadow
//! model of live ranges, across config presets.
//!
//! The shadow model knows which addresses are live and their sizes; it
//! panics on overlap or misalignment, and checks that the statistics and
//! the device agree with it after every step. The allocator's own invariant
//! checker runs after every operation too (the `validate` feature).
//!
//! CI runs `PROPTEST_CASES` cases (default below); the soak in
//! BENCHMARKS.md sets it much higher.

use crate::support::{GIB, KIB, MIB};
use proptest::prelude::*;
use std::collections::BTreeMap;
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, Error, StreamId};
use vramkit_sim::{EventMode, SimDevice};

/// One thing a program does to the allocator. Shared with the fuzz targets.
#[derive(Clone, Debug)]
pub enum Action {
    /// Allocate `size` bytes on stream `stream`.
    Malloc { size: u64, stream: u8 },
    /// Free the `index % live`-th live allocation.
    Free { index: usize },
    /// Free an address twice or one never handed out.
    BadFree { index: usize },
    /// `record_stream` of a live allocation on another stream.
    RecordStream { index: usize, stream: u8 },
    /// Complete every pending event of one stream.
    CompleteStream { stream: u8 },
    /// `empty_cache()`.
    EmptyCache,
    /// Refuse the next `n` device mallocs.
    InjectFailures { n: u8 },
    /// Change a setting at run time.
    UpdateSettings { which: u8 },
}

fn size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..=4096,
        3 => 4097u64..=(MIB),
        1 => Just(1u64),
        1 => prop_oneof![Just(MIB), Just(MIB + 1), Just(MIB - 1), Just(10 * MIB), Just(10 * MIB - 1), Just(10 * MIB + 1), Just(20 * MIB), Just(20 * MIB + 1)],
        3 => (MIB + 1)..=(64 * MIB),
        1 => (64 * MIB)..=(512 * MIB),
        1 => GIB..=(3 * GIB),
    ]
}

fn action_strategy() -> impl Strategy<Value = Action> {
    prop_oneof![
        10 => (size_strategy(), 0u8..3).prop_map(|(size, stream)| Action::Malloc { size, stream }),
        7 => any::<usize>().prop_map(|index| Action::Free { index }),
        1 => any::<usize>().prop_map(|index| Action::BadFree { index }),
        1 => (any::<usize>(), 0u8..3).prop_map(|(index, stream)| Action::RecordStream { index, stream }),
        1 => (0u8..3).prop_map(|stream| Action::CompleteStream { stream }),
        1 => Just(Action::EmptyCache),
        1 => (1u8..3).prop_map(|n| Action::InjectFailures { n }),
        1 => (0u8..7).prop_map(|which| Action::UpdateSettings { which }),
    ]
}

const CAPACITY: u64 = 8 * GIB;

/// A live allocation in the shadow model.
#[derive(Clone, Copy, Debug)]
struct Live {
    size: u64,
    requested: u64,
}

struct Shadow {
    alloc: CachingAllocator<SimDevice>,
    live: BTreeMap<u64, Live>,
    freed: Vec<u64>,
    ops: u64,
}

impl Shadow {
    fn new(config: AllocatorConfig) -> Shadow {
        let device = SimDevice::new(CAPACITY).with_event_mode(EventMode::Manual);
        Shadow { alloc: CachingAllocator::new(device, config), live: BTreeMap::new(), freed: Vec::new(), ops: 0 }
    }

    fn nth_live(&self, index: usize) -> Option<u64> {
        if self.live.is_empty() {
            return None;
        }
        self.live.keys().nth(index % self.live.len()).copied()
    }

    fn apply(&mut self, action: &Action) {
        self.ops += 1;
        match *action {
            Action::Malloc { size, stream } => {
                let refused = |d: &SimDevice| d.counters().failed_mallocs + d.counters().failed_maps;
                let failed_before = refused(self.alloc.device());
                match self.alloc.malloc(size, StreamId(stream as u64)) {
                    Ok(ptr) => self.check_new_allocation(ptr, size),
                    Err(Error::OutOfMemory(oom)) => {
                        // The ladder released everything releasable, so an OOM
                        // means a new segment really does not fit (or a failure
                        // was injected).
                        let used = self.alloc.device().used_bytes();
                        let limit = oom.limit_bytes.unwrap_or(u64::MAX).min(CAPACITY);
                        let refusals = refused(self.alloc.device()) - failed_before;
                        assert!(
                            used + oom.alloc_size_bytes > limit || refusals >= 1,
                            "OOM for {size} bytes with {used} used of {limit}: {oom}"
                        );
                        assert_eq!(oom.reserved_bytes as i64, self.alloc.stats().reserved_bytes.all.current);
                    }
                    Err(other) => panic!("malloc failed with a non-OOM error: {other}"),
                }
            }
            Action::Free { index } => {
                if let Some(ptr) = self.nth_live(index) {
                    self.alloc.free(DeviceAddr(ptr)).expect("free of a live allocation");
                    self.live.remove(&ptr);
                    self.freed.push(ptr);
                }
            }
            Action::BadFree { index } => {
                let ptr = if self.freed.is_empty() { 0xdead_0000 } else { self.freed[index % self.freed.len()] };
                if !self.live.contains_key(&ptr) {
                    let before = self.alloc.stats().to_owned();
                    assert!(matches!(self.alloc.free(DeviceAddr(ptr)), Err(Error::UnknownPointer { .. })));
                    assert_eq!(&before, self.alloc.stats());
                }
            }
            Action::RecordStream { index, stream } => {
                if let Some(ptr) = self.nth_live(index) {
                    self.alloc.record_stream(DeviceAddr(ptr), StreamId(stream as u64)).unwrap();
                }
            }
            Action::CompleteStream { stream } => self.alloc.device_mut().complete_stream(StreamId(stream as u64)),
            Action::EmptyCache => {
                self.alloc.empty_cache();
                if self.live.is_empty() {
                    assert_eq!(self.alloc.device().used_bytes(), 0, "empty_cache with nothing live returns everything");
                    assert_eq!(self.alloc.stats().reserved_bytes.all.current, 0);
                }
            }
            Action::InjectFailures { n } => self.alloc.device_mut().fail_next_mallocs(n as u64),
            Action::UpdateSettings { which } => {
                let mut config = self.alloc.config().clone();
                match which {
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
        }
        self.check_totals();
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
        assert_eq!(self.alloc.device().used_bytes(), self.alloc.total_reserved_bytes());
        assert_eq!(stats.reserved_bytes.all.current as u64, self.alloc.total_reserved_bytes());
        assert!(self.alloc.total_reserved_bytes() <= CAPACITY);
    }

    fn finish(mut self) {
        for ptr in std::mem::take(&mut self.live).into_keys() {
            self.alloc.free(DeviceAddr(ptr)).unwrap();
        }
        self.alloc.empty_cache();
        assert_eq!(self.alloc.device().used_bytes(), 0, "nothing leaked");
        assert_eq!(self.alloc.device().live_ranges(), 0);
        assert_eq!(self.alloc.device().pending_events(), 0);
    }
}

fn run(config: AllocatorConfig, actions: &[Action]) {
    let mut shadow = Shadow::new(config);
    for a in actions {
        shadow.apply(a);
    }
    shadow.finish();
}

fn preset(name: &str) -> AllocatorConfig {
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
        _ => unreachable!(),
    }
    .build()
    .expect("presets are valid")
}

/// Cases per preset: `PROPTEST_CASES`, or 48 for CI.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

macro_rules! gen_property_tests {
    ($($name:ident),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(actions in proptest::collection::vec(action_strategy(), 1..300)) {
                    run(preset(stringify!($name)), &actions);
                }
            )*
        }
    };
}

gen_property_tests!(
    default,
    max_split_small,
    max_split_large,
    roundup_single,
    roundup_list,
    gc_threshold,
    memory_fraction,
    expandable,
    expandable_max_split,
    expandable_gc_fraction,
);

#[test]
fn small_sizes_fill_segments_densely() {
    // 4096 allocations of 512 B fit in exactly one 2 MiB segment.
    let mut shadow = Shadow::new(AllocatorConfig::pytorch_default());
    for _ in 0..4096 {
        shadow.apply(&Action::Malloc { size: 512, stream: 0 });
    }
    assert_eq!(shadow.alloc.stats().segment.all.current, 1);
    assert_eq!(shadow.alloc.stats().inactive_split.all.current, 0);
    let _ = KIB;
    shadow.finish();
}

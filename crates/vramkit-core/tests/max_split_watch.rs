//! Watching other `max_split_size_mb` values
//! (`CachingAllocator::watch_max_split_sizes`): a limit the unlimited
//! allocator never notes decides alike, on every path the limit's tests
//! lie on (cached and new segments, expandable segments, the retry ladder,
//! garbage collection, parked frees); a test that would answer otherwise
//! notes its limits.

use crate::support::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, DeviceStats, Stat, StreamId};
use vramkit_sim::SimDevice;

/// The limits watched: each a `max_split_size_mb` PyTorch accepts.
const LIMITS: [u64; 4] = [24 * MIB, 32 * MIB, 48 * MIB, 64 * MIB];

type Allocator = CachingAllocator<SimDevice>;

#[derive(Clone, Debug)]
enum Action {
    Malloc { size: u64, stream: u8 },
    /// Frees the n-th live block.
    Free(usize),
    /// Frees the newest block and asks for the same size again.
    Again,
    EmptyCache,
}

fn action() -> impl Strategy<Value = Action> {
    let size = prop_oneof![1u64..=MIB, (MIB + 1)..=(20 * MIB), (20 * MIB)..=(80 * MIB), Just(30 * MIB), Just(50 * MIB)];
    prop_oneof![
        8 => (size, 0u8..2).prop_map(|(size, stream)| Action::Malloc { size, stream }),
        6 => any::<usize>().prop_map(Action::Free),
        3 => Just(Action::Again),
        1 => Just(Action::EmptyCache),
    ]
}

/// An allocator on a device of `capacity` bytes under `conf`, with `limit`.
fn make(conf: &str, capacity: u64, limit: Option<u64>) -> Allocator {
    let config = AllocatorConfig { max_split_size_bytes: limit, ..AllocatorConfig::parse(conf).expect("valid") };
    CachingAllocator::new(SimDevice::new(capacity), config)
}

/// Every statistic but those the limit sorts blocks by.
fn but_oversize(mut s: DeviceStats) -> DeviceStats {
    (s.oversize_allocations, s.oversize_segments, s.max_split_size) = (Stat::default(), Stat::default(), 0);
    s
}

/// Asks every allocator for `size` bytes; the live blocks take the unlimited one's.
fn malloc(
    (unlimited, limited): (&mut Allocator, &mut [Allocator]),
    size: u64,
    s: StreamId,
    live: &mut Vec<(DeviceAddr, u64, StreamId)>,
) -> (Option<DeviceAddr>, Vec<Option<DeviceAddr>>) {
    let got = unlimited.malloc(size, s).ok();
    if let Some(addr) = got {
        live.push((addr, size, s));
    }
    (got, limited.iter_mut().map(|a| a.malloc(size, s).ok()).collect())
}

/// Runs `actions` unlimited, watching [`LIMITS`], and under each limit:
/// while a limit is still alike, every answer, statistic and segment so
/// far is the same under it. Returns the limits alike at the end.
fn compare(conf: &str, capacity: u64, actions: &[Action]) -> Result<Vec<u64>, TestCaseError> {
    let mut unlimited = make(conf, capacity, None);
    unlimited.watch_max_split_sizes(&LIMITS);
    let mut limited: Vec<Allocator> = LIMITS.iter().map(|&m| make(conf, capacity, Some(m))).collect();
    let mut live: Vec<(DeviceAddr, u64, StreamId)> = Vec::new();
    for action in actions {
        let answers = match *action {
            Action::Malloc { size, stream } => Some(malloc((&mut unlimited, &mut limited), size, StreamId(u64::from(stream)), &mut live)),
            Action::Free(n) if !live.is_empty() => {
                let (addr, _, _) = live.remove(n % live.len());
                let _ = unlimited.free(addr);
                limited.iter_mut().for_each(|a| drop(a.free(addr)));
                None
            }
            Action::Again if !live.is_empty() => {
                let (addr, size, s) = live.pop().expect("not empty");
                let _ = unlimited.free(addr);
                limited.iter_mut().for_each(|a| drop(a.free(addr)));
                Some(malloc((&mut unlimited, &mut limited), size, s, &mut live))
            }
            Action::EmptyCache => {
                unlimited.empty_cache();
                limited.iter_mut().for_each(|a| a.empty_cache());
                None
            }
            _ => None,
        };
        let alike = unlimited.max_split_sizes_alike();
        for (i, a) in limited.iter().enumerate().filter(|(i, _)| alike.contains(&LIMITS[*i])) {
            let limit = LIMITS[i] / MIB;
            if let Some((got, others)) = &answers {
                prop_assert_eq!(got, &others[i], "{} MiB", limit);
            }
            prop_assert_eq!(but_oversize(unlimited.stats()), but_oversize(a.stats()), "{} MiB", limit);
            prop_assert_eq!(unlimited.segments(), a.segments(), "{} MiB", limit);
        }
    }
    Ok(unlimited.max_split_sizes_alike())
}

/// The settings the limit's tests lie under: plain (parked frees, 3.1's
/// rules, 3.3's split), expandable segments (no split test), a capacity
/// whose retry ladder runs, garbage collection under a fraction.
const SETTINGS: [(&str, u64); 4] = [
    ("", 1 << 40),
    ("expandable_segments:True", 1 << 40),
    ("", 160 * MIB),
    ("garbage_collection_threshold:0.6,per_process_memory_fraction:0.5", 320 * MIB),
];

proptest! {
    #[test]
    fn a_limit_never_noted_decides_alike(actions in proptest::collection::vec(action(), 1..120)) {
        for (conf, capacity) in SETTINGS {
            compare(conf, capacity, &actions)?;
        }
    }
}

/// The property above holds of runs where limits stay alike, not only of
/// runs that note every limit at once.
#[test]
fn runs_of_many_requests_keep_some_limits_alike() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut kept = [0usize; SETTINGS.len()];
    for _ in 0..64 {
        let actions = proptest::collection::vec(action(), 40..80).new_tree(&mut runner).expect("a case").current();
        for (k, (conf, capacity)) in SETTINGS.iter().enumerate() {
            kept[k] += usize::from(!compare(conf, *capacity, &actions).expect("alike").is_empty());
        }
    }
    assert!(kept.iter().all(|&n| n > 0), "runs that end with a limit alike, per setting: {kept:?}");
}

/// A 40 MiB segment, alike under every limit while only it is asked for;
/// reused for 10 MiB it is oversize under 24 and 32 MiB, not 48.
#[test]
fn a_test_that_would_answer_otherwise_notes_its_limits() {
    let mut a = make("", 1 << 40, None);
    a.watch_max_split_sizes(&LIMITS);
    let big = a.malloc(40 * MIB, S0).unwrap();
    assert_eq!(a.max_split_sizes_alike(), LIMITS);
    a.free(big).unwrap();
    a.malloc(10 * MIB, S0).unwrap();
    assert_eq!(a.max_split_sizes_alike(), [48 * MIB, 64 * MIB]);
    // Changed settings: nothing is alike any more.
    a.update_settings("roundup_power2_divisions:4").unwrap();
    assert_eq!(a.max_split_sizes_alike(), Vec::<u64>::new());
    // A limit set: every watched one is noted at once.
    let mut limited = make("", 1 << 40, Some(100 * MIB));
    limited.watch_max_split_sizes(&LIMITS);
    assert_eq!(limited.max_split_sizes_alike(), Vec::<u64>::new());
}

/// With expandable segments a split reads no limit: a 60 MiB free block
/// taken for 30 MiB exceeds an oversize request by the tolerance (20 MiB)
/// under 24 MiB, and is oversize itself under 32 and 48.
#[test]
fn best_fit_notes_both_oversize_rules() {
    let mut a = make("expandable_segments:True", 1 << 40, None);
    a.watch_max_split_sizes(&LIMITS);
    let big = a.malloc(60 * MIB, S0).unwrap();
    a.free(big).unwrap();
    assert_eq!(a.max_split_sizes_alike(), LIMITS);
    a.malloc(30 * MIB, S0).unwrap();
    assert_eq!(a.max_split_sizes_alike(), [64 * MIB]);
}

/// Unlimited, the retry ladder's release of oversize blocks frees
/// nothing; under any limit it looks for some.
#[test]
fn the_retry_ladder_notes_every_limit() {
    let mut a = make("", 100 * MIB, None);
    a.watch_max_split_sizes(&LIMITS);
    a.malloc(60 * MIB, S0).unwrap();
    assert_eq!(a.max_split_sizes_alike(), LIMITS);
    assert!(a.malloc(60 * MIB, S0).is_err());
    assert_eq!(a.max_split_sizes_alike(), Vec::<u64>::new());
}

//! `malloc_then_free` (a request freed straight after, in one step) on a
//! device with virtual memory: under expandable segments, garbage
//! collection and a fraction limit it leaves what `malloc` and `free`
//! leave. (The unit tests compare it on a device without virtual memory,
//! with record_stream and against merging at once.)

use crate::support::*;
use proptest::prelude::*;
use vramkit_core::{CachingAllocator, DeviceAddr, HistoryConfig, StreamId};
use vramkit_sim::SimDevice;

#[derive(Clone, Debug)]
enum Action {
    Malloc { size: u64, stream: u8 },
    /// Frees the n-th live block.
    Free(usize),
    Temporary { size: u64, stream: u8 },
    EmptyCache,
    History(bool),
    Snapshot,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..=4096, 4097..=MIB, (MIB + 1)..=(40 * MIB), Just(2 * MIB), Just(20 * MIB)]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (size(), 0u8..2).prop_map(|(size, stream)| Action::Malloc { size, stream }),
        6 => any::<usize>().prop_map(Action::Free),
        8 => (size(), 0u8..2).prop_map(|(size, stream)| Action::Temporary { size, stream }),
        1 => Just(Action::EmptyCache),
        1 => any::<bool>().prop_map(Action::History),
        1 => Just(Action::Snapshot),
    ]
}

/// Makes an allocator under one setting.
type Make = Box<dyn Fn() -> CachingAllocator<SimDevice>>;

/// Settings with expandable segments (alone, with garbage collection under
/// a fraction limit, with a split limit, under torch 2.13's tie rule), and
/// garbage collection without them.
fn allocators() -> Vec<(&'static str, Make)> {
    const CAPACITY: u64 = 512 * MIB;
    vec![
        ("expandable", Box::new(|| allocator_on(SimDevice::new(CAPACITY), "expandable_segments:True"))),
        (
            "expandable, gc",
            Box::new(|| {
                allocator_on(
                    SimDevice::new(CAPACITY),
                    "expandable_segments:True,garbage_collection_threshold:0.5,per_process_memory_fraction:0.6",
                )
            }),
        ),
        ("expandable, split limit", Box::new(|| allocator_on(SimDevice::new(CAPACITY), "expandable_segments:True,max_split_size_mb:24"))),
        ("expandable, 2.13", Box::new(|| allocator_as("2.13", SimDevice::new(CAPACITY), "expandable_segments:True"))),
        (
            "gc",
            Box::new(|| allocator_on(SimDevice::new(CAPACITY), "garbage_collection_threshold:0.5,per_process_memory_fraction:0.6")),
        ),
    ]
}

/// `malloc` and, if it gave an address, `free` of it.
fn malloc_and_free(a: &mut CachingAllocator<SimDevice>, size: u64, stream: StreamId) -> Option<DeviceAddr> {
    let got = a.malloc(size, stream).ok();
    if let Some(p) = got {
        assert!(a.free(p).is_ok(), "{p:?} was just allocated");
    }
    got
}

/// Runs `actions` on two allocators made by `make`, one taking
/// temporaries in one step, one with the two calls; compares the results,
/// statistics, segments and snapshots. Returns the temporaries taken in one step.
fn compare(make: &dyn Fn() -> CachingAllocator<SimDevice>, actions: &[Action]) -> Result<usize, TestCaseError> {
    let (mut one, mut two) = (make(), make());
    let mut taken = 0;
    let mut live: Vec<DeviceAddr> = Vec::new();
    for action in actions {
        match *action {
            Action::Malloc { size, stream } => {
                let s = StreamId(u64::from(stream));
                let (o, t) = (one.malloc(size, s), two.malloc(size, s));
                prop_assert_eq!(o.as_ref().ok(), t.as_ref().ok());
                if let Ok(p) = o {
                    live.push(p);
                }
            }
            Action::Temporary { size, stream } => {
                let s = StreamId(u64::from(stream));
                let one_step = one.malloc_then_free(size, s);
                taken += usize::from(one_step.is_some());
                let o = one_step.or_else(|| malloc_and_free(&mut one, size, s));
                prop_assert_eq!(o, malloc_and_free(&mut two, size, s));
            }
            Action::Free(n) if !live.is_empty() => {
                let p = live.remove(n % live.len());
                prop_assert!(one.free(p).is_ok() && two.free(p).is_ok());
            }
            Action::EmptyCache => {
                one.empty_cache();
                two.empty_cache();
            }
            Action::History(on) => {
                one.record_history(on.then(HistoryConfig::default));
                two.record_history(on.then(HistoryConfig::default));
            }
            Action::Snapshot => prop_assert_eq!(one.snapshot(), two.snapshot()),
            _ => {}
        }
        prop_assert_eq!(one.stats(), two.stats());
        prop_assert_eq!(one.segments(), two.segments());
    }
    Ok(taken)
}

/// Temporaries beside weights and activations: most take the one step
/// under every setting.
#[test]
fn temporaries_in_expandable_segments_take_the_one_step() {
    let mut actions = Vec::new();
    for step in 0..30u64 {
        actions.push(Action::Malloc { size: (step % 5 + 1) * 3 * MIB, stream: 0 });
        for t in 0..4 {
            actions.push(Action::Temporary { size: 512 + (step * 7919 + t * 1_299_709) % (6 * MIB), stream: 0 });
        }
        if step % 3 == 2 {
            actions.push(Action::Free(0));
        }
    }
    for (name, make) in allocators() {
        let taken = compare(make.as_ref(), &actions).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(taken >= 60, "{name}: {taken} of 120 in one step");
    }
}

proptest! {
    #[test]
    fn a_temporary_in_one_step_changes_nothing_with_virtual_memory(actions in proptest::collection::vec(action(), 1..200)) {
        for (name, make) in allocators() {
            compare(make.as_ref(), &actions).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        }
    }
}

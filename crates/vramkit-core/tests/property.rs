//! Model-based property test: random operation sequences against a shadow
//! model of live ranges, across config presets.
//!
//! The shadow model (`vramkit_fuzz::model`, shared with the `actions` fuzz
//! target and the device-fault soak) knows which addresses are live and
//! their sizes; it panics on overlap or misalignment, and checks that the
//! statistics and the device agree with it after every step. The
//! allocator's own invariant checker runs after every operation too (the
//! `validate` feature).
//!
//! CI runs `PROPTEST_CASES` cases (default below); the soak in
//! BENCHMARKS.md sets it much higher.

use crate::support::{GIB, MIB};
use proptest::prelude::*;
use vramkit_fuzz::model::{preset, run, Action, Shadow, STREAMS};

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
        10 => (size_strategy(), 0u8..STREAMS).prop_map(|(size, stream)| Action::Malloc { size, stream }),
        7 => any::<usize>().prop_map(|index| Action::Free { index }),
        1 => any::<usize>().prop_map(|index| Action::BadFree { index }),
        1 => (any::<usize>(), 0u8..STREAMS).prop_map(|(index, stream)| Action::RecordStream { index, stream }),
        1 => (0u8..STREAMS).prop_map(|stream| Action::CompleteStream { stream }),
        1 => Just(Action::EmptyCache),
        1 => (1u8..3).prop_map(|n| Action::InjectFailures { n }),
        1 => (0u8..7).prop_map(|which| Action::UpdateSettings { which }),
        1 => (0u8..8).prop_map(|gib| Action::SetCapacity { gib }),
        1 => prop_oneof![3 => Just(0u8), 1 => 1u8..=50].prop_map(|percent| Action::SetFaultRate { percent }),
    ]
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
    let mut shadow = Shadow::new(preset("default"));
    for _ in 0..4096 {
        shadow.apply(&Action::Malloc { size: 512, stream: 0 });
    }
    assert_eq!(shadow.allocator().stats().segment.all.current, 1);
    assert_eq!(shadow.allocator().stats().inactive_split.all.current, 0);
    shadow.finish();
}

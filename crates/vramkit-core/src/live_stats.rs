//! The statistics as the allocator keeps them while it runs, and PyTorch's
//! update points (spec section 7).
//!
//! PyTorch updates each of its nine arrays twice per change, the aggregate
//! and the block's pool kind, and each `Stat` in up to three places
//! (current, allocated or freed, peak). A cache-hit malloc+free pair makes
//! a dozen such changes; done that way they were half of the pair's time.
//! Here a change touches only what cannot be worked out later:
//!
//! - the aggregate's current, allocated and freed are the sums of the two
//!   pool kinds' (every change goes to both in PyTorch, so they always
//!   are): only its peak is kept, checked on increases;
//! - `freed` is not kept: it is `allocated - current + base`, where `base`
//!   is `current` at the last `reset_accumulated` (`freed` restarts at 0
//!   there), so a decrease writes one number.
//!
//! [`LiveStats::view`] gives every figure of [`DeviceStats`] back, exactly.
//! The allocator changes the counts only through the `account_*` methods at
//! the bottom of this file, each called from one place in the allocator,
//! so every update point of PyTorch's has one line here.

use crate::rounding::PoolKind;
use crate::stats::{DeviceStats, Stat, StatArray};

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

/// One more of a count kept whole (the oversize counts, which have no pool kinds).
#[inline]
fn increase(s: &mut Stat, peak: Peak) {
    s.current += 1;
    s.allocated += 1;
    if peak == Peak::MayRise && s.current > s.peak {
        s.peak = s.current;
    }
}

/// One fewer of a count kept whole.
#[inline]
fn decrease(s: &mut Stat) {
    s.current -= 1;
    s.freed += 1;
}

/// One statistic of one pool kind. Its `freed` is `allocated - current + base`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Count {
    current: i64,
    peak: i64,
    allocated: i64,
    /// `current` when `freed` last restarted at 0.
    base: i64,
}

impl Count {
    #[inline(always)]
    fn freed(&self) -> i64 {
        self.allocated - self.current + self.base
    }

    fn view(&self) -> Stat {
        Stat { current: self.current, peak: self.peak, allocated: self.allocated, freed: self.freed() }
    }
}

/// What one change does to a count of the block's pool kind (`c`), given
/// the other kind's (`other`) and the aggregate's peak.
#[inline(always)]
fn inc(c: &mut Count, other: &Count, all_peak: &mut i64, amount: u64, peak: Peak) {
    let amount = amount as i64;
    c.current += amount;
    c.allocated += amount;
    // Past the first steps of a program a new peak is rare: a branch
    // the processor predicts, and no store, beats a conditional move.
    if peak == Peak::MayRise {
        if c.current > c.peak {
            c.peak = c.current;
        }
        let all = c.current + other.current;
        if all > *all_peak {
            *all_peak = all;
        }
    } else {
        debug_assert!(c.current <= c.peak && c.current + other.current <= *all_peak, "an increase past the peak it was said not to reach");
    }
}

#[inline(always)]
fn dec(c: &mut Count, amount: u64) {
    c.current -= amount as i64;
}

/// A signed change: an increase when positive, a decrease when negative.
#[inline(always)]
fn add(c: &mut Count, other: &Count, all_peak: &mut i64, delta: i64, peak: Peak) {
    if delta >= 0 {
        inc(c, other, all_peak, delta as u64, peak)
    } else {
        dec(c, delta.unsigned_abs())
    }
}

/// The nine arrays' counts of one pool kind, or (as `i64`) the
/// aggregates' peaks. One pool kind's counts lie together, so that an
/// update point finds them all from one address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Arrays<T> {
    allocation: T,
    segment: T,
    active: T,
    inactive_split: T,
    allocated_bytes: T,
    reserved_bytes: T,
    active_bytes: T,
    inactive_split_bytes: T,
    requested_bytes: T,
}

impl<T> Arrays<T> {
    /// Every array's entry, in PyTorch's order (`STAT_ARRAY_NAMES`).
    fn each(&mut self) -> [&mut T; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }
}

/// PyTorch's `DeviceStats` as the allocator keeps them (see the module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveStats {
    small: Arrays<Count>,
    large: Arrays<Count>,
    all_peak: Arrays<i64>,
    oversize_allocations: Stat,
    oversize_segments: Stat,
    num_alloc_retries: i64,
    num_ooms: i64,
    num_sync_all_streams: i64,
    num_device_alloc: i64,
    num_device_free: i64,
    max_split_size: i64,
}

/// The aggregate `current` of the three byte counts a replay samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CurrentBytes {
    /// `allocated_bytes.all.current`.
    pub allocated: u64,
    /// `reserved_bytes.all.current`.
    pub reserved: u64,
    /// `requested_bytes.all.current`.
    pub requested: u64,
}

impl LiveStats {
    /// No counts yet; `max_split_size` in bytes, -1 when unlimited.
    pub(crate) fn new(max_split_size: i64) -> LiveStats {
        LiveStats { max_split_size, ..LiveStats::default() }
    }

    /// The counts of `pool`'s kind, the other kind's, and the aggregates' peaks.
    #[inline(always)]
    fn kinds(&mut self, pool: PoolKind) -> (&mut Arrays<Count>, &Arrays<Count>, &mut Arrays<i64>) {
        match pool {
            PoolKind::Small => (&mut self.small, &self.large, &mut self.all_peak),
            PoolKind::Large => (&mut self.large, &self.small, &mut self.all_peak),
        }
    }

    /// One array as PyTorch reports it.
    fn array(&self, of: impl Fn(&Arrays<Count>) -> Count, all_peak: i64) -> StatArray {
        let (s, l) = (of(&self.small), of(&self.large));
        StatArray {
            all: Stat { current: s.current + l.current, peak: all_peak, allocated: s.allocated + l.allocated, freed: s.freed() + l.freed() },
            small_pool: s.view(),
            large_pool: l.view(),
        }
    }

    /// Every figure of `torch.cuda.memory_stats()`.
    pub(crate) fn view(&self) -> DeviceStats {
        let p = &self.all_peak;
        DeviceStats {
            allocation: self.array(|k| k.allocation, p.allocation),
            segment: self.array(|k| k.segment, p.segment),
            active: self.array(|k| k.active, p.active),
            inactive_split: self.array(|k| k.inactive_split, p.inactive_split),
            allocated_bytes: self.array(|k| k.allocated_bytes, p.allocated_bytes),
            reserved_bytes: self.array(|k| k.reserved_bytes, p.reserved_bytes),
            active_bytes: self.array(|k| k.active_bytes, p.active_bytes),
            inactive_split_bytes: self.array(|k| k.inactive_split_bytes, p.inactive_split_bytes),
            requested_bytes: self.array(|k| k.requested_bytes, p.requested_bytes),
            oversize_allocations: self.oversize_allocations,
            oversize_segments: self.oversize_segments,
            num_alloc_retries: self.num_alloc_retries,
            num_ooms: self.num_ooms,
            num_sync_all_streams: self.num_sync_all_streams,
            num_device_alloc: self.num_device_alloc,
            num_device_free: self.num_device_free,
            num_oom_rejections: 0,
            max_split_size: self.max_split_size,
        }
    }

    /// Allocated, reserved and requested bytes now, without the rest of [`view`](Self::view).
    #[inline]
    pub(crate) fn current_bytes(&self) -> CurrentBytes {
        let (s, l) = (&self.small, &self.large);
        CurrentBytes {
            allocated: (s.allocated_bytes.current + l.allocated_bytes.current) as u64,
            reserved: (s.reserved_bytes.current + l.reserved_bytes.current) as u64,
            requested: (s.requested_bytes.current + l.requested_bytes.current) as u64,
        }
    }

    /// The peak of `reserved_bytes.all`.
    #[inline]
    pub(crate) fn peak_reserved_bytes(&self) -> i64 {
        self.all_peak.reserved_bytes
    }

    /// `num_device_alloc + num_device_free`.
    #[inline]
    pub(crate) fn device_calls(&self) -> i64 {
        self.num_device_alloc + self.num_device_free
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub(crate) fn reset_peak(&mut self) {
        for ((s, l), all) in self.small.each().into_iter().zip(self.large.each()).zip(self.all_peak.each()) {
            s.peak = s.current;
            l.peak = l.current;
            *all = s.current + l.current;
        }
        for s in [&mut self.oversize_allocations, &mut self.oversize_segments] {
            s.peak = s.current;
        }
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub(crate) fn reset_accumulated(&mut self) {
        for c in self.small.each().into_iter().chain(self.large.each()) {
            c.allocated = 0;
            c.base = c.current;
        }
        for s in [&mut self.oversize_allocations, &mut self.oversize_segments] {
            s.allocated = 0;
            s.freed = 0;
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// After a `restore`: the arrays' counts as if reached by increases
    /// from nothing (allocated = peak = current, freed 0); the rest as
    /// after an accumulated reset.
    pub(crate) fn start_from_current(&mut self) {
        self.reset_accumulated();
        self.reset_peak();
        for c in self.small.each().into_iter().chain(self.large.each()) {
            c.allocated = c.current;
            c.base = 0;
        }
    }
}

// --- update points -----------------------------------------------------------
// Each method below is PyTorch's update at one place of the algorithm; the
// comment names the spec section.

impl LiveStats {
    /// 3.2: a new `cudaMalloc` segment.
    #[inline]
    pub(crate) fn account_segment_alloc(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        let (k, o, p) = self.kinds(pool);
        inc(&mut k.segment, &o.segment, &mut p.segment, 1, Peak::MayRise);
        inc(&mut k.reserved_bytes, &o.reserved_bytes, &mut p.reserved_bytes, size, Peak::MayRise);
        if oversize {
            increase(&mut self.oversize_segments, Peak::MayRise);
        }
        self.num_device_alloc += 1;
    }

    /// 5.1: a segment handed back with `cudaFree`.
    #[inline]
    pub(crate) fn account_segment_free(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        let (k, _, _) = self.kinds(pool);
        dec(&mut k.segment, 1);
        dec(&mut k.reserved_bytes, size);
        if oversize {
            decrease(&mut self.oversize_segments);
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
        let (k, o, p) = self.kinds(pool);
        if inactive_split_delta != (0, 0) {
            add(&mut k.inactive_split, &o.inactive_split, &mut p.inactive_split, inactive_split_delta.0, peak);
            add(&mut k.inactive_split_bytes, &o.inactive_split_bytes, &mut p.inactive_split_bytes, inactive_split_delta.1, peak);
        }
        inc(&mut k.allocation, &o.allocation, &mut p.allocation, 1, peak);
        inc(&mut k.allocated_bytes, &o.allocated_bytes, &mut p.allocated_bytes, size, peak);
        inc(&mut k.active, &o.active, &mut p.active, 1, peak);
        inc(&mut k.active_bytes, &o.active_bytes, &mut p.active_bytes, size, peak);
        inc(&mut k.requested_bytes, &o.requested_bytes, &mut p.requested_bytes, requested, Peak::MayRise);
        if oversize {
            increase(&mut self.oversize_allocations, peak);
        }
    }

    /// 4.1: the user freed a block (`free_requested`).
    #[inline(always)]
    pub(crate) fn account_free_requested(&mut self, pool: PoolKind, size: u64, oversize: bool) {
        let (k, _, _) = self.kinds(pool);
        dec(&mut k.allocation, 1);
        dec(&mut k.allocated_bytes, size);
        if oversize {
            decrease(&mut self.oversize_allocations);
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
        let (k, o, p) = self.kinds(pool);
        if inactive_split_delta != (0, 0) {
            add(&mut k.inactive_split, &o.inactive_split, &mut p.inactive_split, inactive_split_delta.0, Peak::MayRise);
            add(&mut k.inactive_split_bytes, &o.inactive_split_bytes, &mut p.inactive_split_bytes, inactive_split_delta.1, Peak::MayRise);
        }
        dec(&mut k.active, 1);
        dec(&mut k.active_bytes, size_before_merge);
        dec(&mut k.requested_bytes, requested);
    }

    /// A segment rebuilt from a snapshot (`restore`): counted as if allocated.
    pub(crate) fn account_restored_segment(&mut self, pool: PoolKind, size: u64, oversize: bool, inactive_split: (i64, i64)) {
        let (k, o, p) = self.kinds(pool);
        inc(&mut k.segment, &o.segment, &mut p.segment, 1, Peak::MayRise);
        inc(&mut k.reserved_bytes, &o.reserved_bytes, &mut p.reserved_bytes, size, Peak::MayRise);
        add(&mut k.inactive_split, &o.inactive_split, &mut p.inactive_split, inactive_split.0, Peak::MayRise);
        add(&mut k.inactive_split_bytes, &o.inactive_split_bytes, &mut p.inactive_split_bytes, inactive_split.1, Peak::MayRise);
        if oversize {
            increase(&mut self.oversize_segments, Peak::MayRise);
        }
    }

    /// 6.3: pages mapped into an expandable segment. No segment count, no
    /// oversize count: PyTorch keeps only reserved bytes for these.
    #[inline]
    pub(crate) fn account_map(&mut self, pool: PoolKind, size: u64) {
        let (k, o, p) = self.kinds(pool);
        inc(&mut k.reserved_bytes, &o.reserved_bytes, &mut p.reserved_bytes, size, Peak::MayRise);
        self.num_device_alloc += 1;
    }

    /// 6.4: pages unmapped from an expandable segment.
    #[inline]
    pub(crate) fn account_unmap(&mut self, pool: PoolKind, size: u64) {
        let (k, _, _) = self.kinds(pool);
        dec(&mut k.reserved_bytes, size);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::STAT_ARRAY_NAMES;
    use proptest::prelude::*;

    /// PyTorch's way: every change to the aggregate and the pool kind's
    /// entry, each `Stat` updated whole.
    #[derive(Default)]
    struct Eager(DeviceStats);

    impl Eager {
        fn change(&mut self, name: &str, pool: PoolKind, delta: i64, peak: Peak) {
            let array = self.0.array_mut(name).expect("a listed name");
            let kind = match pool {
                PoolKind::Small => &mut array.small_pool,
                PoolKind::Large => &mut array.large_pool,
            };
            for s in [kind, &mut array.all] {
                if delta >= 0 {
                    s.current += delta;
                    s.allocated += delta;
                    if peak == Peak::MayRise {
                        s.peak = s.peak.max(s.current);
                    }
                } else {
                    s.current += delta;
                    s.freed -= delta;
                }
            }
        }

        fn for_each(&mut self, f: impl Fn(&mut Stat)) {
            for name in STAT_ARRAY_NAMES {
                let a = self.0.array_mut(name).expect("listed");
                for s in [&mut a.all, &mut a.small_pool, &mut a.large_pool] {
                    f(s);
                }
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// A block of `size` handed out and freed again (`again`: at once,
        /// so the request takes the same counts back, as a parked free does).
        Block { small: bool, size: u64, requested: u64, split: (i64, i64), again: bool },
        Segment { small: bool, size: u64, oversize: bool },
        Map { small: bool, size: u64 },
        ResetPeak,
        ResetAccumulated,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<bool>(), 1u64..1 << 24, 0u64..1 << 24, (-1i64..=1, -4096i64..4096), any::<bool>())
                .prop_map(|(small, size, requested, split, again)| Op::Block { small, size, requested, split, again }),
            2 => (any::<bool>(), 1u64..1 << 26, any::<bool>()).prop_map(|(small, size, oversize)| Op::Segment { small, size, oversize }),
            1 => (any::<bool>(), 1u64..1 << 26).prop_map(|(small, size)| Op::Map { small, size }),
            1 => Just(Op::ResetPeak),
            1 => Just(Op::ResetAccumulated),
        ]
    }

    fn kind(small: bool) -> PoolKind {
        if small {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    proptest! {
        /// The counts kept here give every figure the eager way gives,
        /// peaks and resets included.
        #[test]
        fn the_view_equals_updating_every_stat_whole(ops in proptest::collection::vec(op(), 1..120)) {
            let (mut live, mut eager) = (LiveStats::new(-1), Eager::default());
            eager.0.max_split_size = -1;
            // Blocks handed out and not yet freed: freed in turn, later.
            let mut out: Vec<(PoolKind, u64, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Block { small, size, requested, split, again } => {
                        let pool = kind(small);
                        live.account_block_allocated(pool, size, requested, false, split, Peak::MayRise);
                        eager.change("inactive_split", pool, split.0, Peak::MayRise);
                        eager.change("inactive_split_bytes", pool, split.1, Peak::MayRise);
                        for (name, d) in [("allocation", 1), ("allocated_bytes", size as i64), ("active", 1), ("active_bytes", size as i64), ("requested_bytes", requested as i64)] {
                            eager.change(name, pool, d, Peak::MayRise);
                        }
                        if again {
                            // Freed, and the same request served again from the same counts.
                            live.account_free_requested(pool, size, false);
                            live.account_free_completed(pool, size, requested, (0, 0));
                            live.account_block_allocated(pool, size, requested, false, (0, 0), Peak::Unchanged);
                            for (name, d) in [("allocation", 1), ("allocated_bytes", size as i64), ("active", 1), ("active_bytes", size as i64), ("requested_bytes", requested as i64)] {
                                eager.change(name, pool, -d, Peak::MayRise);
                                eager.change(name, pool, d, Peak::MayRise);
                            }
                        }
                        out.push((pool, size, requested));
                        if out.len() > 3 {
                            let (pool, size, requested) = out.remove(0);
                            live.account_free_requested(pool, size, false);
                            live.account_free_completed(pool, size, requested, (-split.0, -split.1));
                            for (name, d) in [("allocation", 1), ("allocated_bytes", size as i64), ("active", 1), ("active_bytes", size as i64), ("requested_bytes", requested as i64)] {
                                eager.change(name, pool, -d, Peak::MayRise);
                            }
                            eager.change("inactive_split", pool, -split.0, Peak::MayRise);
                            eager.change("inactive_split_bytes", pool, -split.1, Peak::MayRise);
                        }
                    }
                    Op::Segment { small, size, oversize } => {
                        let pool = kind(small);
                        live.account_segment_alloc(pool, size, oversize);
                        live.account_segment_free(pool, size / 2, oversize);
                        eager.change("segment", pool, 1, Peak::MayRise);
                        eager.change("reserved_bytes", pool, size as i64, Peak::MayRise);
                        eager.change("segment", pool, -1, Peak::MayRise);
                        eager.change("reserved_bytes", pool, -((size / 2) as i64), Peak::MayRise);
                        eager.0.num_device_alloc += 1;
                        eager.0.num_device_free += 1;
                        if oversize {
                            let s = &mut eager.0.oversize_segments;
                            s.allocated += 1;
                            s.freed += 1;
                            s.peak = s.peak.max(s.current + 1);
                        }
                    }
                    Op::Map { small, size } => {
                        live.account_map(kind(small), size);
                        eager.change("reserved_bytes", kind(small), size as i64, Peak::MayRise);
                        eager.0.num_device_alloc += 1;
                    }
                    Op::ResetPeak => {
                        live.reset_peak();
                        eager.for_each(|s| s.peak = s.current);
                        eager.0.oversize_segments.peak = eager.0.oversize_segments.current;
                    }
                    Op::ResetAccumulated => {
                        live.reset_accumulated();
                        eager.for_each(|s| {
                            s.allocated = 0;
                            s.freed = 0;
                        });
                        let s = &mut eager.0.oversize_segments;
                        (s.allocated, s.freed) = (0, 0);
                        (eager.0.num_device_alloc, eager.0.num_device_free) = (0, 0);
                    }
                }
                prop_assert_eq!(live.view(), eager.0);
                let now = live.current_bytes();
                prop_assert_eq!(
                    (now.allocated as i64, now.reserved as i64, now.requested as i64),
                    (eager.0.allocated_bytes.all.current, eager.0.reserved_bytes.all.current, eager.0.requested_bytes.all.current)
                );
                prop_assert_eq!(live.peak_reserved_bytes(), eager.0.reserved_bytes.all.peak);
            }
        }
    }

    /// After a restore the counts start where they stand: allocated and
    /// peak at the current value, nothing freed, in every entry.
    #[test]
    fn a_restored_state_starts_from_its_current_values() {
        let mut live = LiveStats::new(-1);
        live.account_restored_segment(PoolKind::Large, 20 << 20, true, (1, 4 << 20));
        live.account_restored_segment(PoolKind::Small, 2 << 20, false, (0, 0));
        live.account_block_allocated(PoolKind::Large, 16 << 20, 15 << 20, false, (0, 0), Peak::MayRise);
        live.account_free_requested(PoolKind::Large, 16 << 20, false);
        live.start_from_current();
        let view = live.view();
        for name in STAT_ARRAY_NAMES {
            let a = view.array(name).expect("listed");
            for s in [a.all, a.small_pool, a.large_pool] {
                assert_eq!((s.allocated, s.peak, s.freed), (s.current, s.current, 0), "{name}");
            }
        }
        assert_eq!(view.reserved_bytes.all.current, 22 << 20);
        assert_eq!(view.active.large_pool.current, 1, "freed by the user, not yet reusable");
        assert_eq!(view.oversize_segments.current, 1);
    }
}

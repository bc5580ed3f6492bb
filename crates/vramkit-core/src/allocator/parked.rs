//! A parked free: the merge of a freed block with the free block after it,
//! put off until something needs it, and never done when the next request
//! would only split the merged block at the same place again.
//!
//! A program that frees a tensor and asks for one of the same size (every
//! training step does) makes PyTorch merge the freed block with its free
//! neighbour and then split the result again where it was: the same two
//! blocks, the same free-set entry, every time. Here `free` accounts for the
//! merge at once (statistics exactly as after it) but leaves the two blocks
//! as they are, *parked*: the freed block in no free set (but still in the
//! address map, not allocated, so that taking it back adds no entry), its
//! neighbour in its free set under its own key. The state PyTorch would be
//! in is the merged one, and everything that looks at blocks sees that one:
//!
//! - the next `malloc` asks best fit with the merged block in place of the
//!   neighbour ([`CachingAllocator::find_free_block`]); when that picks the
//!   merged block and would split it back into the same two, it hands the
//!   parked block out again (`unpark`), with the statistics of that split;
//!   when it would split it elsewhere, the split moves to where the pair
//!   lies (`resplit`); else the merge is done and the block found is used;
//! - every other operation that reads or changes blocks first does the
//!   merge (`settle_parked`), exactly as `free` would have, age included;
//! - `segments()` shows the pair as the one block it stands for, and the
//!   invariant checker checks a settled copy.
//!
//! Only the plain case is parked: history off, no expandable segments ever
//! made, a default pool, ties in size not broken by block age (2.12 gives a
//! split's part a new counter), the freed block with no free block before
//! it, nothing recorded on either block (stream uses, stacks).
//!
//! **Repeats.** A training step frees a block and asks for the same size
//! again, over and over: the second round trip does exactly what the first
//! did, with the same arguments to the same statistics. So the first one,
//! done in full, is remembered ([`Repeat`]), and while nothing else has
//! happened in between, the next `free` of that address and the next
//! request of that size and stream redo it from the record: no address-map
//! lookup, no parking or best-fit checks. "Nothing else" is kept by the
//! same discipline as the parked free's: every other operation settles it
//! first, which forgets the record, and so does any other `malloc` or
//! `free`. Garbage collection (which ages blocks on every search) and
//! captures (which route requests elsewhere) take the full path.

use super::{CachingAllocator, LARGE_POOL, SMALL_POOL};
use crate::block::{BlockId, PoolIdx};
use crate::config::SizeTies;
use crate::device::{Device, StreamId};
use crate::live_stats::Peak;
use crate::pool::{FreeEntry, FreeKey};
use crate::rounding::PoolKind;

/// A freed block whose merge with the free block after it is put off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parked {
    /// The freed block: not allocated, in no free set.
    pub block: BlockId,
    /// Its upper neighbour: free, in its pool's free set under its own key.
    pub next: BlockId,
    pub pool: PoolIdx,
    pub stream: StreamId,
    /// The pool's `get_free_blocks_call_count` at the free: the merged
    /// block's age starts there.
    pub gc_count_base: u64,
}

/// A split best fit chose: `block` was cut from the low end of the block
/// that is now `rest`, and nothing has entered or left the pool's free set
/// since (`generation`). Were `block` freed and merged back, best fit for
/// its size would choose the merged block again: it was chosen from these
/// same contents, with `rest` in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitMemo {
    pub block: BlockId,
    pub rest: BlockId,
    pub generation: u64,
}

/// A parked free and the request that took its block back, both done in
/// full: what doing them again does (see "Repeats").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Repeat {
    /// The parked free the `free` made.
    pub parked: Parked,
    /// The freed block's address.
    pub addr: u64,
    /// Its pool's kind, size, and whether that size is oversize.
    pub kind: PoolKind,
    pub size: u64,
    pub oversize: bool,
    /// What the free did to `inactive_split` (count, bytes).
    pub freed_split: (i64, i64),
    /// The bytes the request that took the block back asked for.
    pub orig_size: u64,
    /// What taking it back did to `inactive_split`.
    pub taken_split: (i64, i64),
}

/// What the merge a parked free stands for did, for the statistics.
pub(crate) struct ParkedMerge {
    /// Bytes of the neighbour merged in.
    pub subsumed: u64,
    /// The merged block has a neighbour (its segment stays split).
    pub split: bool,
    /// Bytes of the merged block.
    pub size: u64,
}

impl<D: Device> CachingAllocator<D> {
    /// Parks the free of block `id` (just freed, not merged) if it is the
    /// plain case; `None` leaves the merge to the caller.
    #[inline(always)]
    pub(crate) fn park(&mut self, id: BlockId) -> Option<ParkedMerge> {
        let b = &self.blocks[id];
        let plain = self.merge_may_wait()
            && self.expandable_segments.is_empty()
            && (b.pool == LARGE_POOL || b.pool == SMALL_POOL)
            && b.extras.is_none();
        let next = b.next?;
        if !plain || b.prev.is_some_and(|p| !self.blocks[p].is_active()) {
            return None;
        }
        let n = &self.blocks[next];
        if n.is_active() || n.extras.is_some() {
            return None;
        }
        // Only expandable segments have unmapped blocks, and none was made.
        debug_assert!(b.mapped && n.mapped);
        let merged = ParkedMerge { subsumed: n.size, split: b.prev.is_some() || n.next.is_some(), size: b.size + n.size };
        let gc_count_base = self.pools[b.pool.0 as usize].get_free_blocks_call_count;
        self.parked = Some(Parked { block: id, next, pool: b.pool, stream: b.stream, gc_count_base });
        Some(merged)
    }

    /// Whether a free's merge may be put off or left out (a parked free, a
    /// temporary): frees may be parked, no history records the steps, and
    /// ties in size are not broken by block age (2.12 gives a split's part
    /// a new counter, which the merged block would keep).
    #[inline(always)]
    pub(crate) fn merge_may_wait(&self) -> bool {
        self.parking && self.history.is_none() && self.config.compat.size_ties != SizeTies::BlockAge
    }

    /// Whether `malloc(orig_size, stream)` now repeats the round trip in
    /// `self.repeat` (see "Repeats").
    #[inline(always)]
    pub(crate) fn repeats(&self, orig_size: u64, stream: StreamId) -> bool {
        self.repeat.is_some_and(|r| orig_size == r.orig_size && stream == r.parked.stream)
            && self.parked.is_some()
            && self.captures_underway.is_empty()
    }

    /// Does the merge of the parked free, if there is one, as `free` would
    /// have done it; forgets the round trip to repeat.
    #[inline(always)]
    pub(crate) fn settle_parked(&mut self) {
        self.repeat = None;
        if let Some(p) = self.parked.take() {
            self.settle(p);
        }
    }

    /// After the request for `orig_size` bytes took the parked free `p`
    /// back whole, moving `inactive_split` by `taken_split`: remembers
    /// the round trip, to repeat. The free it repeats is the one that
    /// parked `p`: the pair lies as it did then, so what that free did to
    /// the statistics follows from it (as `complete_free` works it out
    /// for a parked merge).
    #[inline(always)]
    pub(crate) fn begin_repeat(&mut self, p: Parked, orig_size: u64, taken_split: (i64, i64)) {
        if self.gc_active() {
            return;
        }
        let (b, n) = (&self.blocks[p.block], &self.blocks[p.next]);
        let freed_split = if b.prev.is_some() || n.next.is_some() { (0, b.size as i64) } else { (-1, -(n.size as i64)) };
        let (addr, size, kind) = (b.addr, b.size, self.pools[p.pool.0 as usize].kind);
        let oversize = size >= self.config.max_split_size();
        self.repeat = Some(Repeat { parked: p, addr, kind, size, oversize, freed_split, orig_size, taken_split });
    }

    /// `malloc(orig_size, stream)` as a repeat of the round trip in
    /// `self.repeat`, if it is one: its parked free taken back as the last
    /// request took it.
    #[inline(always)]
    pub(crate) fn malloc_again(&mut self, orig_size: u64, stream: StreamId) -> Option<u64> {
        if !self.repeats(orig_size, stream) {
            return None;
        }
        let r = self.repeat.as_ref()?;
        debug_assert_eq!(self.parked, Some(r.parked));
        let (block, next, kind, size, oversize, taken_split, addr) =
            (r.parked.block, r.parked.next, r.kind, r.size, r.oversize, r.taken_split, r.addr);
        self.parked = None;
        self.blocks[block].allocated = true;
        // The rest keeps the size last asked of the block (`unpark`).
        self.blocks[next].requested_size = orig_size;
        self.stats.account_block_allocated(kind, size, orig_size, oversize, taken_split, Peak::Unchanged);
        Some(addr)
    }

    /// `free(addr)` as a repeat of the free in `self.repeat`, if it is one
    /// (the block a repeat's request handed out); returns the bytes that
    /// request asked for.
    #[inline(always)]
    pub(crate) fn free_again(&mut self, addr: u64) -> Option<u64> {
        let r = self.repeat.as_ref()?;
        if addr != r.addr || self.parked.is_some() {
            return None;
        }
        let (parked, kind, size, oversize, requested, freed_split) = (r.parked, r.kind, r.size, r.oversize, r.orig_size, r.freed_split);
        self.blocks[parked.block].allocated = false;
        self.stats.account_free_requested(kind, size, oversize);
        self.parked = Some(parked);
        self.stats.account_free_completed(kind, size, requested, freed_split);
        Some(requested)
    }

    #[inline(never)]
    fn settle(&mut self, p: Parked) {
        let left = self.allocated.remove(self.blocks[p.block].addr);
        debug_assert_eq!(left, Some(p.block), "a parked block keeps its address-map entry");
        let (merged, _) = self.merge_and_pool(p.block);
        debug_assert_eq!(merged, 1);
        self.blocks[p.block].gc_count_base = p.gc_count_base;
    }

    /// The merged block a parked free stands for, as a free-set entry.
    fn parked_entry(&self, p: &Parked) -> FreeEntry {
        let (b, n) = (&self.blocks[p.block], &self.blocks[p.next]);
        FreeEntry {
            stream: p.stream,
            size: b.size + n.size,
            addr: b.addr,
            counter: b.registration_counter,
            id: p.block,
            index: crate::pool::NOWHERE,
        }
    }

    /// Best fit's first candidate for `size` on the parked free's pool and
    /// stream, as if its merge were done: the neighbour's entry does not
    /// count, the merged block does. Inlined into `find_free_block`, for
    /// the reason given there.
    #[inline(always)]
    pub(crate) fn parked_lower_bound(&self, p: &Parked, size: u64) -> Option<FreeEntry> {
        let set = &self.pools[p.pool.0 as usize].blocks;
        let stored = match set.lower_bound(p.stream, size) {
            Some(e) if e.id == p.next => set.successor(e),
            other => other,
        };
        let merged = Some(self.parked_entry(p)).filter(|m| m.size >= size);
        match (stored, merged) {
            (Some(s), Some(m)) => Some(if s.key() < m.key() { s } else { m }),
            (s, m) => s.or(m),
        }
    }

    /// The parked free, if best fit for `params` would pick the block it
    /// stands for and split it back into the same two blocks (`None` also
    /// where that takes more than a look at the neighbour's free-set
    /// neighbours: the caller then settles and searches).
    #[inline(always)]
    pub(crate) fn unparks(&self, params: &super::malloc::AllocParams) -> Option<Parked> {
        let p = self.parked?;
        let (b, n) = (&self.blocks[p.block], &self.blocks[p.next]);
        let size = params.size;
        if (params.pool, params.stream, size) != (p.pool, p.stream, b.size) {
            return None;
        }
        // 3.1: the merged block is the first candidate iff no other free
        // block's key lies between (size, 0, 0) and its own: so it was
        // when best fit split it, if the free set is as that split left it;
        // else below the neighbour's entry the one before it must be
        // smaller than `size`, and above it the one after it sort after the merge.
        let merged = FreeKey { size: b.size + n.size, counter: b.registration_counter, addr: b.addr };
        let set = &self.pools[p.pool.0 as usize].blocks;
        let first = self.split_memo == Some(SplitMemo { block: p.block, rest: p.next, generation: set.generation()}) || {
            let (before, after) = set.around(p.stream, FreeKey::of(n))?;
            before.is_none_or(|k| k.size < size) && after.is_none_or(|k| k > merged)
        };
        // ... and the oversize rules let it be used, and 3.3 splits it with
        // the neighbour as the rest.
        let max_split_size = self.config.max_split_size();
        let usable = if size < max_split_size {
            merged.size < max_split_size
        } else {
            merged.size < size.saturating_add(self.config.oversize_tolerance())
        };
        self.max_split_watch.note_usable(size, merged.size, self.config.oversize_tolerance());
        (first && usable && self.should_split(p.pool, size, n.size)).then_some(p)
    }

    /// Hands the parked block out again for `params`: what splitting the
    /// merged block at the same place would leave. The neighbour becomes
    /// that split's rest, which is the merged block's record: its age
    /// restarts and it keeps the (stale) size last asked of the freed
    /// block, which snapshots show. Returns the address and how the split
    /// moves `inactive_split`.
    #[inline(always)]
    pub(crate) fn unpark(&mut self, p: Parked, params: &super::malloc::AllocParams) -> (u64, (i64, i64)) {
        self.parked = None;
        self.remember_split(p.pool, p.block, p.next);
        let gc_count_base = self.pools[p.pool.0 as usize].get_free_blocks_call_count;
        let b = &mut self.blocks[p.block];
        b.allocated = true;
        let last_requested = std::mem::replace(&mut b.requested_size, params.orig_size);
        let n = &mut self.blocks[p.next];
        n.gc_count_base = gc_count_base;
        n.requested_size = last_requested;
        let (rest, rest_split) = (n.size, n.next.is_some());
        let b = &self.blocks[p.block];
        let inactive_split = if b.prev.is_some() || rest_split { (0, -(params.size as i64)) } else { (1, rest as i64) };
        (b.addr, inactive_split)
    }

    /// Hands the parked block out for `params`, which best fit serves
    /// from the merged block the parked free stands for, when 3.3 splits
    /// it: the split moves to `params.size` bytes from the block's start.
    /// The freed block is the part handed out and the neighbour the rest,
    /// as in `unpark` (the rest's record restarts its age and keeps the
    /// size last asked of the freed block); the rest's free-set entry is
    /// rekeyed in place. Returns how the split moves `inactive_split`, or
    /// `None` (nothing changed) when 3.3 would hand the merged block out whole.
    #[inline(always)]
    pub(crate) fn resplit(&mut self, p: Parked, params: &super::malloc::AllocParams) -> Option<(i64, i64)> {
        let (b, n) = (&self.blocks[p.block], &self.blocks[p.next]);
        let (size, merged) = (params.size, b.size + n.size);
        debug_assert!(size <= merged && (params.pool, params.stream) == (p.pool, p.stream));
        if !self.should_split(p.pool, size, merged - size) {
            return None;
        }
        debug_assert_eq!(b.registration_counter, n.registration_counter, "the parts of one segment share its counter");
        let (addr, split, old_key) = (b.addr, b.prev.is_some() || n.next.is_some(), FreeKey::of(n));
        self.parked = None;
        let b = &mut self.blocks[p.block];
        b.allocated = true;
        b.size = size;
        let last_requested = std::mem::replace(&mut b.requested_size, params.orig_size);
        let n = &mut self.blocks[p.next];
        n.addr = addr + size;
        n.size = merged - size;
        n.requested_size = last_requested;
        let hint = self.pools[p.pool.0 as usize].blocks.placed(p.next);
        self.put_into_pool(p.next, Some((old_key, hint)));
        self.remember_split(p.pool, p.block, p.next);
        Some(if split { (0, -(size as i64)) } else { (1, (merged - size) as i64) })
    }

    /// Remembers that best fit split `block` off the low end of `rest`, in `pool`.
    #[inline(always)]
    pub(crate) fn remember_split(&mut self, pool: PoolIdx, block: BlockId, rest: BlockId) {
        let generation = self.pools[pool.0 as usize].blocks.generation();
        self.split_memo = Some(SplitMemo { block, rest, generation });
    }

    /// The state with the parked free's merge done, for readers that walk
    /// every block (the invariant checker).
    pub(crate) fn settled_copy(&self) -> CachingAllocator<impl Device> {
        self.clone_state_onto(super::what_if::WhatIfDevice::like(&self.device))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::what_if::WhatIfDevice;
    use super::*;
    use crate::config::{AllocatorConfig, Compat};
    use crate::history::HistoryConfig;
    use crate::DeviceAddr;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[derive(Clone, Debug)]
    pub(in crate::allocator) enum Action {
        Malloc { size: u64, stream: u8 },
        /// Frees the n-th live block (of those this test holds).
        Free(usize),
        /// Frees the newest block and asks for the same size again.
        Again,
        /// A request freed straight after: `malloc_then_free` where the
        /// parking allocator takes it in one step (`temporary.rs`), else
        /// the two calls.
        Temporary { size: u64, stream: u8 },
        RecordStream { n: usize, stream: u8 },
        EmptyCache,
        History(bool),
        Snapshot,
    }

    fn action() -> impl Strategy<Value = Action> {
        let size = prop_oneof![1u64..=4096, 4097..=MIB, (MIB + 1)..=(24 * MIB), Just(3 * MIB), Just(512), Just(4096)];
        let temporary = prop_oneof![9 => size.clone(), 1 => Just(0)];
        prop_oneof![
            8 => (size, 0u8..2).prop_map(|(size, stream)| Action::Malloc { size, stream }),
            6 => any::<usize>().prop_map(Action::Free),
            6 => Just(Action::Again),
            5 => (temporary, 0u8..2).prop_map(|(size, stream)| Action::Temporary { size, stream }),
            1 => (any::<usize>(), 0u8..2).prop_map(|(n, stream)| Action::RecordStream { n, stream }),
            1 => Just(Action::EmptyCache),
            1 => any::<bool>().prop_map(Action::History),
            1 => Just(Action::Snapshot),
        ]
    }

    /// Settings under which parking differs most: each tie rule, the split
    /// threshold, rounding, garbage collection (block ages) with a limit.
    pub(in crate::allocator) fn configs() -> Vec<AllocatorConfig> {
        let with = |conf: &str, compat: Compat| AllocatorConfig::parse_with_compat(conf, compat).expect("valid");
        vec![
            AllocatorConfig::pytorch_default(),
            with("", Compat::V2_12),
            with("", Compat::V2_13),
            with("max_split_size_mb:20", Compat::R26),
            with("roundup_power2_divisions:4", Compat::V2_13),
            with("garbage_collection_threshold:0.5,per_process_memory_fraction:0.5", Compat::R26),
        ]
    }

    /// Runs `actions` on two allocators, one parking frees (and taking
    /// temporaries in one step) and one merging at once (and making the
    /// two calls), and compares every result, the statistics and the
    /// segments after each step; returns the temporaries taken in one step.
    pub(in crate::allocator) fn compare(config: AllocatorConfig, actions: &[Action]) -> Result<usize, TestCaseError> {
        let make = |parking| {
            let mut a = CachingAllocator::new(WhatIfDevice::with_capacity(256 * MIB), config.clone());
            a.parking = parking;
            a
        };
        let (mut parked, mut eager) = (make(true), make(false));
        let mut live: Vec<(DeviceAddr, u64, StreamId)> = Vec::new();
        let mut taken = 0;
        for action in actions {
            match *action {
                Action::Temporary { size, stream } => {
                    let s = StreamId(u64::from(stream));
                    let called = |a: &mut CachingAllocator<WhatIfDevice>| {
                        let got = a.malloc(size, s).ok();
                        if let Some(p) = got {
                            assert!(a.free(p).is_ok());
                        }
                        got
                    };
                    prop_assert_eq!(eager.malloc_then_free(size, s), None, "only a parking allocator takes the one step");
                    let one_step = parked.malloc_then_free(size, s);
                    taken += usize::from(one_step.is_some());
                    let p = one_step.or_else(|| called(&mut parked));
                    prop_assert_eq!(p, called(&mut eager));
                }
                Action::Malloc { size, stream } => {
                    let s = StreamId(u64::from(stream));
                    let (p, e) = (parked.malloc(size, s), eager.malloc(size, s));
                    prop_assert_eq!(p.as_ref().ok(), e.as_ref().ok());
                    if let Ok(addr) = p {
                        live.push((addr, size, s));
                    }
                }
                Action::Free(n) if !live.is_empty() => {
                    let (addr, _, _) = live.remove(n % live.len());
                    prop_assert!(parked.free(addr).is_ok() && eager.free(addr).is_ok());
                }
                Action::Again if !live.is_empty() => {
                    let (addr, size, s) = live.pop().expect("not empty");
                    prop_assert!(parked.free(addr).is_ok() && eager.free(addr).is_ok());
                    let (p, e) = (parked.malloc(size, s), eager.malloc(size, s));
                    prop_assert_eq!(p.as_ref().ok(), e.as_ref().ok());
                    if let Ok(addr) = p {
                        live.push((addr, size, s));
                    }
                }
                Action::RecordStream { n, stream } if !live.is_empty() => {
                    let (addr, _, _) = live[n % live.len()];
                    let s = StreamId(u64::from(stream));
                    prop_assert!(parked.record_stream(addr, s).is_ok() && eager.record_stream(addr, s).is_ok());
                }
                Action::EmptyCache => {
                    parked.empty_cache();
                    eager.empty_cache();
                }
                Action::History(on) => {
                    let config = on.then(HistoryConfig::default);
                    parked.record_history(config);
                    eager.record_history(config);
                }
                Action::Snapshot => prop_assert_eq!(parked.snapshot(), eager.snapshot()),
                _ => {}
            }
            prop_assert_eq!(parked.stats(), eager.stats());
            prop_assert_eq!(parked.segments(), eager.segments());
            prop_assert!(parked.check_invariants().is_ok());
        }
        Ok(taken)
    }

    /// The pair a training step makes: the free parks, the request for the
    /// same size hands the same block out again, and a different request
    /// merges first.
    #[test]
    fn a_free_parks_and_the_same_request_takes_it_back() {
        let mut a = CachingAllocator::new(WhatIfDevice::with_capacity(256 * MIB), AllocatorConfig::pytorch_default());
        let keep = a.malloc(4096, StreamId(0)).unwrap();
        let p = a.malloc(4096, StreamId(0)).unwrap();
        a.free(p).unwrap();
        assert!(a.parked.is_some());
        assert_eq!(a.segments()[0].blocks.len(), 2, "the parked pair shows as one free block");
        assert_eq!(a.malloc(4096, StreamId(0)).unwrap(), p);
        assert!(a.parked.is_none());
        a.free(p).unwrap();
        assert!(a.malloc(8192, StreamId(0)).is_ok() && a.parked.is_none());
        let _ = keep;
    }

    proptest! {
        #[test]
        fn parking_changes_nothing(actions in proptest::collection::vec(action(), 1..200)) {
            for config in configs() {
                compare(config, &actions)?;
            }
        }
    }
}

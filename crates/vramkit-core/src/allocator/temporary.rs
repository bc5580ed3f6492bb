//! A temporary: a request whose block is freed straight after, before any
//! other operation, worked out in one step.
//!
//! Programs ask for scratch memory and give it back at once (a kernel's
//! workspace, an intermediate the next operation consumes), and a trace
//! shows it as an `alloc` directly followed by the plain free of its
//! address. Done one after the other, best fit splits a free block `F`,
//! hands out its low end `B`, and the free merges `B` back with the rest:
//! `F` again, at the same key in the same free set. What the pair leaves
//! is `F` as it was, but for the size last asked of it (the request's,
//! which snapshots show), its age (restarted at the free) and the
//! statistics, which saw the block allocated in between (its peaks).
//! `malloc_then_free` makes exactly those changes, in the same statistics
//! calls with the same arguments, and no block record, free-set move or
//! address-map entry; the parked free the `free` would have left stands
//! for the same merged state (`parked.rs`), so nothing later can tell.
//!
//! In an expandable segment the free merges the part back with the rest
//! at once (nothing is parked there), to the same effect: the rest is
//! mapped, and an unmapped neighbour merges with neither. Garbage
//! collection's count of searches goes up by the one search, and the
//! block's age restarts at it, as the rest's does when it re-enters the
//! free set.
//!
//! Only the plain case is taken: history off, ties in size not broken by
//! block age (torch 2.12 gives a split's part a new counter, which the
//! merged block would keep), a default pool, nothing recorded on the
//! block; and only a cache hit, with no events to process and no capture.
//! Elsewhere nothing changes and the caller does the two calls.

use super::{CachingAllocator, LARGE_POOL, SMALL_POOL};
use crate::device::{Device, DeviceAddr, StreamId};
use crate::live_stats::Peak;
use crate::rounding::ONE_EXABYTE;

impl<D: Device> CachingAllocator<D> {
    /// What `malloc(size, stream)` directly followed by `free` of the
    /// address it returns does, in one step, where that is the plain
    /// case: returns the address the `malloc` would have returned. `None`:
    /// not the plain case, and nothing a caller can see has changed; call
    /// `malloc` and `free`.
    pub fn malloc_then_free(&mut self, size: u64, stream: StreamId) -> Option<DeviceAddr> {
        let plain = self.merge_may_wait() && self.captures_underway.is_empty() && !self.events_pending();
        // A repeated round trip costs the two calls less than this.
        if !plain || size == 0 || size >= ONE_EXABYTE || self.repeats(size, stream) {
            return None;
        }
        // The state a parked free stands for is the merged one.
        self.settle_parked();
        let rounded = self.rounded(size);
        let params = self.alloc_params_rounded(size, rounded, stream);
        if params.pool != LARGE_POOL && params.pool != SMALL_POOL {
            return None;
        }
        let found = self.find_free_block(&params)?;
        let b = &self.blocks[found.id];
        if b.extras.is_some() {
            return None;
        }
        debug_assert!(b.mapped && !b.is_active());
        let (addr, already_split, expandable) = (b.addr, b.is_split(), b.expandable.is_some());
        let remaining = found.size - params.size;
        let split = self.should_split(params.pool, params.size, remaining);
        // The block handed out and freed, and what its `malloc` and its
        // `free` do to `inactive_split` (`alloc_found_block`,
        // `complete_free`; not kept for expandable blocks): a split's part
        // merges back with the rest, a whole block merges with nothing (its
        // mapped neighbours are active).
        let (block_size, allocated_split, freed_split) = match (split, already_split) {
            _ if expandable => (if split { params.size } else { found.size }, (0, 0), (0, 0)),
            (true, true) => (params.size, (0, -(params.size as i64)), (0, params.size as i64)),
            (true, false) => (params.size, (1, remaining as i64), (-1, -(remaining as i64))),
            (false, true) => (found.size, (-1, -(found.size as i64)), (1, found.size as i64)),
            (false, false) => (found.size, (0, 0), (0, 0)),
        };
        self.count_get_free_block(params.pool);
        let pool = &self.pools[params.pool.0 as usize];
        let (kind, gc_count_base) = (pool.kind, pool.get_free_blocks_call_count);
        let b = &mut self.blocks[found.id];
        b.requested_size = size;
        b.gc_count_base = gc_count_base;
        let oversize = block_size >= self.config.max_split_size();
        self.stats.account_block_allocated(kind, block_size, size, oversize, allocated_split, Peak::MayRise);
        self.stats.account_free_requested(kind, block_size, oversize);
        self.stats.account_free_completed(kind, block_size, size, freed_split);
        // The two calls would leave a split memo of a block that merged
        // back (stale: its pool's free set changed since) and no repeat.
        self.split_memo = None;
        self.repeat = None;
        self.validate();
        Some(DeviceAddr(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::super::parked::tests::{compare, configs, Action};
    use super::super::what_if::WhatIfDevice;
    use super::*;
    use crate::config::{AllocatorConfig, SizeTies};

    const MIB: u64 = 1 << 20;

    /// A temporary split off a free block leaves the block as it was but
    /// for the size last asked of it, and the peaks show it was allocated.
    #[test]
    fn a_temporary_leaves_the_block_it_used() {
        let mut a = CachingAllocator::new(WhatIfDevice::with_capacity(256 * MIB), AllocatorConfig::pytorch_default());
        let keep = a.malloc(4096, StreamId(0)).unwrap();
        let before = a.segments();
        let p = a.malloc_then_free(100_000, StreamId(0)).expect("a cache hit in the plain case");
        assert_eq!(p.0, keep.0 + 4096, "the low end of the free block after the kept one");
        let after = a.segments();
        assert_eq!(after.len(), before.len());
        assert_eq!(after[0].blocks.len(), 2);
        assert_eq!(after[0].blocks[1].requested_size, 100_000);
        let st = a.stats();
        assert_eq!(st.allocated_bytes.all.current, 4096);
        assert_eq!(st.allocated_bytes.all.peak, 4096 + 100_352);
        assert_eq!(st.allocation.all.allocated, 2);
        assert_eq!(st.allocation.all.freed, 1);
        // A miss (nothing cached for 30 MiB) is left to the two calls.
        assert_eq!(a.malloc_then_free(30 * MIB, StreamId(0)), None);
        assert_eq!(a.segments(), after);
    }

    /// Most temporaries of a training-like sequence take the one step
    /// under each setting with a plain tie rule, and `parked.rs`'s
    /// comparison (a parking allocator against one merging at once, with
    /// temporaries among its random actions) compares what they leave.
    #[test]
    fn temporaries_take_the_one_step() {
        let mut actions = Vec::new();
        for step in 0..40u64 {
            actions.push(Action::Malloc { size: (step % 7 + 1) * 300_000, stream: 0 });
            for t in 0..4 {
                actions.push(Action::Temporary { size: 512 + (step * 7919 + t * 104_729) % (3 * MIB), stream: 0 });
            }
            if step % 3 == 2 {
                actions.push(Action::Free(0));
            }
        }
        for config in configs() {
            // Torch 2.12's tie rule leaves every one to the two calls.
            let block_age = config.compat.size_ties == SizeTies::BlockAge;
            let taken = compare(config.clone(), &actions).expect("the same as the two calls");
            assert!(if block_age { taken == 0 } else { taken >= 100 }, "{taken} of 160 in one step under {config:?}");
        }
    }
}

//! `check_invariants()`: walks every segment and recomputes every sum.
//!
//! With the `validate` feature it runs after every public operation, so a
//! broken rule fails the operation that broke it ([`InvariantChecks`] says
//! how often, for the whole process).

use super::CachingAllocator;
use crate::device::Device;
use crate::pool::FreeKey;
use crate::rounding::PoolKind;
use crate::stats::StatArray;
use std::collections::HashSet;

/// How often the `validate` feature runs `check_invariants()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum InvariantChecks {
    /// After every public operation: the default, and what vramkit-core's
    /// own tests run.
    EveryOperation = 0,
    /// After every operation while an allocator holds at most
    /// [`SAMPLED_BLOCKS`] blocks; with more, after one operation in every
    /// `blocks / SAMPLED_BLOCKS`, so a check costs about `SAMPLED_BLOCKS`
    /// block visits per operation however large the state grows. For test
    /// suites that drive whole traces (replay, the PyTorch sweeps): a
    /// broken rule is still caught, a few operations late at worst.
    Sampled = 1,
    /// Never: tools built alongside the tests (the CLI), and suites that
    /// replay every setting (the replay crate's integration tests).
    Off = 2,
}

/// Under [`InvariantChecks::Sampled`], the number of blocks up to which
/// every operation is checked.
pub const SAMPLED_BLOCKS: usize = 16;

/// The mode: an [`InvariantChecks`] as its `u8`.
static INVARIANT_CHECKS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(InvariantChecks::EveryOperation as u8);

/// Sets how often the `validate` feature's invariant checks run, for the
/// whole process. Without the feature there are none and this does
/// nothing. `cargo test --workspace` turns the feature on for every crate
/// (it is a dev-dependency of vramkit-core on itself), so other crates'
/// suites choose [`InvariantChecks::Sampled`] or [`InvariantChecks::Off`].
pub fn set_invariant_checks(mode: InvariantChecks) {
    INVARIANT_CHECKS.store(mode as u8, std::sync::atomic::Ordering::Relaxed);
}

/// Under [`InvariantChecks::Sampled`]: whether the `ops`-th operation
/// since the last check, on an allocator of `blocks` blocks, is checked.
#[cfg_attr(not(feature = "validate"), allow(dead_code))]
fn sampled_check_due(ops: usize, blocks: usize) -> bool {
    ops.saturating_mul(SAMPLED_BLOCKS) >= blocks
}

#[cfg(feature = "validate")]
thread_local! {
    /// Operations since the last sampled check, on this thread.
    static UNCHECKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A broken allocator invariant: always a bug in vramkit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {detail}")]
pub struct InvariantViolation {
    /// The rule, in a few words.
    pub rule: &'static str,
    /// Which block or number broke it.
    pub detail: String,
}

fn violation(rule: &'static str, detail: String) -> Result<(), InvariantViolation> {
    Err(InvariantViolation { rule, detail })
}

#[derive(Default)]
struct Sums {
    segment: [i64; 2],
    reserved: [i64; 2],
    allocation: [i64; 2],
    allocated_bytes: [i64; 2],
    active: [i64; 2],
    active_bytes: [i64; 2],
    requested_bytes: [i64; 2],
    inactive_split: [i64; 2],
    inactive_split_bytes: [i64; 2],
    oversize_allocations: i64,
    oversize_segments: i64,
}

fn check_array(name: &'static str, array: &StatArray, sums: [i64; 2]) -> Result<(), InvariantViolation> {
    let (small, large) = (array.small_pool.current, array.large_pool.current);
    if small != sums[0] || large != sums[1] || array.all.current != small + large {
        return violation(
            "stats equal recomputed sums",
            format!("{name}: small {small} large {large} all {} but blocks give small {} large {}", array.all.current, sums[0], sums[1]),
        );
    }
    for s in [&array.all, &array.small_pool, &array.large_pool] {
        if s.peak < s.current {
            return violation("peak >= current", format!("{name}: peak {} < current {}", s.peak, s.current));
        }
    }
    Ok(())
}

impl<D: Device> CachingAllocator<D> {
    /// Runs `check_invariants()` when the `validate` feature is on and
    /// [`InvariantChecks`] says this operation is due; a violation panics.
    #[inline(always)]
    pub(super) fn validate(&self) {
        #[cfg(feature = "validate")]
        {
            const EVERY: u8 = InvariantChecks::EveryOperation as u8;
            const SAMPLED: u8 = InvariantChecks::Sampled as u8;
            let due = match INVARIANT_CHECKS.load(std::sync::atomic::Ordering::Relaxed) {
                EVERY => true,
                SAMPLED => UNCHECKED.with(|n| {
                    let ops = n.get() + 1;
                    let due = sampled_check_due(ops, self.blocks.len());
                    n.set(if due { 0 } else { ops });
                    due
                }),
                _ => false,
            };
            if due {
                if let Err(violation) = self.check_invariants() {
                    panic!("allocator invariant broken: {violation}");
                }
            }
        }
    }

    /// Checks every structural and statistical invariant; the first broken
    /// one is returned. With a parked free, its pair is checked and the
    /// rest on a copy with its merge done.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        if let Some(p) = &self.parked {
            let (b, n) = (&self.blocks[p.block], &self.blocks[p.next]);
            let pool = &self.pools[p.pool.0 as usize].blocks;
            let pair = b.next == Some(p.next) && n.prev == Some(p.block) && (b.pool, b.stream) == (p.pool, p.stream);
            let freed = !b.is_active() && b.extras.is_none() && !pool.contains(b.stream, FreeKey::of(b), p.block);
            let alone = b.prev.is_none_or(|q| self.blocks[q].is_active()) && self.allocated.get(b.addr) == Some(p.block);
            let neighbour = !n.is_active() && n.mapped && n.extras.is_none() && pool.contains(n.stream, FreeKey::of(n), p.next);
            if !(pair && freed && alone && neighbour && self.history.is_none()) {
                return violation("a parked free is a freed block and its free upper neighbour", format!("{p:?}"));
            }
            // The merged block it stands for counts as the largest free block would.
            let settled = self.settled_copy();
            let (merged, parked) = (settled.largest_free_block(), self.largest_free_block());
            if merged != parked {
                return violation("a parked free counts as its merge", format!("largest free block {merged} settled, {parked} parked"));
            }
            return settled.check_invariants();
        }
        let max_split = self.config.max_split_size();
        let mut sums = Sums::default();
        let mut seen = HashSet::new();
        let mut total_reserved = 0u64;
        let mut last_end = 0u64;
        let mut chains: Vec<(u64, crate::block::BlockId)> =
            self.blocks.iter().filter(|(_, b)| b.prev.is_none()).map(|(id, b)| (b.addr, id)).collect();
        chains.sort_unstable();
        let mut expandable_chains = 0usize;
        // The largest inactive mapped block: what `segments()` would show.
        let mut largest_free = 0u64;
        for (_, head) in chains {
            let h = &self.blocks[head];
            let (pool, stream, expandable) = (h.pool, h.stream, h.expandable);
            let kind = self.pools[pool.0 as usize].kind;
            let k = (kind == PoolKind::Large) as usize;
            if h.addr < last_end {
                return violation("segments do not overlap", format!("segment at {:#x} starts before {last_end:#x}", h.addr));
            }
            let segment = expandable.map(|e| self.expandable_segment(e));
            if let Some(seg) = segment {
                expandable_chains += 1;
                if seg.base != h.addr || seg.stream != stream || seg.pool != pool {
                    return violation("an expandable chain starts at its reservation", format!("chain at {:#x}", h.addr));
                }
            }
            let (mut cursor, mut prev, mut expected_addr, mut size, mut mapped_bytes) = (Some(head), None, h.addr, 0u64, 0u64);
            // The end of the last mapped block: a reservation's unmapped tail
            // may lie under later segments when its size (9/8 of the
            // device's memory) is larger in a replay than where the trace
            // was recorded; memory in use never overlaps.
            let mut mapped_end = h.addr;
            let mut prev_free: Option<bool> = None;
            let segment_split = h.next.is_some();
            while let Some(id) = cursor {
                let b = &self.blocks[id];
                if !seen.insert(id) {
                    return violation("block lists are acyclic", format!("block {id:?} seen twice"));
                }
                if b.prev != prev {
                    return violation("prev/next links agree", format!("block at {:#x}", b.addr));
                }
                if b.addr != expected_addr {
                    return violation("blocks tile the segment", format!("block at {:#x}, expected {expected_addr:#x}", b.addr));
                }
                if b.pool != pool || b.stream != stream || b.expandable != expandable {
                    return violation("a segment has one pool, stream and reservation", format!("block at {:#x}", b.addr));
                }
                if b.size == 0 || b.size % 512 != 0 {
                    return violation("block sizes are positive multiples of 512", format!("block at {:#x} has {}", b.addr, b.size));
                }
                let free = !b.is_active();
                // Neighbours that are both free and in the same mapped state are merged.
                if free && prev_free == Some(b.mapped) {
                    return violation("merging is complete", format!("free neighbours at {:#x}", b.addr));
                }
                prev_free = free.then_some(b.mapped);
                if !b.mapped {
                    let seg = match segment {
                        Some(seg) => seg,
                        None => return violation("only expandable blocks are unmapped", format!("block at {:#x}", b.addr)),
                    };
                    if b.is_active() {
                        return violation("unmapped blocks are free", format!("block at {:#x}", b.addr));
                    }
                    let end = b.addr + b.size;
                    if (b.addr - seg.base) % seg.page_size != 0 || ((end - seg.base) % seg.page_size != 0 && end != seg.base + seg.size) {
                        return violation("unmapped ranges are whole pages", format!("block at {:#x}+{}", b.addr, b.size));
                    }
                    if self.pools[pool.0 as usize].unmapped.get(&(b.stream, b.addr)) != Some(&id) {
                        return violation("unmapped blocks are in the unmapped set", format!("block at {:#x}", b.addr));
                    }
                } else {
                    mapped_bytes += b.size;
                    mapped_end = b.addr + b.size;
                    if free {
                        largest_free = largest_free.max(b.size);
                    }
                    let in_pool = self.pools[pool.0 as usize].blocks.contains(b.stream, FreeKey::of(b), id);
                    if free != in_pool {
                        return violation("a block is in its pool iff it is free", format!("block at {:#x} free={free} in_pool={in_pool}", b.addr));
                    }
                }
                if b.allocated != (self.allocated.get(b.addr) == Some(id)) {
                    return violation("allocated blocks are in the address map", format!("block at {:#x}", b.addr));
                }
                if b.held != (self.held.get(b.addr) == Some(id)) {
                    return violation("held blocks are in the held map", format!("block at {:#x}", b.addr));
                }
                if b.held && b.allocated {
                    return violation("a held block is not allocated", format!("block at {:#x}", b.addr));
                }
                if b.stream_uses().contains(&b.stream) {
                    return violation("stream uses exclude the own stream", format!("block at {:#x}", b.addr));
                }
                if b.allocated {
                    sums.allocation[k] += 1;
                    sums.allocated_bytes[k] += b.size as i64;
                    if b.size >= max_split {
                        sums.oversize_allocations += 1;
                    }
                }
                if b.is_active() {
                    sums.active[k] += 1;
                    sums.active_bytes[k] += b.size as i64;
                    sums.requested_bytes[k] += b.requested_size as i64;
                } else if segment_split && expandable.is_none() {
                    sums.inactive_split[k] += 1;
                    sums.inactive_split_bytes[k] += b.size as i64;
                }
                size += b.size;
                expected_addr += b.size;
                prev = Some(id);
                cursor = b.next;
            }
            if let Some(seg) = segment {
                if size != seg.size {
                    return violation("an expandable chain covers its reservation", format!("{size} of {}", seg.size));
                }
            } else {
                sums.segment[k] += 1;
                if size >= max_split {
                    sums.oversize_segments += 1;
                }
            }
            sums.reserved[k] += mapped_bytes as i64;
            total_reserved += mapped_bytes;
            last_end = if segment.is_some() { mapped_end } else { h.addr + size };
        }
        let largest = self.largest_free_block();
        if largest != largest_free {
            return violation("the largest free block is the largest inactive one", format!("{largest}, but the segments hold {largest_free}"));
        }
        if expandable_chains != self.live_expandable_segments().count() {
            return violation("every reservation has one chain", format!("{expandable_chains} chains"));
        }
        let unmapped: usize = self.pools.iter().map(|p| p.unmapped.len()).sum();
        let unmapped_blocks = seen.iter().filter(|&&id| !self.blocks[id].mapped).count();
        if unmapped != unmapped_blocks {
            return violation("unmapped sets hold only unmapped blocks", format!("{unmapped} vs {unmapped_blocks}"));
        }
        if seen.len() != self.blocks.len() {
            return violation("every block belongs to a segment", format!("{} blocks, {} reachable", self.blocks.len(), seen.len()));
        }
        let pooled: usize = self.pools.iter().map(|p| p.blocks.len()).sum();
        let free_blocks = seen.iter().filter(|&&id| !self.blocks[id].is_active() && self.blocks[id].mapped).count();
        if pooled != free_blocks {
            return violation("pools hold only free blocks", format!("{pooled} pooled, {free_blocks} free"));
        }
        if self.allocated.len() != sums.allocation.iter().sum::<i64>() as usize {
            return violation("the address map holds only allocated blocks", format!("{} entries", self.allocated.len()));
        }
        if total_reserved != self.total_allocated_memory {
            return violation("total_allocated_memory is the sum of segments", format!("{} vs {total_reserved}", self.total_allocated_memory));
        }
        if self.held.len() != seen.iter().filter(|&&id| self.blocks[id].held).count() {
            return violation("the held map holds only held blocks", format!("{} entries", self.held.len()));
        }
        let pending: usize = self.cuda_events.values().map(|q| q.len()).sum();
        let counted: u32 = seen.iter().map(|&id| self.blocks[id].event_count()).sum();
        if pending != counted as usize {
            return violation("event counts match pending events", format!("{pending} pending, {counted} counted"));
        }
        let s = &self.stats();
        check_array("segment", &s.segment, sums.segment)?;
        check_array("reserved_bytes", &s.reserved_bytes, sums.reserved)?;
        check_array("allocation", &s.allocation, sums.allocation)?;
        check_array("allocated_bytes", &s.allocated_bytes, sums.allocated_bytes)?;
        check_array("active", &s.active, sums.active)?;
        check_array("active_bytes", &s.active_bytes, sums.active_bytes)?;
        check_array("requested_bytes", &s.requested_bytes, sums.requested_bytes)?;
        check_array("inactive_split", &s.inactive_split, sums.inactive_split)?;
        check_array("inactive_split_bytes", &s.inactive_split_bytes, sums.inactive_split_bytes)?;
        // Oversize stats follow the max_split_size at the time of each event;
        // a runtime change of the setting makes them diverge, as in PyTorch.
        if !self.max_split_size_changed {
            if s.oversize_allocations.current != sums.oversize_allocations {
                return violation("oversize_allocations", format!("{} vs {}", s.oversize_allocations.current, sums.oversize_allocations));
            }
            if s.oversize_segments.current != sums.oversize_segments {
                return violation("oversize_segments", format!("{} vs {}", s.oversize_segments.current, sums.oversize_segments));
            }
        }
        if self.set_fraction && self.total_allocated_memory > self.allowed_memory_maximum.max(self.total_allocated_memory) {
            return violation("fraction limit", String::new());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_checks_every_operation_of_a_small_allocator_and_bounds_the_cost_of_a_large_one() {
        for blocks in 0..=SAMPLED_BLOCKS {
            assert!(sampled_check_due(1, blocks), "{blocks} blocks: every operation is checked");
        }
        // 160 blocks: one operation in ten, so about SAMPLED_BLOCKS block visits per operation.
        let blocks = 10 * SAMPLED_BLOCKS;
        assert_eq!((1..=10).filter(|&ops| sampled_check_due(ops, blocks)).collect::<Vec<_>>(), vec![10]);
        assert!(!sampled_check_due(9, blocks + 1) && sampled_check_due(11, blocks + 1));
        assert!(sampled_check_due(usize::MAX, usize::MAX), "no overflow");
    }
}

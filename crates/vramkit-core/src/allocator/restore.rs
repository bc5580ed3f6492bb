//! Rebuilding an allocator from snapshot segments, and the two halves of a
//! free for replays.
//!
//! A trace is a window: memory was already allocated when it starts.
//! `restore` builds the allocator that state describes, so a replay can
//! continue from it. A replay also drives `free_requested` and
//! `free_completed` separately, because between the two (while other
//! streams still use a block) the block is not reusable.

use super::{CachingAllocator, LARGE_POOL, SMALL_POOL};
use crate::block::{Block, BlockId};
use crate::config::AllocatorConfig;
use crate::device::{Device, DeviceAddr, StreamId};
use crate::error::Error;
use crate::rounding::PoolKind;
use crate::snapshot::{BlockState, SegmentInfo, TraceAction};
use crate::live_stats::Peak;

/// Why a set of segments cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// A segment's blocks do not add up to it, or are not 512-byte multiples.
    #[error("segment at {address:#x}: {problem}")]
    BadSegment {
        /// The segment's address.
        address: u64,
        /// What is wrong.
        problem: String,
    },
    /// Two segments overlap.
    #[error("segments at {first:#x} and {second:#x} overlap")]
    Overlap {
        /// The lower segment.
        first: u64,
        /// The segment that starts inside it.
        second: u64,
    },
    /// A kind of segment this version cannot restore yet.
    #[error("segment at {address:#x}: {what} cannot be restored yet")]
    Unsupported {
        /// The segment's address.
        address: u64,
        /// What it has.
        what: &'static str,
    },
}

impl<D: Device> CachingAllocator<D> {
    /// An allocator in the state `segments` describe. `device` must already
    /// hold every segment's range (for `SimDevice`, `adopt`). Statistics
    /// start from that state: current = peak = the state's values.
    pub fn restore(device: D, config: AllocatorConfig, segments: &[SegmentInfo]) -> Result<Self, RestoreError> {
        let mut a = CachingAllocator::new(device, config);
        let mut ordered: Vec<&SegmentInfo> = segments.iter().collect();
        ordered.sort_by_key(|s| s.address);
        for pair in ordered.windows(2) {
            if pair[0].address.saturating_add(pair[0].total_size) > pair[1].address {
                return Err(RestoreError::Overlap { first: pair[0].address, second: pair[1].address });
            }
        }
        for s in ordered {
            a.restore_segment(s)?;
        }
        a.stats.start_from_current();
        Ok(a)
    }

    fn restore_segment(&mut self, s: &SegmentInfo) -> Result<(), RestoreError> {
        let bad = |problem: String| RestoreError::BadSegment { address: s.address, problem };
        if s.is_expandable {
            return Err(RestoreError::Unsupported { address: s.address, what: "an expandable segment" });
        }

        if s.blocks.is_empty() {
            return Err(bad("it has no blocks".into()));
        }
        let sum: u64 = s.blocks.iter().map(|b| b.size).sum();
        if sum != s.total_size {
            return Err(bad(format!("its blocks add up to {sum} bytes, not its total_size {}", s.total_size)));
        }
        let pool = if s.segment_pool_id == (0, 0) {
            match s.segment_type {
                PoolKind::Small => SMALL_POOL,
                PoolKind::Large => LARGE_POOL,
            }
        } else {
            // A private pool seen in a snapshot: one user (it is alive), not routed to.
            if !self.private_pools.contains_key(&s.segment_pool_id) {
                self.create_pool(s.segment_pool_id).map_err(|e| RestoreError::BadSegment { address: s.address, problem: e.to_string() })?;
            }
            let p = &self.private_pools[&s.segment_pool_id];
            match s.segment_type {
                PoolKind::Small => p.small,
                PoolKind::Large => p.large,
            }
        };
        let kind = s.segment_type;
        let stream = StreamId(s.stream);
        // Segments alive at the start are older than any made later; among
        // themselves their order is unknown (snapshots list them by address).
        let registration_counter = self.register_segment();
        let split = s.blocks.len() > 1;
        let mut addr = s.address;
        let mut prev: Option<BlockId> = None;
        let mut prev_free = false;
        for (i, info) in s.blocks.iter().enumerate() {
            if info.size == 0 || info.size % 512 != 0 {
                return Err(bad(format!("block {i} has size {}, not a positive multiple of 512", info.size)));
            }
            let free = info.state == BlockState::Inactive;
            if free && prev_free {
                return Err(bad(format!("blocks {} and {i} are both inactive; PyTorch always merges free neighbours", i - 1)));
            }
            prev_free = free;
            let registration_counter = if i == 0 { registration_counter } else { self.register_split(registration_counter) };
            let id = self.blocks.insert(Block {
                requested_size: info.requested_size,
                prev,
                allocated: info.state == BlockState::ActiveAllocated,
                held: info.state == BlockState::ActivePendingFree,
                registration_counter,
                ..Block::new(addr, info.size, stream, pool)
            });
            self.blocks[id].set_context_when_allocated(info.frames.clone());
            self.blocks[id].set_context_when_segment_allocated(if i == 0 { s.frames.clone() } else { None });
            if let Some(p) = prev {
                self.blocks[p].next = Some(id);
            }
            let oversize = info.size >= self.config.max_split_size();
            match info.state {
                BlockState::ActiveAllocated => {
                    let fresh = self.allocated.insert(addr, id);
                    debug_assert!(fresh);
                    self.stats.account_block_allocated(kind, info.size, info.requested_size, oversize, (0, 0), Peak::MayRise);
                }
                BlockState::ActivePendingFree => {
                    let fresh = self.held.insert(addr, id);
                    debug_assert!(fresh);
                    self.stats.account_block_allocated(kind, info.size, info.requested_size, oversize, (0, 0), Peak::MayRise);
                    self.stats.account_free_requested(kind, info.size, oversize);
                }
                BlockState::Inactive => {}
            }
            prev = Some(id);
            addr += info.size;
        }
        // Free blocks go into the pool once their neighbours are linked.
        let mut cursor = self.blocks.iter().find(|(_, b)| b.addr == s.address && b.prev.is_none()).map(|(id, _)| id);
        let mut inactive = (0i64, 0i64);
        while let Some(id) = cursor {
            let b = &self.blocks[id];
            cursor = b.next;
            if !b.is_active() {
                if split {
                    inactive.0 += 1;
                    inactive.1 += b.size as i64;
                }
                self.insert_into_pool(id);
            }
        }
        self.stats.account_restored_segment(kind, s.total_size, s.total_size >= self.config.max_split_size(), inactive);
        self.total_allocated_memory += s.total_size;
        Ok(())
    }

    /// The first half of a free, as a replay sees it: the user freed the
    /// block (`free_requested`), but it is not reusable until
    /// [`free_completed`](Self::free_completed) at the same address.
    pub fn free_requested(&mut self, ptr: DeviceAddr) -> Result<(), Error> {
        self.settle_parked();
        let id = self.allocated.remove(ptr.0).ok_or(Error::UnknownPointer { addr: ptr })?;
        self.blocks[id].held = true;
        let fresh = self.held.insert(ptr.0, id);
        debug_assert!(fresh);
        self.free_impl(id, None);
        self.validate();
        Ok(())
    }

    /// The second half: the block freed at `ptr` becomes reusable (merged
    /// and pooled), as when its last stream event completes.
    pub fn free_completed(&mut self, ptr: DeviceAddr) -> Result<(), Error> {
        self.settle_parked();
        let id = self.held.remove(ptr.0).ok_or(Error::UnknownPointer { addr: ptr })?;
        let b = &mut self.blocks[id];
        b.held = false;
        if b.event_count() == 0 && !b.allocated {
            self.free_block(id, &None);
        }
        self.validate();
        Ok(())
    }

    /// Turns a block held by `free_requested` (or restored as pending) into
    /// one waiting for an event recorded on `stream`, as `record_stream`
    /// uses do: the allocator then frees it itself when the event completes
    /// (at the next `malloc`) or in a synchronisation.
    pub fn hold_with_event(&mut self, ptr: DeviceAddr, stream: StreamId) -> Result<(), Error> {
        self.settle_parked();
        let id = self.held.remove(ptr.0).ok_or(Error::UnknownPointer { addr: ptr })?;
        self.blocks[id].held = false;
        let event = self.device.record_event(stream);
        self.blocks[id].extras_mut().event_count += 1;
        self.cuda_events.entry(stream).or_default().push_back(crate::block::PendingEvent { event, block: id });
        self.validate();
        Ok(())
    }

    /// Addresses of the blocks held by `free_requested`.
    pub fn held_addresses(&self) -> Vec<DeviceAddr> {
        let mut v: Vec<DeviceAddr> = self.held.iter().map(|(a, _)| DeviceAddr(a)).collect();
        v.sort_unstable();
        v
    }

    /// Blocks freed with `free_requested` and not yet completed.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Records a trace entry that the caller observed (e.g. a replay's `snapshot` marker).
    pub fn record_external_trace(&mut self, action: TraceAction, addr: u64, size: u64, stream: StreamId) {
        self.record_trace(action, addr, size, stream, None);
    }
}

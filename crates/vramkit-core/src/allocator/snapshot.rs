//! `snapshot()`: the allocator's state as PyTorch's `_snapshot()` shows it.

use super::CachingAllocator;
use crate::block::BlockId;
use crate::device::Device;
use crate::snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot, TraceAction};
use crate::device::StreamId;

impl<D: Device> CachingAllocator<D> {
    /// The head block of every segment, by address.
    pub(crate) fn segment_heads(&self) -> Vec<BlockId> {
        // For expandable segments, every contiguous mapped run is a segment.
        let mut heads: Vec<(u64, BlockId)> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.mapped && b.prev.is_none_or(|p| !self.blocks[p].mapped))
            .map(|(id, b)| (b.addr, id))
            .collect();
        heads.sort_unstable();
        heads.into_iter().map(|(_, id)| id).collect()
    }

    /// Every segment with its blocks, sorted by address (`torch.cuda.memory_snapshot()`).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segment_heads().into_iter().map(|head| self.segment_info(head)).collect()
    }

    fn segment_info(&self, head: BlockId) -> SegmentInfo {
        let h = &self.blocks[head];
        let mut segment = SegmentInfo {
            device: self.device_index,
            address: h.addr,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: h.stream.0,
            segment_type: self.pools[h.pool.0 as usize].kind,
            segment_pool_id: self.pool_id_of(h.pool),
            is_expandable: h.expandable.is_some(),
            frames: h.context_when_segment_allocated().cloned(),
            blocks: Vec::new(),
        };
        let mut cursor = Some(head);
        while let Some(id) = cursor.filter(|&id| self.blocks[id].mapped) {
            let b = &self.blocks[id];
            // A parked free shows as the block its merge makes.
            let (size, next) = match self.parked.filter(|p| p.block == id) {
                Some(p) => (b.size + self.blocks[p.next].size, self.blocks[p.next].next),
                None => (b.size, b.next),
            };
            let state = if b.allocated {
                BlockState::ActiveAllocated
            } else if b.is_active() {
                BlockState::ActivePendingFree
            } else {
                BlockState::Inactive
            };
            segment.total_size += size;
            if b.allocated {
                segment.allocated_size += size;
            }
            if state.is_active() {
                segment.active_size += size;
                segment.requested_size += b.requested_size;
            }
            segment.blocks.push(BlockInfo {
                address: b.addr,
                size,
                requested_size: b.requested_size,
                state,
                frames: b.context_when_allocated().cloned(),
            });
            cursor = next;
        }
        segment
    }

    /// The size of the largest inactive block [`segments`](Self::segments)
    /// shows (0 with none), without building them: every inactive mapped
    /// block is in a free set, or is a parked free, shown merged.
    pub fn largest_free_block(&self) -> u64 {
        let parked = self.parked.map_or(0, |p| self.blocks[p.block].size + self.blocks[p.next].size);
        self.pools.iter().map(|pool| pool.blocks.largest()).fold(parked, u64::max)
    }

    /// `torch.cuda.memory._snapshot()`: segments and the recorded history.
    /// Like PyTorch, taking a snapshot appends a `snapshot` entry (size =
    /// active bytes) to the history first.
    pub fn snapshot(&mut self) -> Snapshot {
        self.settle_parked();
        let segments = self.segments();
        let total_active: u64 = segments.iter().map(|s| s.active_size).sum();
        self.record_trace(TraceAction::Snapshot, 0, total_active, StreamId(0), None);
        let trace = self.history.as_ref().map(|h| h.entries().cloned().collect()).unwrap_or_default();
        let mut device_traces = vec![Vec::new(); self.device_index.max(0) as usize];
        device_traces.push(trace);
        Snapshot { segments, device_traces }
    }
}

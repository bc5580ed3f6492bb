//! Freeing (spec section 4): `free_requested`, stream-use events, and
//! `free_completed` with merging.

use super::CachingAllocator;
use crate::block::{BlockId, PendingEvent};
use crate::device::Device;
use crate::history::ContextLevel;
use crate::pool::FreeKey;
use crate::snapshot::{Frames, TraceAction};

impl<D: Device> CachingAllocator<D> {
    /// 4.1: the user dropped the block (already removed from `allocated`).
    #[inline(always)]
    pub(crate) fn free_impl(&mut self, id: BlockId, context: Option<Frames>) {
        let b = &mut self.blocks[id];
        b.allocated = false;
        let (addr, size, requested, stream, pool) = (b.addr, b.size, b.requested_size, b.stream, b.pool);
        let has_stream_uses = !b.stream_uses().is_empty();
        let held = b.held;
        let kind = self.pools[pool.0 as usize].kind;
        let oversize = size >= self.config.max_split_size();
        self.stats.account_free_requested(kind, size, oversize);
        if self.history.is_some() {
            let frames = self.free_trace_frames(id, &context);
            self.record_trace(TraceAction::FreeRequested, addr, requested, stream, frames);
        }
        if has_stream_uses && self.capture_underway() {
            // Events recorded during a capture would be part of the graph.
            self.deferred_frees.push(id);
        } else if has_stream_uses {
            self.insert_events(id);
        } else if held {
            // free_completed comes from the caller.
        } else {
            self.complete_free(id, &context, true);
        }
    }

    /// At level `All` a free entry carries the free site's stack; at `Alloc`
    /// the allocation's.
    fn free_trace_frames(&self, id: BlockId, context: &Option<Frames>) -> Option<Frames> {
        match &self.history {
            Some(h) if h.config.context >= ContextLevel::All && context.is_some() => context.clone(),
            Some(h) if h.config.context >= ContextLevel::Alloc => self.blocks[id].context_when_allocated().cloned(),
            _ => None,
        }
    }

    /// The events of frees deferred past a capture, recorded only for the
    /// streams used before it; a block left with none is free at once.
    fn insert_events_deferred_until_no_capture(&mut self, context: &Option<Frames>) {
        if !self.capture_underway() && !self.deferred_frees.is_empty() {
            for id in std::mem::take(&mut self.deferred_frees) {
                let extras = self.blocks[id].extras_mut();
                let captured = std::mem::take(&mut extras.capture_stream_uses);
                extras.stream_uses.retain(|s| !captured.contains(s));
                self.insert_events(id);
                let b = &self.blocks[id];
                if b.event_count() == 0 && !b.held {
                    self.free_block(id, context);
                }
            }
        }
    }

    /// Records one event per stream that used the block; it stays active until they complete.
    fn insert_events(&mut self, id: BlockId) {
        let streams = std::mem::take(&mut self.blocks[id].extras_mut().stream_uses);
        for stream in streams {
            let event = self.device.record_event(stream);
            self.blocks[id].extras_mut().event_count += 1;
            self.cuda_events.entry(stream).or_default().push_back(PendingEvent { event, block: id });
        }
    }

    /// Are there `record_stream` events or deferred frees for
    /// `process_events_impl` to look at?
    #[inline]
    pub(crate) fn events_pending(&self) -> bool {
        !self.cuda_events.is_empty() || !self.deferred_frees.is_empty()
    }

    /// 3 step 1: free the blocks whose events have completed, per stream in
    /// FIFO order, stopping at each stream's first incomplete event; the
    /// streams in `cuda_events`' order.
    pub(crate) fn process_events_impl(&mut self, context: &Option<Frames>) {
        self.insert_events_deferred_until_no_capture(context);
        if self.cuda_events.is_empty() {
            return;
        }
        let streams: Vec<_> = self.cuda_events.keys().rev().copied().collect();
        for stream in streams {
            while let Some(&pending) = self.cuda_events.get(&stream).and_then(|q| q.front()) {
                if !self.device.query_event(pending.event) {
                    break;
                }
                self.cuda_events.get_mut(&stream).expect("stream present").pop_front();
                self.complete_event(pending, context);
            }
            if self.cuda_events.get(&stream).is_some_and(|q| q.is_empty()) {
                self.cuda_events.remove(&stream);
            }
        }
    }

    /// 5.3 step 2: wait for every pending event and free what they held.
    pub(crate) fn synchronize_and_free_events(&mut self, context: &Option<Frames>) {
        self.stats.account_sync_all_streams();
        self.insert_events_deferred_until_no_capture(context);
        let events = std::mem::take(&mut self.cuda_events);
        for (_, queue) in events.into_iter().rev() {
            for pending in queue {
                self.device.synchronize_event(pending.event);
                self.complete_event(pending, context);
            }
        }
    }

    fn complete_event(&mut self, pending: PendingEvent, context: &Option<Frames>) {
        self.device.destroy_event(pending.event);
        let b = &mut self.blocks[pending.block];
        b.extras_mut().event_count -= 1;
        if b.event_count() == 0 && !b.held {
            self.free_block(pending.block, context);
        }
    }

    /// 4.2: the block becomes reusable: merge it with free neighbours and
    /// put it into its pool.
    #[inline(always)]
    pub(crate) fn free_block(&mut self, id: BlockId, context: &Option<Frames>) {
        self.complete_free(id, context, false);
    }

    /// `free_block`, or with `may_park` a parked free (`parked.rs`) where it
    /// is the plain case: the same statistics, the merge put off.
    #[inline(always)]
    fn complete_free(&mut self, id: BlockId, context: &Option<Frames>, may_park: bool) {
        if self.history.is_some() {
            let frames = self.free_trace_frames(id, context);
            let b = &self.blocks[id];
            self.record_trace(TraceAction::FreeCompleted, b.addr, b.requested_size, b.stream, frames);
        }
        let b = &mut self.blocks[id];
        debug_assert!(!b.allocated && !b.held && !b.is_active());
        let (original_size, requested, pool) = (b.size, b.requested_size, b.pool);
        b.set_context_when_allocated(None);

        let parked = if may_park { self.park(id) } else { None };
        let (merged, subsumed, expandable, split, size) = match parked {
            Some(m) => (1, m.subsumed, false, m.split, m.size),
            None => {
                let (merged, subsumed) = self.merge_and_pool(id);
                let b = &self.blocks[id];
                (merged, subsumed, b.expandable.is_some(), b.is_split(), b.size)
            }
        };
        // inactive_split is not kept for expandable blocks.
        let inactive_split = match (expandable, split) {
            (true, _) => (0, 0),
            (false, false) => (-(merged as i64), -(subsumed as i64)),
            (false, true) => (1 - merged as i64, size as i64 - subsumed as i64),
        };
        let kind = self.pools[pool.0 as usize].kind;
        self.stats.account_free_completed(kind, original_size, requested, inactive_split);
    }

    /// Merges the free block `id` (in no pool) with its free neighbours of
    /// the same mapped state and puts the result into its pool's free set,
    /// or its unmapped set; returns the neighbours merged and their bytes.
    #[inline(always)]
    pub(crate) fn merge_and_pool(&mut self, id: BlockId) -> (u32, u64) {
        // A merged neighbour's free-set entry becomes the result's.
        let mut replacing = None;
        let prev = self.blocks[id].prev;
        let before = self.try_merge_blocks(id, prev, &mut replacing);
        let next = self.blocks[id].next;
        let after = self.try_merge_blocks(id, next, &mut replacing);
        let b = &self.blocks[id];
        if b.mapped {
            self.put_into_pool(id, replacing);
        } else {
            self.pools[b.pool.0 as usize].unmapped.insert((b.stream, b.addr), id);
        }
        ((before > 0) as u32 + (after > 0) as u32, before + after)
    }

    /// Merges `src` into `dst` if `src` is a free neighbour; returns the
    /// bytes subsumed. A mapped `src` stays in its free set when
    /// `replacing` is empty (its key goes there), else it is taken out.
    #[inline(always)]
    fn try_merge_blocks(&mut self, dst: BlockId, src: Option<BlockId>, replacing: &mut Option<(FreeKey, u32)>) -> u64 {
        let Some(src) = src else { return 0 };
        let dst_mapped = self.blocks[dst].mapped;
        let s = &mut self.blocks[src];
        if s.is_active() || s.mapped != dst_mapped {
            return 0;
        }
        let (s_addr, s_size, s_prev, s_next, s_key) = (s.addr, s.size, s.prev, s.next, FreeKey::of(s));
        let s_context = s.take_context_when_segment_allocated();
        if !dst_mapped {
            self.pools[s.pool.0 as usize].unmapped.remove(&(s.stream, s.addr));
        } else if replacing.is_none() {
            *replacing = Some((s_key, self.pools[s.pool.0 as usize].blocks.placed(src)));
        } else {
            let set = &mut self.pools[s.pool.0 as usize].blocks;
            let removed = set.remove(s.stream, s_key, set.placed(src));
            debug_assert!(removed, "block {src:?} was not in its pool");
        }
        self.blocks.discard(src);
        let d = &mut self.blocks[dst];
        d.size += s_size;
        let relink = if d.prev == Some(src) {
            d.addr = s_addr;
            d.prev = s_prev;
            d.set_context_when_segment_allocated(s_context);
            s_prev.map(|p| (p, true))
        } else {
            d.next = s_next;
            s_next.map(|n| (n, false))
        };
        match relink {
            Some((p, true)) => self.blocks[p].next = Some(dst),
            Some((n, false)) => self.blocks[n].prev = Some(dst),
            None => {}
        }
        s_size
    }
}

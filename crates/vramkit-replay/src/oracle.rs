//! Oracle replay: follow the trace's own placement and measure the ground
//! truth over time.
//!
//! Reserved bytes are the running sum of the recorded segment events from
//! the rebuilt start state. A block allocated in the window occupies
//! `round_size(requested)` at its recorded address, plus, in the large pool,
//! the rest of the free gap it was carved from when that rest is at most
//! 1 MiB (PyTorch hands such a block out whole).

use crate::metrics::{LowerBound, Metrics, Sample, Timeline};
use crate::prepared::PreparedTrace;
use crate::trace::DeviceTrace;
use crate::ReplayError;
use std::collections::BTreeMap;
use vramkit_core::rounding::{round_size, PoolKind, LARGE_SPLIT_REMAINDER};
use vramkit_core::{AllocatorConfig, BlockState, TraceAction};

#[derive(Clone, Copy, Debug)]
struct Seg {
    size: u64,
    kind: PoolKind,
    /// Bytes of active blocks in it.
    active: u64,
}

#[derive(Clone, Copy, Debug)]
struct Live {
    size: u64,
    requested: u64,
    allocated: bool,
}

struct Oracle {
    segments: BTreeMap<u64, Seg>,
    live: BTreeMap<u64, Live>,
    reserved: u64,
    allocated: u64,
    requested: u64,
    inactive_split: u64,
}

impl Oracle {
    fn segment_of(&self, addr: u64) -> Option<u64> {
        self.segments.range(..=addr).next_back().filter(|(&a, s)| addr < a + s.size).map(|(&a, _)| a)
    }

    /// Changes a segment's active bytes and keeps `inactive_split` (free bytes
    /// of segments with something active) in step.
    fn add_active(&mut self, seg: u64, delta: i64) {
        let s = self.segments.get_mut(&seg).expect("segment");
        let before = if s.active > 0 { s.size - s.active } else { 0 };
        s.active = (s.active as i64 + delta) as u64;
        let after = if s.active > 0 { s.size - s.active } else { 0 };
        self.inactive_split = self.inactive_split + after - before;
    }

    fn largest_free_block(&self) -> u64 {
        let mut largest = 0;
        for (&a, s) in &self.segments {
            let mut cursor = a;
            for (&b, l) in self.live.range(a..a + s.size) {
                largest = largest.max(b - cursor);
                cursor = b + l.size;
            }
            largest = largest.max(a + s.size - cursor);
        }
        largest
    }
}

/// Replays `trace`, recorded under `config`, as recorded.
/// `timeline_points` > 0 keeps a downsampled timeline.
pub fn oracle_replay(trace: &DeviceTrace, config: &AllocatorConfig, timeline_points: usize) -> Result<Metrics, ReplayError> {
    Ok(PreparedTrace::new(trace, config.clone(), None)?.oracle_replay(timeline_points))
}

/// The oracle replay of `prepared`.
pub(crate) fn run(prepared: &PreparedTrace<'_>, timeline_points: usize) -> Metrics {
    let (trace, start, config) = (prepared.trace(), prepared.start(), prepared.recorded());
    let mut o = Oracle {
        segments: BTreeMap::new(),
        live: BTreeMap::new(),
        reserved: 0,
        allocated: 0,
        requested: 0,
        inactive_split: 0,
    };
    let mut lower = LowerBound::new(0);
    for s in &start.segments {
        o.segments.insert(s.address, Seg { size: s.total_size, kind: s.segment_type, active: 0 });
        o.reserved += s.total_size;
        for b in s.blocks.iter().filter(|b| b.state.is_active()) {
            let allocated = b.state == BlockState::ActiveAllocated;
            o.live.insert(b.address, Live { size: b.size, requested: b.requested_size, allocated });
            o.add_active(s.address, b.size as i64);
            o.requested += b.requested_size;
            lower.add(b.requested_size);
            if allocated {
                o.allocated += b.size;
            }
        }
    }
    let mut m = Metrics { events: trace.events.len() as u64, ..Metrics::default() };
    let mut timeline = Timeline::new(m.events, timeline_points);
    let mut note = |o: &Oracle, m: &mut Metrics, event: u64| {
        if o.reserved > m.peak_reserved_bytes {
            m.peak_reserved_bytes = o.reserved;
            m.waste_bytes_at_peak = o.reserved - o.allocated;
            m.largest_free_block_at_peak = o.largest_free_block();
        }
        m.peak_allocated_bytes = m.peak_allocated_bytes.max(o.allocated);
        m.peak_requested_bytes = m.peak_requested_bytes.max(o.requested);
        m.peak_inactive_split_bytes = m.peak_inactive_split_bytes.max(o.inactive_split);
        timeline.push(Sample { event, allocated_bytes: o.allocated, reserved_bytes: o.reserved, requested_bytes: o.requested });
    };
    note(&o, &mut m, 0);
    for (i, e) in trace.events.iter().enumerate() {
        match e.action {
            TraceAction::SegmentAlloc => {
                let kind = if e.size == vramkit_core::rounding::SMALL_BUFFER { PoolKind::Small } else { PoolKind::Large };
                o.segments.insert(e.addr, Seg { size: e.size, kind, active: 0 });
                o.reserved += e.size;
                m.device_mallocs += 1;
            }
            TraceAction::SegmentFree => {
                if let Some(s) = o.segments.remove(&e.addr) {
                    o.reserved -= s.size;
                    m.device_frees += 1;
                }
            }
            TraceAction::SegmentMap => {
                o.reserved += e.size;
                m.device_mallocs += 1;
            }
            TraceAction::SegmentUnmap => {
                o.reserved = o.reserved.saturating_sub(e.size);
                m.device_frees += 1;
            }
            TraceAction::Alloc => {
                let Some(seg_addr) = o.segment_of(e.addr) else {
                    // In expandable-segment memory: a block is exactly its
                    // rounded size (any remainder of 512 B or more is split off).
                    let r = round_size(e.size, &config.roundup_power2_divisions);
                    o.live.insert(e.addr, Live { size: r, requested: e.size, allocated: true });
                    o.allocated += r;
                    o.requested += e.size;
                    lower.add(e.size);
                    note(&o, &mut m, i as u64 + 1);
                    continue;
                };
                let seg = o.segments[&seg_addr];
                let r = round_size(e.size, &config.roundup_power2_divisions);
                let next = o.live.range(e.addr + 1..).next().map(|(&a, _)| a).filter(|&a| a < seg_addr + seg.size).unwrap_or(seg_addr + seg.size);
                let gap = next.saturating_sub(e.addr);
                let whole = gap >= r && (gap - r <= LARGE_SPLIT_REMAINDER || r >= config.max_split_size());
                let size = if seg.kind == PoolKind::Large && whole { gap } else { r };
                o.live.insert(e.addr, Live { size, requested: e.size, allocated: true });
                o.add_active(seg_addr, size as i64);
                o.allocated += size;
                o.requested += e.size;
                lower.add(e.size);
            }
            TraceAction::FreeRequested => {
                if let Some(l) = o.live.get_mut(&e.addr) {
                    if l.allocated {
                        l.allocated = false;
                        o.allocated -= l.size;
                    }
                }
            }
            TraceAction::FreeCompleted => {
                if let Some(l) = o.live.remove(&e.addr) {
                    if l.allocated {
                        o.allocated -= l.size;
                    }
                    o.requested -= l.requested;
                    lower.remove(l.requested);
                    if let Some(seg) = o.segment_of(e.addr) {
                        o.add_active(seg, -(l.size as i64));
                    }
                }
            }
            TraceAction::Oom => {
                m.oom_count += 1;
                m.first_oom_event.get_or_insert(i as u64);
            }
            _ => {}
        }
        note(&o, &mut m, i as u64 + 1);
    }
    timeline.flush();
    m.timeline = timeline.samples;
    m.lower_bound_bytes = lower.peak;
    m.utilization = if m.peak_reserved_bytes == 0 { 0.0 } else { m.peak_allocated_bytes as f64 / m.peak_reserved_bytes as f64 };
    m
}

/// The oracle replay is a question asked of a prepared trace.
impl PreparedTrace<'_> {
    /// The trace's own placement, replayed (see `oracle`).
    pub fn oracle_replay(&self, timeline_points: usize) -> Metrics {
        run(self, timeline_points)
    }
}

//! Rebuilding the allocator state at the start of a trace window.
//!
//! A trace is the tail of a ring buffer: memory was allocated before its
//! first entry. The snapshot's `segments` are the state at its last entry.
//! Walking the trace backwards from them (spec 13, item 5):
//! - a segment exists at the start unless its first segment event in the
//!   window is a `segment_alloc`; one whose first event is a `segment_free`
//!   existed although it is gone at the end;
//! - a block is live at the start if its address's first block event is a
//!   `free_requested` (allocated) or a `free_completed` (pending free), or
//!   if it is active at the end and no event touched its address (a survivor);
//! - a survivor keeps its end-state size; a block freed in the window has
//!   size `round_size(requested)`, plus, in the large pool of a classic
//!   segment, the tail it was handed with: the whole gap after it when that
//!   gap leaves at most 1 MiB over, or up to the first allocation that lands
//!   within 1 MiB after it while it is live;
//! - the space between live blocks is one free block per gap (free blocks
//!   are always merged).

use crate::trace::DeviceTrace;
use vramkit_core::AddrMap;
use std::collections::BTreeMap;
use vramkit_core::rounding::{round_size, PoolKind, LARGE_SPLIT_REMAINDER, SMALL_BUFFER};
use vramkit_core::{AllocatorConfig, BlockInfo, BlockState, Frames, SegmentInfo, TraceAction};

/// The state at the start of the window.
#[derive(Clone, Debug, PartialEq)]
pub struct StartState {
    /// Segments at the first entry, sorted by address.
    pub segments: Vec<SegmentInfo>,
    /// Allocations the trace never frees whose blocks are free at the end:
    /// the trace stops before the `segments` state (an edited file). Their
    /// addresses, in allocation order.
    pub cut_frees: Vec<u64>,
}

/// Why the start state cannot be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// The trace and the end state contradict each other.
    #[error("device {device}: the trace does not fit the snapshot's segments: {detail}")]
    Inconsistent {
        /// Device index.
        device: i64,
        /// What does not fit.
        detail: String,
    },
    /// The trace has something this version cannot rebuild yet.
    #[error("device {device}: {what} cannot be replayed yet")]
    Unsupported {
        /// Device index.
        device: i64,
        /// What.
        what: &'static str,
    },
}

#[derive(Clone, Debug)]
struct StartSegment {
    address: u64,
    size: u64,
    stream: u64,
    kind: PoolKind,
    pool_id: (u64, u64),
    frames: Option<Frames>,
}

#[derive(Clone, Debug)]
struct LiveBlock {
    addr: u64,
    /// Known for survivors; computed for the others.
    size: Option<u64>,
    requested: u64,
    state: BlockState,
    frames: Option<Frames>,
    /// Index of the block's first `free_completed` in the window.
    freed_at: Option<usize>,
}

/// Rebuilds the state at the window's first entry.
pub fn rebuild_start(trace: &DeviceTrace, config: &AllocatorConfig) -> Result<StartState, WindowError> {
    let device = trace.device;
    let inconsistent = |detail: String| WindowError::Inconsistent { device, detail };
    if !mapped_at_start(trace).is_empty() {
        return Err(WindowError::Unsupported {
            device,
            what: "a trace that starts with expandable-segment memory already mapped (record it from the start of the process, or after empty_cache(), so the trace shows where each reservation begins)",
        });
    }

    // Segments at the start.
    let events = &trace.events;
    let mut first_segment_event: AddrMap<(TraceAction, u64, u64)> = AddrMap::default();
    for (i, &action) in events.actions().iter().enumerate() {
        if matches!(action, TraceAction::SegmentAlloc | TraceAction::SegmentFree) {
            // The first one counts (a later insert changes nothing).
            first_segment_event.insert(events.addr(i), (action, events.size(i), events.stream(i)));
        }
    }
    // An end segment is there at the start when no segment event touches its
    // address: one whose address was freed in the window is a later
    // incarnation (cudaMalloc hands freed addresses out again), and the one
    // at the start is the freed one, sized by its segment_free.
    let mut segments: BTreeMap<u64, StartSegment> = BTreeMap::new();
    for s in trace.end_segments.iter().filter(|s| !s.is_expandable) {
        if !first_segment_event.contains(s.address) {
            segments.insert(
                s.address,
                StartSegment {
                    address: s.address,
                    size: s.total_size,
                    stream: s.stream,
                    kind: s.segment_type,
                    pool_id: s.segment_pool_id,
                    frames: s.frames.clone(),
                },
            );
        }
    }
    for (addr, (action, size, stream)) in first_segment_event.iter() {
        if action == TraceAction::SegmentFree && !segments.contains_key(&addr) {
            let kind = if size == SMALL_BUFFER { PoolKind::Small } else { PoolKind::Large };
            segments.insert(addr, StartSegment { address: addr, size, stream, kind, pool_id: (0, 0), frames: None });
        }
    }

    // Blocks live at the start.
    let seen = blocks_seen(events);
    let mut live: BTreeMap<u64, LiveBlock> = BTreeMap::new();
    for s in &trace.end_segments {
        for b in s.blocks.iter().filter(|b| b.state.is_active()) {
            if !seen.contains(b.address) && segments.contains_key(&s.address) {
                live.insert(
                    b.address,
                    LiveBlock {
                        addr: b.address,
                        size: Some(b.size),
                        requested: b.requested_size,
                        state: b.state,
                        frames: b.frames.clone(),
                        freed_at: None,
                    },
                );
            }
        }
    }
    for (addr, seen) in seen.iter() {
        let (action, i) = (seen.first, seen.first_at);
        let state = match action {
            TraceAction::FreeRequested => BlockState::ActiveAllocated,
            TraceAction::FreeCompleted => BlockState::ActivePendingFree,
            _ => continue,
        };
        live.insert(
            addr,
            LiveBlock {
                addr,
                size: None,
                requested: trace.events.size(i),
                state,
                frames: trace.events.frames(i).cloned(),
                freed_at: seen.first_completed,
            },
        );
    }

    // Sizes of the blocks freed in the window.
    let addrs: Vec<u64> = live.keys().copied().collect();
    for (k, &a) in addrs.iter().enumerate() {
        let seg = segments
            .range(..=a)
            .next_back()
            .map(|(_, s)| s)
            .filter(|s| a < s.address + s.size)
            .ok_or_else(|| inconsistent(format!("a block at {a:#x} is live at the start but lies in no segment")))?;
        let seg_end = seg.address + seg.size;
        let next = addrs.get(k + 1).copied().filter(|&n| n < seg_end).unwrap_or(seg_end);
        let gap = next - a;
        let block = live.get_mut(&a).expect("listed");
        if block.size.is_some() {
            continue;
        }
        let r = round_size(block.requested, &config.roundup_power2_divisions);
        if r > gap {
            return Err(inconsistent(format!(
                "the block at {a:#x} needs {r} bytes but only {gap} are free before the next block or the segment end"
            )));
        }
        let mut size = r;
        if seg.kind == PoolKind::Large {
            // An oversize block is never split: it is its whole free block.
            if gap - r <= LARGE_SPLIT_REMAINDER || r >= config.max_split_size() {
                size = gap;
            } else {
                let until = block.freed_at.unwrap_or(trace.events.len());
                let landing = trace
                    .events
                    .iter()
                    .take(until)
                    .filter(|e| e.action == TraceAction::Alloc && e.addr >= a + r && e.addr <= a + r + LARGE_SPLIT_REMAINDER)
                    .map(|e| e.addr)
                    .min();
                if let Some(x) = landing {
                    size = x - a;
                }
            }
        }
        block.size = Some(size);
    }

    // Assemble segments: live blocks plus one free block per gap.
    let mut out = Vec::with_capacity(segments.len());
    for seg in segments.values() {
        let end = seg.address + seg.size;
        let mut blocks = Vec::new();
        let mut cursor = seg.address;
        for b in live.range(seg.address..end).map(|(_, b)| b) {
            let size = b.size.expect("sized above");
            if b.addr < cursor {
                return Err(inconsistent(format!("blocks overlap at {:#x}", b.addr)));
            }
            if b.addr > cursor {
                blocks.push(free_block(cursor, b.addr - cursor));
            }
            if b.addr + size > end {
                return Err(inconsistent(format!("the block at {:#x} runs past its segment's end {end:#x}", b.addr)));
            }
            blocks.push(BlockInfo { address: b.addr, size, requested_size: b.requested, state: b.state, frames: b.frames.clone() });
            cursor = b.addr + size;
        }
        if cursor < end {
            blocks.push(free_block(cursor, end - cursor));
        }
        out.push(segment_info(trace.device, seg, blocks));
    }

    Ok(StartState { segments: out, cut_frees: cut_frees(trace, &seen) })
}

/// The expandable-segment ranges mapped at the window's start: the end
/// state's mapped runs, with the trace's maps undone and unmaps redone,
/// walking backwards.
fn mapped_at_start(trace: &DeviceTrace) -> Vec<(u64, u64)> {
    let mut mapped: BTreeMap<u64, u64> = BTreeMap::new(); // start -> end
    let add = |m: &mut BTreeMap<u64, u64>, s: u64, e: u64| {
        let (mut s, mut e) = (s, e);
        let touching: Vec<(u64, u64)> = m.range(..=e).filter(|(_, &end)| end >= s).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in touching {
            m.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        m.insert(s, e);
    };
    let remove = |m: &mut BTreeMap<u64, u64>, s: u64, e: u64| {
        let overlapping: Vec<(u64, u64)> = m.range(..e).filter(|(_, &end)| end > s).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in overlapping {
            m.remove(&a);
            if a < s {
                m.insert(a, s);
            }
            if b > e {
                m.insert(e, b);
            }
        }
    };
    for seg in trace.end_segments.iter().filter(|s| s.is_expandable) {
        add(&mut mapped, seg.address, seg.address + seg.total_size);
    }
    let events = &trace.events;
    for (i, &action) in events.actions().iter().enumerate().rev() {
        let range = || (events.addr(i), events.addr(i) + events.size(i));
        match action {
            TraceAction::SegmentMap => {
                let (s, e) = range();
                remove(&mut mapped, s, e);
            }
            TraceAction::SegmentUnmap => {
                let (s, e) = range();
                add(&mut mapped, s, e);
            }
            _ => {}
        }
    }
    mapped.into_iter().collect()
}

fn free_block(address: u64, size: u64) -> BlockInfo {
    BlockInfo { address, size, requested_size: 0, state: BlockState::Inactive, frames: None }
}

fn segment_info(device: i64, seg: &StartSegment, blocks: Vec<BlockInfo>) -> SegmentInfo {
    let allocated_size = blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.size).sum();
    let active: Vec<&BlockInfo> = blocks.iter().filter(|b| b.state.is_active()).collect();
    SegmentInfo {
        device,
        address: seg.address,
        total_size: seg.size,
        allocated_size,
        active_size: active.iter().map(|b| b.size).sum(),
        requested_size: active.iter().map(|b| b.requested_size).sum(),
        stream: seg.stream,
        segment_type: seg.kind,
        segment_pool_id: seg.pool_id,
        is_expandable: false,
        frames: seg.frames.clone(),
        blocks,
    }
}

/// What the window's entries say of one block address.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The first `alloc`, `free_requested` or `free_completed` at it, and where.
    first: TraceAction,
    first_at: usize,
    /// Where its first `free_completed` is.
    first_completed: Option<usize>,
    /// Its last `alloc`, when no `free_requested` follows it.
    open_alloc: Option<usize>,
}

/// Every block address the entries name, with what they say of it: one
/// walk, one map probe per entry.
fn blocks_seen(events: &vramkit_trace::Entries) -> AddrMap<Seen> {
    let mut seen: AddrMap<Seen> = AddrMap::default();
    for (i, (&action, addr)) in events.actions().iter().zip(events.addrs()).enumerate() {
        if !matches!(action, TraceAction::Alloc | TraceAction::FreeRequested | TraceAction::FreeCompleted) {
            continue;
        }
        let note = |s: &mut Seen| match action {
            TraceAction::Alloc => s.open_alloc = Some(i),
            TraceAction::FreeRequested => s.open_alloc = None,
            _ => {
                s.first_completed.get_or_insert(i);
            }
        };
        match seen.get_mut(addr) {
            Some(s) => note(s),
            None => {
                let mut s = Seen { first: action, first_at: i, first_completed: None, open_alloc: None };
                note(&mut s);
                seen.insert(addr, s);
            }
        }
    }
    seen
}

/// Allocations never freed in the trace whose blocks are not active at the
/// end (`seen`: what the entries say of each address).
fn cut_frees(trace: &DeviceTrace, seen: &AddrMap<Seen>) -> Vec<u64> {
    let open = seen.iter().filter_map(|(a, s)| s.open_alloc.map(|i| (a, i)));
    let mut active_at_end: AddrMap<()> = AddrMap::default();
    for b in trace.end_segments.iter().flat_map(|s| s.blocks.iter()).filter(|b| b.state.is_active()) {
        active_at_end.insert(b.address, ());
    }
    let mut cut: Vec<(usize, u64)> = open.filter(|&(a, _)| !active_at_end.contains(a)).map(|(a, i)| (i, a)).collect();
    cut.sort_unstable();
    cut.into_iter().map(|(_, a)| a).collect()
}

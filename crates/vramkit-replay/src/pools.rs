//! Which private pool each allocation of a trace went to.
//!
//! PyTorch routes a request to a private pool (a CUDA graph's, a
//! `torch.cuda.MemPool`) while a capture on its stream is underway, and
//! records neither the routing nor the capture: trace entries carry no pool
//! id. Segments do, in the snapshot's state: a segment alive at the window
//! start or at its end names its pool (`segment_pool_id`), and every
//! allocation placed in it went to that pool. A segment made and freed
//! inside the window names none; an allocation placed in one takes the pool
//! of the allocations around it on its stream (a capture routes every
//! request on its stream, so a run of one stream's requests between two
//! requests of one pool was all that pool's), else the default pools.
//!
//! A pool's segments are freed only once every user released it; a release
//! that frees one says the pool had become freeable by then.
//!
//! Under expandable segments a segment is a reservation: pages mapped where
//! no live reservation reaches start one (PyTorch keeps one per stream,
//! pool and size class), pages mapped up to its extent grow it, and it is
//! released when its last pages are unmapped.
//!
//! Where the neighbours do not tell (a pool whose every segment was freed
//! inside the window names none), the segment is read as the default
//! pools' until `verify`'s replay, where the model is PyTorch, shows
//! otherwise; it is then routed to a private pool of its own
//! ([`PoolRouting::own_pool`]), or back ([`Overrides`]):
//!
//! - a segment PyTorch made while the default pools cached a block that
//!   fits, or held an expandable segment the request would have grown, was
//!   made for a private pool (routed at once, in the same replay);
//! - a segment the model would release in an `empty_cache()` that PyTorch
//!   did not release there was a private pool's, not yet freeable; a
//!   release order the model cannot match says the other way round;
//! - a request the model serves from a segment read as the default pools'
//!   where PyTorch did not: that segment (or PyTorch's) was a private
//!   pool's.

use crate::trace::DeviceTrace;
use std::collections::BTreeMap;
use vramkit_core::snapshot::MempoolId;
use vramkit_core::{SegmentInfo, TraceAction};
use vramkit_trace::Entries;

const DEFAULT: MempoolId = (0, 0);

/// Segments (by their index among the segments a trace shows) whose pool
/// the snapshot does not name, routed by replays that showed it: to a
/// private pool of their own ([`PoolRouting::own_pool`]), or to the default
/// pools (`(0, 0)`).
pub(crate) type Overrides = BTreeMap<usize, MempoolId>;

/// Per trace entry: the private pool of an `alloc`, or of the segment a
/// `segment_free` releases; `None` for the default pools and other entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PoolRouting {
    pools: Vec<Option<MempoolId>>,
    /// Per entry: the segment (index into `spans`) an `alloc` was placed
    /// in or a `segment_free` released.
    segment: Vec<Option<usize>>,
    /// Every segment seen.
    spans: Vec<Span>,
    /// Rule out private pools for segments seen serving a `malloc` that
    /// processed events (see [`PoolRouting::may_become_private`]).
    events_rule_out_pools: bool,
}

/// One segment's life: where it lies, the entries that made and freed it
/// (inside the window), whether the snapshot names its pool, the entries
/// that placed an allocation in it or freed it.
#[derive(Clone, Debug, PartialEq)]
struct Span {
    addr: u64,
    size: u64,
    made: Option<usize>,
    freed: Option<usize>,
    named: bool,
    entries: Vec<usize>,
    /// An allocation placed in it followed frees completed by that
    /// `malloc`'s `process_events()` (see [`PoolRouting::may_become_private`]).
    after_process_events: bool,
    /// Mapped pages (an expandable segment), not one `cudaMalloc`.
    expandable: bool,
}

impl PoolRouting {
    /// Whether segment `k` is an expandable segment (mapped pages).
    pub fn is_expandable(&self, k: usize) -> bool {
        self.spans[k].expandable
    }

    /// Whether the trace shows private pools.
    pub fn uses_pools(&self) -> bool {
        !self.spans.is_empty()
    }

    /// The segment whose pool the snapshot does not name that lies at
    /// `addr` and is released at entry `i` or later, alive at `i`.
    pub fn unnamed_segment_released_at_or_after(&self, i: usize, addr: u64) -> Option<usize> {
        self.spans.iter().position(|s| !s.named && s.addr == addr && s.made.is_none_or(|m| m <= i) && s.freed.is_some_and(|f| i <= f))
    }

    /// The private pool entry `i` went to, if any.
    pub fn pool(&self, i: usize) -> Option<MempoolId> {
        self.pools.get(i).copied().flatten()
    }

    /// The segment whose pool the snapshot does not name that holds
    /// `addr` at entry `i`, if any.
    pub fn unnamed_segment_at(&self, i: usize, addr: u64) -> Option<usize> {
        self.spans.iter().position(|s| {
            !s.named && s.addr <= addr && addr < s.addr + s.size && s.made.is_none_or(|m| m <= i) && s.freed.is_none_or(|f| i < f)
        })
    }

    /// The segment whose pool the snapshot does not name that entry `i`
    /// (an `alloc`, a `segment_free`) placed in or released, if any.
    pub fn unnamed_segment_of(&self, i: usize) -> Option<usize> {
        self.segment.get(i).copied().flatten().filter(|&k| !self.spans[k].named)
    }

    /// The segment whose pool the snapshot does not name that the `alloc`
    /// at entry `i` made (the first placed in a segment made in the
    /// window), if any.
    pub fn made_by(&self, i: usize) -> Option<usize> {
        self.unnamed_segment_of(i).filter(|&k| self.spans[k].made.is_some() && self.spans[k].entries.first() == Some(&i))
    }

    /// Whether segment `k` is routed to a private pool.
    pub fn is_private(&self, k: usize) -> bool {
        self.spans[k].entries.first().is_some_and(|&i| self.pool(i).is_some())
    }

    /// Whether segment `k`, read as the default pools', may be routed to a
    /// private pool of its own: not where an allocation placed in it was
    /// made by a `malloc` that processed events, which PyTorch (up to 2.12)
    /// skips while any allocation to a private pool is underway, unless
    /// that rule was relaxed.
    pub fn may_become_private(&self, k: usize) -> bool {
        !(self.is_private(k) || (self.events_rule_out_pools && self.spans[k].after_process_events))
    }

    /// Whether relaxing the event rule would allow anything more.
    pub fn relaxes_anything(&self) -> bool {
        self.events_rule_out_pools && self.spans.iter().any(|s| !s.named && s.after_process_events)
    }

    /// Lets segments seen serving a `malloc` that processed events be
    /// routed to private pools too: what the trace shows is not always
    /// what PyTorch's rule implies (a search `verify` makes second).
    pub fn relax_event_rule(&mut self) {
        self.events_rule_out_pools = false;
    }

    /// Routes segment `k` (and every entry placed in it) to a private pool
    /// of its own.
    pub fn route_to_own_pool(&mut self, k: usize) {
        for &i in &self.spans[k].entries {
            self.pools[i] = Some(Self::own_pool(k));
        }
    }

    /// A pool no snapshot names, for segment `k` alone. Allocations placed
    /// in one segment of a private pool are placed the same when the pool
    /// is split by segment (the best fit among all its blocks is the best
    /// among its own segment's), and a pool's segments are released in
    /// the order their releases show, so a pool the snapshot does not name
    /// is replayed as one pool per segment.
    pub fn own_pool(k: usize) -> MempoolId {
        (u64::MAX, k as u64)
    }
}

/// One segment's life in the window.
struct Instance {
    addr: u64,
    size: u64,
    /// The entries that made and freed it, inside the window.
    made: Option<usize>,
    freed: Option<usize>,
    /// Its pool, when the state at an end of the window names it.
    pool: Option<MempoolId>,
    /// Entries that placed an allocation in it, or freed it.
    entries: Vec<usize>,
    /// An expandable segment: `size` is the extent its pages reached,
    /// `mapped` the bytes mapped now; it is released when none are left.
    expandable: bool,
    mapped: u64,
}

/// Whether the `malloc` of the `alloc` at entry `i` began by processing
/// events: a run of `free_completed` entries directly before it includes
/// one whose `free_requested` is not directly before it (a held block,
/// freed when its event was found complete). PyTorch skips that while any
/// capture is underway.
fn after_process_events(events: &Entries, i: usize) -> bool {
    let actions = events.actions();
    let mut j = i;
    while j > 0 && actions[j - 1] == TraceAction::FreeCompleted {
        j -= 1;
        let plain = j > 0 && actions[j - 1] == TraceAction::FreeRequested && events.addr(j - 1) == events.addr(j);
        if !plain {
            return true;
        }
        j -= 1;
    }
    false
}

/// Whether the snapshot shows a private pool: a segment at either end of
/// the window names one.
pub(crate) fn uses_pools(trace: &DeviceTrace, start: &[SegmentInfo]) -> bool {
    start.iter().chain(&trace.end_segments).any(|s| s.segment_pool_id != DEFAULT)
}

/// Routes every entry of `trace`, whose window starts in `start` (the
/// rebuilt start state's segments). `pools_skip_events`: the release
/// skips `process_events()` whenever an allocation to a private pool is
/// underway (up to 2.12; later releases only while capturing a graph).
pub(crate) fn route(trace: &DeviceTrace, start: &[SegmentInfo], overrides: &Overrides, pools_skip_events: bool) -> PoolRouting {
    let n = trace.events.len();
    if !uses_pools(trace, start) {
        return PoolRouting::default();
    }
    // Live segments by address, and every segment seen.
    let mut live: BTreeMap<u64, usize> = BTreeMap::new();
    let mut instances: Vec<Instance> = Vec::new();
    for s in start {
        live.insert(s.address, instances.len());
        instances.push(Instance {
            addr: s.address,
            size: s.total_size,
            made: None,
            freed: None,
            pool: Some(s.segment_pool_id),
            entries: Vec::new(),
            expandable: s.is_expandable,
            mapped: s.total_size,
        });
    }
    let mut label: Vec<Option<usize>> = vec![None; n];
    for (i, e) in trace.events.iter().enumerate() {
        match e.action {
            TraceAction::SegmentAlloc => {
                live.insert(e.addr, instances.len());
                instances.push(Instance { addr: e.addr, size: e.size, made: Some(i), freed: None, pool: None, entries: Vec::new(), expandable: false, mapped: e.size });
            }
            // Pages mapped at or below the extent of a live expandable
            // segment grow it; elsewhere they start a new one (PyTorch
            // reserves one per stream, pool and size class).
            TraceAction::SegmentMap => {
                let grows = live.range(..=e.addr).next_back().map(|(_, &k)| k).filter(|&k| {
                    let inst = &instances[k];
                    inst.expandable && e.addr <= inst.addr + inst.size
                });
                match grows {
                    Some(k) => {
                        let inst = &mut instances[k];
                        inst.mapped += e.size;
                        inst.size = inst.size.max(e.addr + e.size - inst.addr);
                    }
                    None => {
                        live.insert(e.addr, instances.len());
                        instances.push(Instance { addr: e.addr, size: e.size, made: Some(i), freed: None, pool: None, entries: Vec::new(), expandable: true, mapped: e.size });
                    }
                }
            }
            TraceAction::SegmentUnmap => {
                let k = live.range(..=e.addr).next_back().map(|(&a, &k)| (a, k)).filter(|&(a, k)| instances[k].expandable && e.addr < a + instances[k].size);
                if let Some((a, k)) = k {
                    let inst = &mut instances[k];
                    inst.entries.push(i);
                    inst.mapped = inst.mapped.saturating_sub(e.size);
                    label[i] = Some(k);
                    if inst.mapped == 0 {
                        inst.freed = Some(i);
                        live.remove(&a);
                    }
                }
            }
            TraceAction::SegmentFree => {
                if let Some(k) = live.remove(&e.addr) {
                    instances[k].entries.push(i);
                    instances[k].freed = Some(i);
                    label[i] = Some(k);
                }
            }
            TraceAction::Alloc => {
                let k = live.range(..=e.addr).next_back().map(|(&a, &k)| (a, k)).filter(|&(a, k)| e.addr < a + instances[k].size);
                if let Some((_, k)) = k {
                    instances[k].entries.push(i);
                    label[i] = Some(k);
                }
            }
            _ => {}
        }
    }
    for s in &trace.end_segments {
        if let Some(&k) = live.get(&s.address) {
            if instances[k].size == s.total_size || instances[k].expandable {
                instances[k].pool = Some(s.segment_pool_id);
            }
        }
    }
    let events = &trace.events;
    let spans = instances
        .iter()
        .map(|s| Span {
            addr: s.addr,
            size: s.size,
            made: s.made,
            freed: s.freed,
            named: s.pool.is_some(),
            entries: s.entries.clone(),
            after_process_events: s.entries.iter().any(|&i| events.actions()[i] == TraceAction::Alloc && after_process_events(events, i)),
            expandable: s.expandable,
        })
        .collect();
    // Named pools first; then an unnamed segment takes the pool a replay
    // showed it in, else the pool its allocations' stream neighbours in
    // named segments agree on.
    let named: Vec<Option<MempoolId>> = (0..n).map(|i| label[i].and_then(|k| instances[k].pool)).collect();
    let mut pools = named.clone();
    let mut by_stream: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, e) in trace.events.iter().enumerate() {
        if e.action == TraceAction::Alloc {
            by_stream.entry(e.stream).or_default().push(i);
        }
    }
    for (k, inst) in instances.iter().enumerate().filter(|(_, inst)| inst.pool.is_none()) {
        let allocs: Vec<usize> = inst.entries.iter().copied().filter(|&i| trace.events.actions()[i] == TraceAction::Alloc).collect();
        let by_neighbours = || {
            allocs.iter().find_map(|&i| {
                let on_stream = &by_stream[&trace.events.stream(i)];
                let at = on_stream.binary_search(&i).ok()?;
                let before = on_stream[..at].iter().rev().find_map(|&j| named[j]);
                let after = on_stream[at + 1..].iter().find_map(|&j| named[j]);
                (before.is_some() && before == after).then_some(before).flatten()
            })
        };
        let pool = overrides.get(&k).copied().or_else(by_neighbours);
        for &i in &inst.entries {
            pools[i] = Some(pool.unwrap_or(DEFAULT));
        }
    }
    PoolRouting { pools: pools.into_iter().map(|p| p.filter(|&p| p != DEFAULT)).collect(), segment: label, spans, events_rule_out_pools: pools_skip_events }
}

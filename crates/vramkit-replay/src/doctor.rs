//! `doctor`: where a snapshot's memory goes, in words and numbers a
//! PyTorch user knows.
//!
//! [`Diagnosis::from_segments`] reads only the state (so state-only
//! snapshots work): reserved bytes split into what tensors asked for, the
//! rounding on top, pending frees, free space inside partly used segments
//! and wholly free segments (the five add up to reserved exactly); oversize
//! blocks; the largest free block; and the allocation sites, taken from the
//! blocks' stacks, that hold the most memory and that strand the most free
//! space. [`diagnose`] adds what only a trace can tell: the explanation of
//! its first `oom` entry, replayed on vramkit's allocator, and the tune
//! recommendation. `Display` writes the text; the struct is the JSON.

use crate::drive::Driver;
use crate::pools::Overrides;
use crate::prepared::PreparedTrace;
use crate::trace::DeviceTrace;
use crate::tune::{describe_conf, TuneResult};
use crate::ReplayError;
use std::collections::HashMap;
use std::fmt;
use vramkit_core::{
    format_size, AllocatorConfig, BlockState, Error, Frame, OutOfMemoryError, PoolKind, SegmentInfo, StreamId, TraceAction,
};
use vramkit_sim::SimDevice;

/// Sites listed in each table.
const TOP_SITES: usize = 8;
/// A share of reserved memory worth a sentence.
const NOTABLE: f64 = 0.05;

/// Reserved bytes, split by where they go. `reserved_bytes` is exactly
/// `requested_bytes + rounding_bytes + pending_free_bytes +
/// free_in_partly_used_segments_bytes + free_segments_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Breakdown {
    /// Bytes held from the device (`memory_reserved()`).
    pub reserved_bytes: u64,
    /// Bytes of allocated blocks (`memory_allocated()`).
    pub allocated_bytes: u64,
    /// What the program asked for, of allocated blocks.
    pub requested_bytes: u64,
    /// `allocated_bytes - requested_bytes`: rounding up, and remainders
    /// too small to split off.
    pub rounding_bytes: u64,
    /// Blocks freed by the program that wait for other streams' work.
    pub pending_free_bytes: u64,
    /// Free blocks in segments that also hold active blocks.
    pub free_in_partly_used_segments_bytes: u64,
    /// Segments with no active block at all (`empty_cache()` releases them).
    pub free_segments_bytes: u64,
    /// Reserved bytes of the small pool (2 MiB segments, requests <= 1 MiB).
    pub small_pool_reserved_bytes: u64,
    /// Reserved bytes of private pools (CUDA graphs, `MemPool`).
    pub private_pool_reserved_bytes: u64,
}

/// Segment counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SegmentCounts {
    /// All segments.
    pub total_count: u64,
    /// With active and free blocks.
    pub partly_used_count: u64,
    /// With no active block.
    pub free_count: u64,
    /// Free blocks, all segments.
    pub free_block_count: u64,
    /// The largest free block.
    pub largest_free_block_bytes: u64,
    /// The largest free block inside a partly used segment.
    pub largest_free_in_partly_used_bytes: u64,
    /// Expandable segments (mapped runs).
    pub expandable_count: u64,
}

/// Blocks at or above `max_split_size`: never split, and reused only by
/// requests of at least `max_split_size`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Oversize {
    /// `max_split_size_mb`, in bytes.
    pub max_split_size_bytes: u64,
    /// Oversize blocks.
    pub block_count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, free.
    pub free_block_count: u64,
    /// Free oversize bytes.
    pub free_bytes: u64,
}

/// One allocation site: the innermost frame of the program's own code.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Site {
    /// `function (dir/file.py:line)`.
    pub site: String,
    /// Active blocks allocated there.
    pub block_count: u64,
    /// Their bytes (rounded sizes).
    pub bytes: u64,
    /// What was asked for.
    pub requested_bytes: u64,
    /// Free bytes of partly used segments charged to this site, in
    /// proportion to its share of each segment's active bytes: space that
    /// cannot be returned while its blocks live, left by splitting.
    pub stranded_free_bytes: u64,
    /// Partly used segments it has blocks in.
    pub partly_used_segment_count: u64,
}

/// The first `oom` entry of a trace, explained.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OomExplanation {
    /// Index of the entry.
    pub event_index: u64,
    /// `oom` entries in the trace.
    pub oom_count: u64,
    /// The size that failed (as the trace records it: rounded).
    pub requested_bytes: u64,
    /// Stream of the request.
    pub stream: u64,
    /// What the device had free (recorded by PyTorch).
    pub device_free_bytes: u64,
    /// Reserved bytes just before it, as recorded (after the retry ladder released what it could).
    pub reserved_bytes: u64,
    /// Where it was asked for, if the trace has stacks.
    pub site: Option<String>,
    /// vramkit's allocator, replayed to that point on a device with the
    /// same free memory, failing the same request: its full error and diagnosis.
    pub reproduced: Option<OutOfMemoryError>,
}

/// The outcome of `tune`, in brief.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Recommendation {
    /// Settings replayed.
    pub candidate_count: u64,
    /// The capacity they ran against.
    pub capacity_bytes: Option<u64>,
    /// The recorded settings.
    pub recorded_conf: String,
    /// Their peak reserved.
    pub recorded_peak_reserved_bytes: u64,
    /// The best string.
    pub recommended: String,
    /// Its peak reserved.
    pub recommended_peak_reserved_bytes: u64,
    /// Recorded minus recommended peak.
    pub saving_bytes: i64,
    /// As a percentage of the recorded peak.
    pub saving_percent: f64,
    /// No setting reserves less.
    pub lower_bound_bytes: u64,
    /// Even the best runs out of memory at the capacity.
    pub oom: bool,
    /// The recorded settings run out of memory at the capacity.
    pub recorded_oom: bool,
}

impl Recommendation {
    /// The brief of a tune result.
    pub fn from_tune(t: &TuneResult) -> Recommendation {
        Recommendation {
            candidate_count: t.candidates.len() as u64,
            capacity_bytes: t.capacity_bytes,
            recorded_conf: t.recorded.conf.clone(),
            recorded_peak_reserved_bytes: t.recorded.peak_reserved_bytes,
            recommended: t.recommended.clone(),
            recommended_peak_reserved_bytes: t.best.peak_reserved_bytes,
            saving_bytes: t.saving_bytes,
            saving_percent: t.saving_percent,
            lower_bound_bytes: t.lower_bound_bytes,
            oom: t.best.oom,
            recorded_oom: t.recorded.oom,
        }
    }
}

/// Everything doctor found about one device.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Diagnosis {
    /// Device index.
    pub device: i64,
    /// The recorded settings (empty: PyTorch's defaults).
    pub recorded_conf: String,
    /// Where reserved memory goes, at snapshot time.
    pub memory: Breakdown,
    /// Segments and free blocks.
    pub segments: SegmentCounts,
    /// With `max_split_size_mb` set.
    pub oversize: Option<Oversize>,
    /// Any block carries a stack.
    pub has_stacks: bool,
    /// Sites holding the most bytes.
    pub top_sites_by_bytes: Vec<Site>,
    /// Sites stranding the most free space.
    pub top_sites_by_stranded_free: Vec<Site>,
    /// Allocation events in the trace (0: a state-only snapshot).
    pub allocation_events: u64,
    /// The first `oom` entry, explained.
    pub oom: Option<OomExplanation>,
    /// What `tune` recommends (snapshots with events).
    pub recommendation: Option<Recommendation>,
}

/// A name for the place a block was allocated, from its stack (innermost
/// frame first): the innermost frame of the program's own Python code (a
/// `.py` file outside installed packages), else any Python frame; for
/// stacks with no Python frame (the autograd engine's thread), the
/// backward node (`BmmBackward0 (autograd)`) or the ATen operator
/// (`aten::bmm`), else the first frame past the allocator.
pub fn site_of(frames: &[Frame]) -> Option<String> {
    let python = |f: &&Frame| f.filename.ends_with(".py");
    let library = |f: &&Frame| {
        let p = f.filename.replace('\\', "/");
        p.contains("/site-packages/") || p.contains("/dist-packages/") || p.contains("/lib/python")
    };
    if let Some(frame) = frames.iter().find(|f| python(f) && !library(f)).or_else(|| frames.iter().find(python)) {
        let path = frame.filename.replace('\\', "/");
        let short: Vec<&str> = path.rsplit('/').take(2).collect();
        let file = short.into_iter().rev().collect::<Vec<_>>().join("/");
        // A negative line is PyTorch's "no line number" (CPython's -1).
        return Some(if frame.line < 0 { format!("{} ({file})", frame.name) } else { format!("{} ({file}:{})", frame.name, frame.line) });
    }
    let between = |name: &str, prefix: &str| -> Option<String> {
        let rest = &name[name.find(prefix)? + prefix.len()..];
        Some(rest[..rest.find("::").unwrap_or(rest.len())].to_string())
    };
    if let Some(node) = frames.iter().find_map(|f| between(&f.name, "torch::autograd::generated::")) {
        return Some(format!("{node} (autograd)"));
    }
    if let Some(op) = frames.iter().find_map(|f| between(&f.name, "at::_ops::")) {
        return Some(format!("aten::{op}"));
    }
    let past_allocator = frames.iter().rposition(|f| f.name.contains("CachingAllocator")).map_or(0, |i| i + 1);
    frames[past_allocator.min(frames.len())..].iter().map(|f| short_native_name(&f.name)).find(|n| !n.is_empty() && n != "??")
}

/// `void at::cuda::blas::bgemm<float>(char, ...)` -> `at::cuda::blas::bgemm`.
fn short_native_name(name: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => break,
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().last().unwrap_or_default().to_string()
}

/// The site of a block or entry with these frames; stacks that are
/// missing or empty (blocks allocated before recording began) share one name.
pub fn site_name(frames: Option<&[Frame]>) -> String {
    match frames {
        None | Some([]) => "(no stack recorded)".to_string(),
        Some(f) => site_of(f).unwrap_or_else(|| "(no Python frame)".to_string()),
    }
}

/// Sites of the active blocks in `segments`: (by bytes, by stranded free bytes).
pub fn sites(segments: &[SegmentInfo], top: usize) -> (Vec<Site>, Vec<Site>) {
    let mut by: HashMap<String, Site> = HashMap::new();
    for s in segments {
        let active: u64 = s.blocks.iter().filter(|b| b.state.is_active()).map(|b| b.size).sum();
        let free: u64 = s.blocks.iter().filter(|b| !b.state.is_active()).map(|b| b.size).sum();
        let partly = active > 0 && free > 0;
        let mut seen_here: Vec<String> = Vec::new();
        for b in s.blocks.iter().filter(|b| b.state.is_active()) {
            let name = site_name(b.frames.as_deref());
            let site = by.entry(name.clone()).or_insert_with(|| Site { site: name.clone(), ..Site::default() });
            site.block_count += 1;
            site.bytes += b.size;
            site.requested_bytes += b.requested_size;
            if partly {
                site.stranded_free_bytes += (free as u128 * b.size as u128 / active as u128) as u64;
                if !seen_here.contains(&name) {
                    site.partly_used_segment_count += 1;
                    seen_here.push(name);
                }
            }
        }
    }
    let mut all: Vec<Site> = by.into_values().collect();
    all.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    let by_bytes = all.iter().take(top).cloned().collect();
    all.sort_by(|a, b| b.stranded_free_bytes.cmp(&a.stranded_free_bytes).then_with(|| a.site.cmp(&b.site)));
    let by_stranded = all.into_iter().filter(|s| s.stranded_free_bytes > 0).take(top).collect();
    (by_bytes, by_stranded)
}

impl Diagnosis {
    /// The state part: reads `segments` only.
    pub fn from_segments(device: i64, segments: &[SegmentInfo], recorded: &AllocatorConfig) -> Diagnosis {
        let mut m = Breakdown::default();
        let mut c = SegmentCounts::default();
        let mut oversize = recorded.max_split_size_bytes.map(|b| Oversize { max_split_size_bytes: b, ..Oversize::default() });
        let mut has_stacks = false;
        for s in segments {
            m.reserved_bytes += s.total_size;
            c.total_count += 1;
            if s.segment_type == PoolKind::Small {
                m.small_pool_reserved_bytes += s.total_size;
            }
            if s.segment_pool_id != (0, 0) {
                m.private_pool_reserved_bytes += s.total_size;
            }
            if s.is_expandable {
                c.expandable_count += 1;
            }
            let active = s.blocks.iter().any(|b| b.state.is_active());
            let free = s.blocks.iter().any(|b| !b.state.is_active());
            match (active, free) {
                (true, true) => c.partly_used_count += 1,
                (false, _) => c.free_count += 1,
                _ => {}
            }
            for b in &s.blocks {
                has_stacks |= b.frames.as_ref().is_some_and(|f| !f.is_empty());
                match b.state {
                    BlockState::ActiveAllocated => {
                        m.allocated_bytes += b.size;
                        m.requested_bytes += b.requested_size.min(b.size);
                    }
                    BlockState::ActivePendingFree => m.pending_free_bytes += b.size,
                    BlockState::Inactive => {
                        c.free_block_count += 1;
                        c.largest_free_block_bytes = c.largest_free_block_bytes.max(b.size);
                        if active {
                            m.free_in_partly_used_segments_bytes += b.size;
                            c.largest_free_in_partly_used_bytes = c.largest_free_in_partly_used_bytes.max(b.size);
                        } else {
                            m.free_segments_bytes += b.size;
                        }
                    }
                }
                if let Some(o) = oversize.as_mut().filter(|o| b.size >= o.max_split_size_bytes) {
                    o.block_count += 1;
                    o.bytes += b.size;
                    if !b.state.is_active() {
                        o.free_block_count += 1;
                        o.free_bytes += b.size;
                    }
                }
            }
        }
        m.rounding_bytes = m.allocated_bytes - m.requested_bytes;
        let (top_sites_by_bytes, top_sites_by_stranded_free) = sites(segments, TOP_SITES);
        Diagnosis {
            device,
            recorded_conf: recorded.to_conf_string(),
            memory: m,
            segments: c,
            oversize,
            has_stacks,
            top_sites_by_bytes,
            top_sites_by_stranded_free,
            allocation_events: 0,
            oom: None,
            recommendation: None,
        }
    }
}

impl Diagnosis {
    /// The state part of a trace's diagnosis, with its allocation count.
    fn of_trace(trace: &DeviceTrace, recorded: &AllocatorConfig) -> Diagnosis {
        let mut d = Diagnosis::from_segments(trace.device, &trace.end_segments, recorded);
        d.allocation_events = trace.events.actions().iter().filter(|&&a| a == TraceAction::Alloc).count() as u64;
        d
    }
}

/// The full diagnosis of one device: its end state, its first `oom`
/// explained, and `tune` (when given) as the recommendation.
pub fn diagnose(prepared: &PreparedTrace<'_>, tune: Option<&TuneResult>) -> Result<Diagnosis, ReplayError> {
    let mut d = Diagnosis::of_trace(prepared.trace(), prepared.recorded());
    d.oom = prepared.explain_oom()?;
    d.recommendation = tune.map(Recommendation::from_tune);
    Ok(d)
}

/// [`diagnose`] for a trace not prepared (one without allocations to tune,
/// a state-only snapshot): prepared only if it has an `oom` entry to explain.
pub fn diagnose_trace(trace: &DeviceTrace, recorded: &AllocatorConfig, tune: Option<&TuneResult>) -> Result<Diagnosis, ReplayError> {
    if trace.events.actions().contains(&TraceAction::Oom) {
        return diagnose(&PreparedTrace::new(trace, recorded.clone(), None)?, tune);
    }
    let mut d = Diagnosis::of_trace(trace, recorded);
    d.recommendation = tune.map(Recommendation::from_tune);
    Ok(d)
}

/// Replays the trace under the recorded settings up to its first `oom`
/// entry, gives the device exactly the free memory PyTorch reported, and
/// asks for the failed size again.
pub(crate) fn explain_oom(prepared: &PreparedTrace<'_>) -> Result<Option<OomExplanation>, ReplayError> {
    let (trace, recorded) = (prepared.trace(), prepared.recorded());
    let Some(at) = trace.events.actions().iter().position(|&a| a == TraceAction::Oom) else { return Ok(None) };
    let e = trace.events.get(at);
    let mut reserved: u64 = prepared.start().segments.iter().map(|s| s.total_size).sum();
    for x in trace.events.iter_range(0..at) {
        match x.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved += x.size,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved = reserved.saturating_sub(x.size),
            _ => {}
        }
    }
    let device = SimDevice::new(u64::MAX).with_event_mode(vramkit_sim::EventMode::Manual);
    let mut model = prepared.start_model(recorded, device)?;
    let mut driver = Driver::judging(prepared, Overrides::new());
    driver.begin(&mut model);
    for i in 0..at {
        driver.step(&mut model, i);
    }
    // What the process could still get: its reserved bytes after the
    // retry ladder's releases, plus what the device had free.
    model.device_mut().set_capacity(reserved + e.addr);
    let reproduced = match model.malloc(e.size, StreamId(e.stream)) {
        Err(Error::OutOfMemory(oom)) => Some(*oom),
        _ => None,
    };
    Ok(Some(OomExplanation {
        event_index: at as u64,
        oom_count: trace.events.actions().iter().filter(|&&a| a == TraceAction::Oom).count() as u64,
        requested_bytes: e.size,
        stream: e.stream,
        device_free_bytes: e.addr,
        reserved_bytes: reserved,
        site: trace.events.frames(at).and_then(|f| site_of(f)),
        reproduced,
    }))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.memory;
        let c = &self.segments;
        let r = m.reserved_bytes;
        let share = |x: u64| x as f64 >= NOTABLE * r as f64 && x > 0;
        writeln!(
            f,
            "Device {}: PyTorch holds {} of GPU memory (reserved); tensors use {} of it ({:.1}%).",
            self.device,
            format_size(r),
            format_size(m.allocated_bytes),
            percent(m.allocated_bytes, r)
        )?;
        if self.allocation_events > 0 {
            writeln!(f, "This is the state when the snapshot was taken, after {} recorded allocations.", self.allocation_events)?;
        } else {
            writeln!(f, "The snapshot holds the state only (no allocation events).")?;
        }
        writeln!(f)?;
        writeln!(f, "Where the reserved memory goes:")?;
        let row = |f: &mut fmt::Formatter<'_>, bytes: u64, what: String| {
            writeln!(f, "  {:>12}  {:>5.1}%  {what}", format_size(bytes), percent(bytes, r))
        };
        row(f, m.requested_bytes, "asked for by your tensors".into())?;
        row(f, m.rounding_bytes, "rounding: blocks are bigger than the requests they serve".into())?;
        row(f, m.pending_free_bytes, "freed by your code, waiting for other streams' work (pending frees)".into())?;
        row(
            f,
            m.free_in_partly_used_segments_bytes,
            format!("free space inside {}", plural(c.partly_used_count, "partly used segment", "partly used segments")),
        )?;
        row(f, m.free_segments_bytes, format!("segments with nothing in them ({} of {} segments)", c.free_count, c.total_count))?;
        writeln!(f, "  {:>12}  100.0%  reserved", format_size(r))?;
        if c.free_block_count > 0 {
            writeln!(
                f,
                "The largest free block is {}; {} free blocks hold {} in all.",
                format_size(c.largest_free_block_bytes),
                c.free_block_count,
                format_size(m.free_in_partly_used_segments_bytes + m.free_segments_bytes)
            )?;
        }
        writeln!(f)?;

        writeln!(f, "What this means:")?;
        let mut said = false;
        if share(m.free_in_partly_used_segments_bytes) {
            said = true;
            writeln!(
                f,
                "  - {} ({:.1}%) is free but scattered inside segments that also hold live tensors, in pieces of at most {}. A larger request cannot use it, so PyTorch reserves a new segment: this is fragmentation. expandable_segments:True lets a segment grow in place instead, which usually removes most of it; max_split_size_mb keeps large cached blocks from being split for small requests.",
                format_size(m.free_in_partly_used_segments_bytes),
                percent(m.free_in_partly_used_segments_bytes, r),
                format_size(c.largest_free_in_partly_used_bytes)
            )?;
        }
        if share(m.free_segments_bytes) {
            said = true;
            writeln!(
                f,
                "  - {} ({:.1}%) sits in {} that hold nothing. PyTorch keeps them to reuse, so they count as reserved; torch.cuda.empty_cache() returns them to the driver. That helps other processes on the GPU, not this one, which will ask for them again.",
                format_size(m.free_segments_bytes),
                percent(m.free_segments_bytes, r),
                plural(c.free_count, "cached segment", "cached segments")
            )?;
        }
        if share(m.rounding_bytes) {
            said = true;
            writeln!(
                f,
                "  - Rounding costs {} ({:.1}%): every request is rounded up to a multiple of 512 bytes{}, and a large block is handed out whole when splitting it would leave 1 MiB or less.",
                format_size(m.rounding_bytes),
                percent(m.rounding_bytes, r),
                if self.recorded_conf.contains("roundup_power2_divisions") { " and to roundup_power2_divisions' steps" } else { "" }
            )?;
        }
        if m.pending_free_bytes > 0 {
            said = true;
            writeln!(
                f,
                "  - {} was freed by your code but is still used by work queued on another stream (Tensor.record_stream, or a tensor used on a side stream); PyTorch reuses it only when that work is done.",
                format_size(m.pending_free_bytes)
            )?;
        }
        if let Some(o) = self.oversize.filter(|o| o.block_count > 0) {
            said = true;
            writeln!(
                f,
                "  - max_split_size_mb is {}: {} ({}) at or above it. They are never split and only requests of at least that size reuse them; {} of them ({}) free.",
                o.max_split_size_bytes >> 20,
                plural(o.block_count, "block is", "blocks are"),
                format_size(o.bytes),
                o.free_block_count,
                format_size(o.free_bytes)
            )?;
        }
        if m.private_pool_reserved_bytes > 0 {
            said = true;
            writeln!(
                f,
                "  - {} belongs to private pools (CUDA graphs or torch.cuda.MemPool); it serves only its own graph or pool.",
                format_size(m.private_pool_reserved_bytes)
            )?;
        }
        if !said {
            writeln!(f, "  - Little is wasted: nothing but tensors takes 5% or more of reserved memory.")?;
        }
        writeln!(f)?;

        if !self.has_stacks {
            writeln!(
                f,
                "The snapshot has no stacks, so allocation sites cannot be named; record with torch.cuda.memory._record_memory_history(enabled=\"all\", context=\"all\", stacks=\"python\")."
            )?;
        } else {
            writeln!(f, "Allocation sites holding the most memory:")?;
            for s in &self.top_sites_by_bytes {
                writeln!(f, "  {:>12}  {:>11}  {}", format_size(s.bytes), plural(s.block_count, "block", "blocks"), s.site)?;
            }
            if !self.top_sites_by_stranded_free.is_empty() {
                writeln!(
                    f,
                    "Allocation sites whose blocks strand the most free space (they share segments with free blocks, which cannot be released while they live):"
                )?;
                for s in &self.top_sites_by_stranded_free {
                    writeln!(
                        f,
                        "  {:>12}  in {:<12}  {}",
                        format_size(s.stranded_free_bytes),
                        plural(s.partly_used_segment_count, "segment", "segments"),
                        s.site
                    )?;
                }
            }
        }

        if let Some(o) = &self.oom {
            writeln!(f)?;
            write!(f, "{o}")?;
        }

        writeln!(f)?;
        match &self.recommendation {
            Some(t) => write!(f, "{t}")?,
            None if self.allocation_events == 0 => writeln!(
                f,
                "No settings can be compared without allocation events: record with torch.cuda.memory._record_memory_history(enabled=\"all\") and run `vramkit tune` on that snapshot."
            )?,
            None => {}
        }
        Ok(())
    }
}

impl fmt::Display for OomExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Out of memory at trace entry {}{}: the program asked for {}{} while the GPU had {} free. PyTorch held {} at that moment, after releasing every cached segment it could.",
            self.event_index,
            if self.oom_count > 1 { format!(" (the first of {})", self.oom_count) } else { String::new() },
            format_size(self.requested_bytes),
            self.site.as_ref().map_or(String::new(), |s| format!(" in {s}")),
            format_size(self.device_free_bytes),
            format_size(self.reserved_bytes)
        )?;
        match &self.reproduced {
            Some(e) => {
                let free_cached = e.reserved_bytes.saturating_sub(e.allocated_bytes);
                writeln!(
                    f,
                    "Of the {} reserved, tensors used {} and {} was free in the cache.",
                    format_size(e.reserved_bytes),
                    format_size(e.allocated_bytes),
                    format_size(free_cached)
                )?;
                if let Some(d) = &e.diagnosis {
                    if d.fragmentation {
                        writeln!(
                            f,
                            "That was enough in total, but no single free block was large enough (the largest was {}): the failure is fragmentation, not a lack of memory.",
                            format_size(d.largest_free_block_bytes)
                        )?;
                    } else {
                        writeln!(
                            f,
                            "The memory was held by live tensors: even a perfectly packed cache would not have fit it. Free tensors earlier, use smaller batches, or move state off the GPU."
                        )?;
                    }
                }
                if let Some(d) = e.diagnosis.as_ref().filter(|d| !d.settings_that_fit.is_empty()) {
                    writeln!(
                        f,
                        "On a copy of the allocator's state at that moment, the request succeeds with PYTORCH_CUDA_ALLOC_CONF={}.",
                        d.settings_that_fit.join(" or ")
                    )?;
                }
                if let Some(d) = e.diagnosis.as_ref().filter(|d| d.pending_free_bytes > 0) {
                    writeln!(
                        f,
                        "{} had been freed but still waited for other streams' work (record_stream).",
                        format_size(d.pending_free_bytes)
                    )?;
                }
            }
            None => writeln!(
                f,
                "vramkit's allocator, given the same free memory at that point, could serve the request; the GPU's memory was likely taken by another process or by memory outside PyTorch's allocator."
            )?,
        }
        Ok(())
    }
}

impl fmt::Display for Recommendation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let capacity = self.capacity_bytes.map_or("no capacity limit".to_string(), |c| format!("a capacity of {}", format_size(c)));
        writeln!(f, "Replaying the trace under {} settings with {capacity}:", self.candidate_count)?;
        writeln!(
            f,
            "  the recorded settings, {}, peak at {} reserved{}.",
            describe_conf(&self.recorded_conf),
            format_size(self.recorded_peak_reserved_bytes),
            if self.recorded_oom { " and run out of memory" } else { "" }
        )?;
        if self.recommended == self.recorded_conf {
            writeln!(f, "  They are already the best of those tried; keep them.")?;
        } else if self.recorded_oom && !self.oom {
            writeln!(
                f,
                "  Set PYTORCH_CUDA_ALLOC_CONF=\"{}\": no allocation fails under it, and it peaks at {}.",
                self.recommended,
                format_size(self.recommended_peak_reserved_bytes)
            )?;
        } else {
            writeln!(
                f,
                "  Set PYTORCH_CUDA_ALLOC_CONF=\"{}\": it peaks at {}, {} ({:.1}%) {}{}.",
                self.recommended,
                format_size(self.recommended_peak_reserved_bytes),
                format_size(self.saving_bytes.unsigned_abs()),
                self.saving_percent.abs(),
                if self.saving_bytes >= 0 { "less" } else { "more" },
                if self.oom { ", but still runs out of memory" } else { "" }
            )?;
        }
        writeln!(
            f,
            "  No setting can reserve less than {} (the peak of live bytes, rounded as the allocator must).",
            format_size(self.lower_bound_bytes)
        )
    }
}

/// Explaining an out-of-memory error is a question asked of a prepared trace.
impl PreparedTrace<'_> {
    /// The first `oom` entry explained (see `doctor`); `None` without one.
    pub fn explain_oom(&self) -> Result<Option<OomExplanation>, ReplayError> {
        explain_oom(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use vramkit_core::{CachingAllocator, ContextLevel, HistoryConfig};

    fn frame(filename: &str, line: i64, name: &str) -> Frame {
        Frame { filename: filename.into(), line, name: name.into() }
    }

    #[test]
    fn site_is_the_innermost_frame_of_the_programs_own_code() {
        let frames = [
            frame("??", 0, "torch::unwind::unwind()"),
            frame("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
            frame("/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", 1562, "_call_impl"),
            frame("/opt/project/model/attention.py", 42, "forward"),
            frame("/opt/project/train.py", 7, "<module>"),
        ];
        assert_eq!(site_of(&frames).unwrap(), "forward (model/attention.py:42)");
        assert_eq!(site_of(&frames[..3]).unwrap(), "_call_impl (modules/module.py:1562)");
        assert_eq!(site_of(&frames[..2]), None);
        let backward = [
            frame("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
            frame("", 0, "void at::cuda::blas::bgemm_internal_cublas<float>(char, char, long)"),
            frame("??", 0, "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"),
            frame("??", 0, "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
        ];
        assert_eq!(site_of(&backward).unwrap(), "BmmBackward0 (autograd)");
        assert_eq!(site_of(&backward[..3]).unwrap(), "aten::bmm");
        assert_eq!(site_of(&backward[..2]).unwrap(), "at::cuda::blas::bgemm_internal_cublas");
        assert_eq!(site_of(&[frame("C:\\work\\x\\run.py", 3, "main")]).unwrap(), "main (x/run.py:3)");
        assert_eq!(site_of(&[frame("/w/run.py", -1, "main")]).unwrap(), "main (w/run.py)", "-1: no line");
    }

    #[test]
    fn the_breakdown_adds_up_to_reserved() {
        let config = AllocatorConfig::parse("max_split_size_mb:64").unwrap();
        let mut a = CachingAllocator::new(SimDevice::unlimited(), config.clone());
        a.record_history(Some(HistoryConfig { record_trace: false, max_entries: 1, context: ContextLevel::State }));
        let site: vramkit_core::Frames = Arc::from(vec![frame("/p/train.py", 9, "step")]);
        let mut live = Vec::new();
        for i in 0..40u64 {
            live.push(a.malloc_with_context(1000 + i * 300_000, StreamId(0), Some(site.clone())).unwrap());
        }
        let big = a.malloc_with_context(100 << 20, StreamId(0), None).unwrap();
        for p in live.iter().step_by(3) {
            a.free(*p).unwrap();
        }
        a.free(big).unwrap();
        let segments = a.segments();
        let d = Diagnosis::from_segments(0, &segments, &config);
        let m = d.memory;
        assert_eq!(
            m.reserved_bytes,
            m.requested_bytes + m.rounding_bytes + m.pending_free_bytes + m.free_in_partly_used_segments_bytes + m.free_segments_bytes
        );
        assert_eq!(m.reserved_bytes, a.stats().reserved_bytes.all.current as u64);
        assert_eq!(m.allocated_bytes, a.stats().allocated_bytes.all.current as u64);
        assert!(m.free_segments_bytes >= 100 << 20);
        let o = d.oversize.unwrap();
        assert_eq!((o.block_count, o.free_block_count, o.free_bytes), (1, 1, 100 << 20));
        assert_eq!(d.top_sites_by_bytes[0].site, "step (p/train.py:9)");
        assert_eq!(d.top_sites_by_bytes[0].block_count, 26);
        assert!(d.top_sites_by_stranded_free[0].stranded_free_bytes <= m.free_in_partly_used_segments_bytes);
        let text = d.to_string();
        assert!(text.contains("Device 0: PyTorch holds"), "{text}");
        assert!(text.contains("cached segments that hold nothing"), "{text}");
        assert!(text.contains("1 block is"), "{text}");
        assert!(text.contains("max_split_size_mb is 64"), "{text}");
    }

    #[test]
    fn an_oom_entry_is_explained_and_reproduced() {
        // A 1 GiB device filled with 100 MiB tensors, every other one freed,
        // then a request for 1 GiB: the retry ladder releases the free
        // segments, and half the device is still held by live tensors.
        let config = AllocatorConfig::pytorch_default();
        let mut a = CachingAllocator::new(SimDevice::new(1 << 30), config.clone());
        a.record_history(Some(HistoryConfig::default()));
        let site: vramkit_core::Frames = Arc::from(vec![frame("/p/train.py", 11, "grow")]);
        let mut live = Vec::new();
        for _ in 0..10 {
            live.push(a.malloc(100 << 20, StreamId(0)).unwrap());
        }
        for p in live.iter().step_by(2) {
            a.free(*p).unwrap();
        }
        let err = a.malloc_with_context(1 << 30, StreamId(0), Some(site)).unwrap_err();
        assert!(err.as_oom().is_some());
        let snap = a.snapshot();
        let trace = &DeviceTrace::split(&snap)[0];
        let d = diagnose(&PreparedTrace::new(trace, config.clone(), None).unwrap(), None).unwrap();
        let o = d.oom.as_ref().unwrap();
        assert_eq!(o.oom_count, 1);
        assert_eq!(o.requested_bytes, 1 << 30);
        assert_eq!(o.site.as_deref(), Some("grow (p/train.py:11)"));
        let e = o.reproduced.as_ref().expect("the model fails the same request");
        assert_eq!(e.device_free_bytes, o.device_free_bytes);
        let text = d.to_string();
        assert!(text.contains("Out of memory at trace entry"), "{text}");
        assert!(text.contains("held by live tensors"), "{text}");
    }
}

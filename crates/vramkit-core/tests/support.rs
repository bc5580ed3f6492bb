//! Helpers shared by the scenario and property tests.

use std::fmt::Write;
use vramkit_core::{AllocatorConfig, CachingAllocator, Device, PytorchRelease, StreamId, TraceEntry};
use vramkit_sim::SimDevice;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const S0: StreamId = StreamId(0);

/// An allocator on an unlimited simulated device.
pub fn allocator(conf: &str) -> CachingAllocator<SimDevice> {
    allocator_on(SimDevice::unlimited(), conf)
}

/// An allocator on `device` with settings parsed from `conf`.
pub fn allocator_on(device: SimDevice, conf: &str) -> CachingAllocator<SimDevice> {
    let config = AllocatorConfig::parse(conf).expect("test settings parse");
    CachingAllocator::new(device, config)
}

/// An allocator on `device` following the rules of PyTorch `release`
/// (`"2.13"`), with settings parsed as that release parses them.
pub fn allocator_as(release: &str, device: SimDevice, conf: &str) -> CachingAllocator<SimDevice> {
    let compat = PytorchRelease::parse(release).expect("a release").compat();
    let config = AllocatorConfig::parse_with_compat(conf, compat).expect("test settings parse");
    CachingAllocator::new(device, config)
}

/// The whole state, one line per segment, addresses relative to the device base:
/// `@0x0 small 2097152 stream 0: [1024 A(1000) | 2096128 I]`.
/// Block states: A allocated (requested bytes), P pending free, I inactive.
pub fn state(alloc: &CachingAllocator<impl Device>) -> String {
    let mut out = String::new();
    for s in alloc.segments() {
        let blocks: Vec<String> = s
            .blocks
            .iter()
            .map(|b| match b.state {
                vramkit_core::BlockState::ActiveAllocated => format!("{} A({})", b.size, b.requested_size),
                vramkit_core::BlockState::ActivePendingFree => format!("{} P", b.size),
                vramkit_core::BlockState::Inactive => format!("{} I", b.size),
            })
            .collect();
        writeln!(
            out,
            "@{:#x} {} {} stream {}: [{}]",
            s.address - SimDevice::DEFAULT_BASE,
            s.segment_type.as_str(),
            s.total_size,
            s.stream,
            blocks.join(" | ")
        )
        .unwrap();
    }
    out
}

/// Every `.current` statistic that is not zero, and every non-zero counter,
/// as `key=value` lines: the whole current state of `memory_stats()`.
pub fn stats(alloc: &CachingAllocator<impl Device>) -> String {
    let mut out = String::new();
    for (k, v) in alloc.memory_stats() {
        let counter = !k.contains('.');
        if v != 0 && (k.ends_with(".current") || counter) {
            writeln!(out, "{k}={v}").unwrap();
        }
    }
    out
}

/// The recorded trace as `action addr-relative size` lines.
pub fn trace(alloc: &mut CachingAllocator<SimDevice>) -> String {
    let snap = alloc.snapshot();
    let entries: &[TraceEntry] = snap.device_traces.last().map(Vec::as_slice).unwrap_or(&[]);
    let mut out = String::new();
    for e in entries {
        let addr = if e.action == vramkit_core::TraceAction::Oom || e.action == vramkit_core::TraceAction::Snapshot {
            e.addr
        } else {
            e.addr - SimDevice::DEFAULT_BASE
        };
        writeln!(out, "{} {:#x} {}", e.action.as_str(), addr, e.size).unwrap();
    }
    out
}

/// Builds the expected text from indented lines.
pub fn lines(text: &str) -> String {
    let mut out = String::new();
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        out.push_str(l);
        out.push('\n');
    }
    out
}

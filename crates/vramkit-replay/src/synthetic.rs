//! Synthetic traces of any length, recorded from vramkit's own allocator,
//! for benchmarks and tests that need more events than the shipped traces
//! hold (a report on millions of events).
//!
//! The workload imitates training: weights allocated once, then steps of a
//! forward pass whose activations live until the backward pass frees them
//! in reverse, short-lived temporaries, and an optimizer step. Sizes vary
//! from step to step (sequence lengths), which is what fragments a cache.
//! Every allocation carries one of a dozen Python-like stacks, so sites and
//! splitting can be attributed. The trace is the last `events` entries of
//! the run, as PyTorch's ring buffer would keep them.

use std::sync::Arc;
use vramkit_core::{
    AllocatorConfig, CachingAllocator, ContextLevel, DeviceAddr, Frame, Frames, HistoryConfig, SegmentInfo, Snapshot, StreamId, TraceAction,
    TraceEntry,
};
use vramkit_sim::{EventMode, SimDevice};
use vramkit_sim::XorShift;

const MIB: u64 = 1 << 20;

/// What to record.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Trace entries to keep (the run goes on until it has made this many).
    pub events: usize,
    /// Seed of the size generator.
    pub seed: u64,
    /// Settings the allocator runs with (and the snapshot is recorded with).
    pub config: AllocatorConfig,
    /// Layers of the imitated model.
    pub layers: usize,
}

impl Workload {
    /// A workload of `events` trace entries with PyTorch's default settings.
    pub fn new(events: usize) -> Workload {
        Workload { events, seed: 1, config: AllocatorConfig::pytorch_default(), layers: 24 }
    }
}


fn stack(frames: &[(&str, i64, &str)]) -> Frames {
    let mut v: Vec<Frame> =
        frames.iter().map(|&(filename, line, name)| Frame { filename: filename.into(), line, name: name.into() }).collect();
    v.push(Frame { filename: "train.py".into(), line: 120, name: "<module>".into() });
    Arc::from(v)
}

/// Records the workload and returns its snapshot (device 0, one stream).
pub fn record(workload: &Workload) -> Snapshot {
    let mut entries = Vec::with_capacity(workload.events);
    let segments = stream(workload, |e| entries.push(e.clone()));
    Snapshot { segments, device_traces: vec![entries] }
}

/// Records the workload, handing each entry of its trace to `out` as it is
/// made, so a trace of any length is never held whole; returns the segments
/// after the last entry. The entries are those [`record`] keeps: the last
/// `events` the program makes, as PyTorch's ring buffer keeps them, so the
/// program runs twice, the first time to count them.
pub fn stream(workload: &Workload, mut out: impl FnMut(&TraceEntry)) -> Vec<SegmentInfo> {
    let mut made = 0usize;
    recorded_run(workload, |_| made += 1);
    let skip = made.saturating_sub(workload.events.max(1));
    let mut seen = 0usize;
    recorded_run(workload, |e| {
        if seen >= skip {
            out(e);
        }
        seen += 1;
    })
}

/// Trace entries a recording holds before they are handed on (and the
/// history started again).
const CHUNK: usize = 1 << 16;
const HISTORY: HistoryConfig = HistoryConfig { record_trace: true, max_entries: usize::MAX, context: ContextLevel::Alloc };

/// Runs the workload with history recorded from the first operation,
/// handing every entry to `each` (the last one the `snapshot` entry that
/// taking the snapshot appends); returns the segments at the end.
fn recorded_run(workload: &Workload, mut each: impl FnMut(&TraceEntry)) -> Vec<SegmentInfo> {
    let mut a = CachingAllocator::new(SimDevice::new(u64::MAX).with_event_mode(EventMode::Immediate), workload.config.clone());
    a.record_history(Some(HISTORY));
    let mut pending = 0usize;
    let after = |a: &mut CachingAllocator<SimDevice>| {
        pending += 1;
        if pending == CHUNK {
            pending = 0;
            // Taking a snapshot appends an entry of its own: not the program's.
            let snapshot = a.snapshot();
            snapshot.device_traces.iter().flatten().filter(|e| e.action != TraceAction::Snapshot).for_each(&mut each);
            a.record_history(Some(HISTORY));
        }
    };
    Program { a: &mut a, made: 0, after }.run(workload);
    let snapshot = a.snapshot();
    snapshot.device_traces.iter().flatten().for_each(&mut each);
    snapshot.segments
}

/// The imitated training program, on an allocator.
struct Program<'a, F> {
    a: &'a mut CachingAllocator<SimDevice>,
    /// Entries made so far: one per alloc, two per free, plus segment
    /// events (not counted, so the run may go a little past `events`; the
    /// ring keeps the last ones).
    made: usize,
    /// Called after each allocation and free.
    after: F,
}

impl<F: FnMut(&mut CachingAllocator<SimDevice>)> Program<'_, F> {
    fn alloc(&mut self, size: u64, site: &Frames) -> DeviceAddr {
        self.made += 1;
        let p = self.a.malloc_with_context(size.max(1), StreamId(0), Some(site.clone())).expect("an unlimited device");
        (self.after)(self.a);
        p
    }

    fn free(&mut self, p: DeviceAddr) {
        self.made += 2;
        self.a.free(p).expect("allocated above");
        (self.after)(self.a);
    }

    fn run(&mut self, workload: &Workload) {
        let sites = Sites::new();
        let mut rng = XorShift::new(workload.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let hidden = 1024 + 256 * rng.below(8);
        let mut weights = Vec::new();
        for _ in 0..workload.layers {
            weights.push(self.alloc(4 * hidden * hidden * 4, &sites.weights));
            weights.push(self.alloc(hidden * 4, &sites.bias));
        }
        let mut optimizer_state: Vec<DeviceAddr> = Vec::new();
        while self.made < workload.events {
            let tokens = 512 * (1 + rng.below(8));
            let mut activations: Vec<DeviceAddr> = Vec::new();
            for _ in 0..workload.layers {
                if self.made >= workload.events {
                    break;
                }
                activations.push(self.alloc(tokens * hidden * 4, &sites.activation));
                activations.push(self.alloc(tokens * hidden * 4 * 4, &sites.mlp));
                let scores = self.alloc(tokens * tokens * 2 * (1 + rng.below(4)), &sites.attention);
                for _ in 0..rng.below(6) {
                    let t = self.alloc(512 + rng.below(256 << 10), &sites.temporary);
                    self.free(t);
                }
                self.free(scores);
            }
            let loss = self.alloc(tokens * 4, &sites.loss);
            let mut grads = Vec::new();
            while let Some(act) = activations.pop() {
                if self.made >= workload.events {
                    break;
                }
                let g = self.alloc(tokens * hidden * 4 + rng.below(MIB), &sites.backward);
                self.free(act);
                if activations.len() % 2 == 0 {
                    grads.push(self.alloc(4 * hidden * hidden * 4, &sites.grad));
                }
                self.free(g);
            }
            for act in activations {
                self.free(act);
            }
            self.free(loss);
            if optimizer_state.is_empty() {
                for _ in 0..workload.layers {
                    optimizer_state.push(self.alloc(2 * 4 * hidden * hidden * 4, &sites.optimizer));
                }
            }
            for g in grads {
                self.free(g);
            }
        }
    }
}

struct Sites {
    weights: Frames,
    bias: Frames,
    activation: Frames,
    mlp: Frames,
    attention: Frames,
    temporary: Frames,
    loss: Frames,
    backward: Frames,
    grad: Frames,
    optimizer: Frames,
}

impl Sites {
    fn new() -> Sites {
        Sites {
            weights: stack(&[("model.py", 31, "__init__"), ("train.py", 88, "build_model")]),
            bias: stack(&[("model.py", 33, "__init__"), ("train.py", 88, "build_model")]),
            activation: stack(&[("model.py", 52, "forward"), ("train.py", 97, "step")]),
            mlp: stack(&[("model.py", 61, "mlp"), ("model.py", 55, "forward"), ("train.py", 97, "step")]),
            attention: stack(&[("model.py", 74, "attention"), ("model.py", 53, "forward"), ("train.py", 97, "step")]),
            temporary: stack(&[("model.py", 80, "rotary"), ("model.py", 74, "attention"), ("train.py", 97, "step")]),
            loss: stack(&[("train.py", 99, "step")]),
            backward: stack(&[("autograd.py", 12, "backward"), ("train.py", 101, "step")]),
            grad: stack(&[("autograd.py", 20, "accumulate_grad"), ("train.py", 101, "step")]),
            optimizer: stack(&[("optim.py", 40, "init_state"), ("train.py", 104, "step")]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model_replay, DeviceTrace, ModelOptions};

    #[test]
    fn records_the_asked_length_and_replays() {
        crate::sampled_invariant_checks();
        let snap = record(&Workload::new(20_000));
        let trace = &DeviceTrace::split(&snap)[0];
        assert_eq!(trace.events.len(), 20_000);
        assert!(trace.events.iter().enumerate().all(|(i, e)| trace.events.frames(i).is_some() || e.action != vramkit_core::TraceAction::Alloc));
        let config = AllocatorConfig::pytorch_default();
        let m = model_replay(trace, &ModelOptions::for_conf(config.clone(), config, None)).unwrap();
        assert!(m.peak_reserved_bytes > 0);
        let report = crate::verify(trace, &AllocatorConfig::pytorch_default()).unwrap();
        assert!(report.passed(), "{report:?}");
    }
}

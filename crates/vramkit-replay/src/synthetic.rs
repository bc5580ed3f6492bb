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
use vramkit_core::{AllocatorConfig, CachingAllocator, ContextLevel, DeviceAddr, Frame, Frames, HistoryConfig, Snapshot, StreamId};
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
    let sites = Sites::new();
    let mut a = CachingAllocator::new(SimDevice::new(u64::MAX).with_event_mode(EventMode::Immediate), workload.config.clone());
    a.record_history(Some(HistoryConfig { record_trace: true, max_entries: workload.events.max(1), context: ContextLevel::Alloc }));
    let mut rng = XorShift::new(workload.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let stream = StreamId(0);
    // Entries made so far: one per alloc, two per free, plus segment events
    // (not counted, so the run may go a little past `events`; the ring keeps the last ones).
    let mut made = 0usize;
    let alloc = |a: &mut CachingAllocator<SimDevice>, size: u64, site: &Frames, made: &mut usize| -> DeviceAddr {
        *made += 1;
        a.malloc_with_context(size.max(1), stream, Some(site.clone())).expect("an unlimited device")
    };
    let free = |a: &mut CachingAllocator<SimDevice>, p: DeviceAddr, made: &mut usize| {
        *made += 2;
        a.free(p).expect("allocated above");
    };

    let hidden = 1024 + 256 * rng.below(8);
    let mut weights = Vec::new();
    for _ in 0..workload.layers {
        weights.push(alloc(&mut a, 4 * hidden * hidden * 4, &sites.weights, &mut made));
        weights.push(alloc(&mut a, hidden * 4, &sites.bias, &mut made));
    }
    let mut optimizer_state: Vec<DeviceAddr> = Vec::new();
    while made < workload.events {
        let tokens = 512 * (1 + rng.below(8));
        let mut activations: Vec<DeviceAddr> = Vec::new();
        for _ in 0..workload.layers {
            if made >= workload.events {
                break;
            }
            activations.push(alloc(&mut a, tokens * hidden * 4, &sites.activation, &mut made));
            activations.push(alloc(&mut a, tokens * hidden * 4 * 4, &sites.mlp, &mut made));
            let scores = alloc(&mut a, tokens * tokens * 2 * (1 + rng.below(4)), &sites.attention, &mut made);
            for _ in 0..rng.below(6) {
                let t = alloc(&mut a, 512 + rng.below(256 << 10), &sites.temporary, &mut made);
                free(&mut a, t, &mut made);
            }
            free(&mut a, scores, &mut made);
        }
        let loss = alloc(&mut a, tokens * 4, &sites.loss, &mut made);
        let mut grads = Vec::new();
        while let Some(act) = activations.pop() {
            if made >= workload.events {
                break;
            }
            let g = alloc(&mut a, tokens * hidden * 4 + rng.below(MIB), &sites.backward, &mut made);
            free(&mut a, act, &mut made);
            if activations.len() % 2 == 0 {
                grads.push(alloc(&mut a, 4 * hidden * hidden * 4, &sites.grad, &mut made));
            }
            free(&mut a, g, &mut made);
        }
        for act in activations {
            free(&mut a, act, &mut made);
        }
        free(&mut a, loss, &mut made);
        if optimizer_state.is_empty() {
            for _ in 0..workload.layers {
                optimizer_state.push(alloc(&mut a, 2 * 4 * hidden * hidden * 4, &sites.optimizer, &mut made));
            }
        }
        for g in grads {
            free(&mut a, g, &mut made);
        }
    }
    a.snapshot()
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

//! Replay throughput: parse + model + oracle on the largest shared trace, and
//! model replay of a synthetic 5-million-event trace.
//!
//! `cargo bench -p vramkit-bench --bench replay`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::PathBuf;
use vramkit_core::AllocatorConfig;
use vramkit_replay::{model_replay, oracle_replay, DeviceTrace, ModelOptions};

fn largest_trace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle")
}

/// Model replay options with the trace's reading judged beforehand, as
/// `tune` does once per trace for all its candidates.
fn options(trace: &DeviceTrace) -> ModelOptions {
    let config = AllocatorConfig::pytorch_default();
    let reading = vramkit_replay::verify::reading(trace, &config, None).unwrap();
    ModelOptions { reading: Some(std::sync::Arc::new(reading)), ..ModelOptions::for_conf(config.clone(), config, None) }
}

fn real_trace(c: &mut Criterion) {
    let path = largest_trace();
    let bytes = std::fs::read(&path).unwrap();
    let file = vramkit_trace::read_snapshot_bytes(&bytes).unwrap();
    let trace = DeviceTrace::split(&file.snapshot).remove(0);
    let mut g = c.benchmark_group("cs336_bcrafton");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("parse", |b| b.iter(|| vramkit_trace::read_snapshot_bytes(&bytes).unwrap()));
    g.throughput(Throughput::Elements(trace.events.len() as u64));
    let opts = options(&trace);
    g.bench_function("model_replay", |b| b.iter(|| model_replay(&trace, &opts).unwrap()));
    g.bench_function("oracle_replay", |b| b.iter(|| oracle_replay(&trace, &AllocatorConfig::pytorch_default(), 0).unwrap()));
    g.finish();
}

fn synthetic(c: &mut Criterion) {
    let snapshot = vramkit_bench::synthetic_snapshot(5_000_000, 42);
    let trace = DeviceTrace::split(&snapshot).remove(0);
    eprintln!("synthetic trace: {} events", trace.events.len());
    let mut g = c.benchmark_group("synthetic_5M");
    g.sample_size(10);
    g.throughput(Throughput::Elements(trace.events.len() as u64));
    let opts = options(&trace);
    g.bench_function("model_replay", |b| b.iter(|| model_replay(&trace, &opts).unwrap()));
    g.bench_function("oracle_replay", |b| b.iter(|| oracle_replay(&trace, &AllocatorConfig::pytorch_default(), 0).unwrap()));
    g.finish();
}

criterion_group!(benches, real_trace, synthetic);
criterion_main!(benches);

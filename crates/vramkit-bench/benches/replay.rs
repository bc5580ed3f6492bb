//! Replay throughput: parse + model + oracle on the largest shared trace,
//! model replay of a synthetic 5-million-event trace of random frees (each
//! replay rebuilding its start), and model replay of the 5-million-entry
//! training trace `synthetic_trace` writes, prepared once, as `tune`
//! replays its candidates.
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

/// The 5,000,000-entry training workload `synthetic_trace` writes (the
/// trace issue 14's figures are on), replayed as `tune` replays each
/// candidate: prepared once, its reading judged once.
fn training(c: &mut Criterion) {
    let snapshot = vramkit_replay::synthetic::record(&vramkit_replay::synthetic::Workload::new(5_000_000));
    let trace = DeviceTrace::split(&snapshot).remove(0);
    let config = AllocatorConfig::pytorch_default();
    let prepared = vramkit_replay::PreparedTrace::new(&trace, config.clone(), None).unwrap();
    prepared.reading().unwrap();
    let mut g = c.benchmark_group("training_5M");
    g.sample_size(10);
    g.throughput(Throughput::Elements(trace.events.len() as u64));
    g.bench_function("prepared_model_replay", |b| b.iter(|| prepared.model_replay(&config, None, 0).unwrap()));
    g.finish();
}

criterion_group!(benches, real_trace, synthetic, training);
criterion_main!(benches);

//! Parse throughput on the largest real snapshot in `data/traces/`.
//!
//! `cargo bench -p vramkit-trace --bench parse`; criterion reports MB/s
//! (bytes of input per second) for the full read into the model, for the
//! same file as JSON, and for writing it back as a pickle.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::path::PathBuf;

fn largest_snapshot() -> (String, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/pytorch_snapshots");
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .expect("data/traces/pytorch_snapshots exists")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "pickle"))
        .map(|path| (std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0), path))
        .collect();
    files.sort();
    let (_, path) = files.pop().expect("at least one snapshot");
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("snapshot").to_owned();
    (name, std::fs::read(&path).expect("readable"))
}

fn parse(c: &mut Criterion) {
    let (name, bytes) = largest_snapshot();
    let file = vramkit_trace::read_snapshot_bytes(&bytes).expect("parses");
    let mut json = Vec::new();
    vramkit_trace::write_json(&file, &mut json).expect("writes JSON");

    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function(format!("pickle/{name}"), |b| {
        b.iter(|| vramkit_trace::read_snapshot_bytes(black_box(&bytes)).expect("parses"));
    });
    group.bench_function(format!("write_pickle/{name}"), |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(bytes.len());
            vramkit_trace::write_pickle(black_box(&file), &mut out).expect("writes");
            out
        });
    });
    group.throughput(Throughput::Bytes(json.len() as u64));
    group.bench_function(format!("json/{name}"), |b| {
        b.iter(|| vramkit_trace::read_snapshot_bytes(black_box(&json)).expect("parses"));
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);

//! What-if replays against PyTorch itself: a program recorded under
//! PyTorch's defaults, replayed by vramkit under another setting, against
//! the same program run by PyTorch under that setting. Equal: peak reserved,
//! device calls, retry ladders, and whether and where it runs out of memory.
//!
//! The programs call no `empty_cache()`: a call that released nothing under
//! the recorded settings leaves no trace entry, so no replay can repeat it.
//! And they end at the recording's first out-of-memory error (see below).

use crate::support::{harness, read_recording, releases, rules, seeds, SETTINGS};
use vramkit_pytorch::{random_program, Op, Program, Setup, Shape, DEFAULT_CAPACITY};
use vramkit_replay::{model_replay, DeviceTrace, ModelOptions};

/// The program line of each request's trace entry (`alloc`, or `oom` where
/// the recording ran out), in order.
fn request_lines(program: &Program) -> Vec<usize> {
    program.ops.iter().enumerate().filter(|(_, op)| matches!(op, Op::Malloc { .. })).map(|(i, _)| i + 1).collect()
}

#[test]
fn what_if_equals_pytorchs_direct_run() {
    crate::support::sampled_invariant_checks();
    let mut failures = Vec::new();
    let mut pairs = 0;
    for release in releases() {
        let Some(h) = harness(release) else { continue };
        let shapes = [
            ("unlimited", Shape { empty_cache: false, ..Shape::default() }, None),
            ("tight", Shape { empty_cache: false, largest: 2 << 30, ..Shape::default() }, Some(6u64 << 30)),
            ("streams", Shape { empty_cache: false, streams: true, ..Shape::default() }, None),
        ];
        for (label, shape, capacity) in &shapes {
            for seed in 0..seeds(2) {
                let mut program = random_program(seed, shape);
                let manual_events = shape.streams;
                let recorded_setup = Setup { capacity: *capacity, manual_events, ..Setup::default() };
                // The program ends at the recording's first out-of-memory
                // request: a request that fails in the recording but fits
                // under other settings would hold its block for good, as its
                // free left no trace entry.
                if let Some(&(line, _)) = h.run(&program, &recorded_setup).unwrap_or_else(|e| panic!("{e}")).ooms.first() {
                    program.ops.truncate(line);
                }
                program.ops.push(Op::Stats);
                let recording = h.record(&program, &recorded_setup).unwrap_or_else(|e| panic!("{e}"));
                let file = read_recording(recording.snapshot.as_deref().unwrap());
                let recorded = file.recorded_config(Some(rules(release)));
                let trace = DeviceTrace::split(&file.snapshot).into_iter().find(DeviceTrace::has_allocations).expect("a trace");
                let lines = request_lines(&program);
                let requests: Vec<usize> = trace
                    .events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| matches!(e.action, vramkit_core::TraceAction::Alloc | vramkit_core::TraceAction::Oom))
                    .map(|(i, _)| i)
                    .collect();
                assert_eq!(requests.len(), lines.len(), "{release} {label} seed {seed}: one trace entry per request");
                let line_of = |event: u64| requests.iter().position(|&i| i as u64 == event).map(|k| lines[k]);
                for conf in SETTINGS.iter().filter(|c| !c.is_empty()) {
                    let setup = Setup { conf: Some(conf.to_string()), ..recorded_setup.clone() };
                    let direct = h.run(&program, &setup).unwrap_or_else(|e| panic!("{e}"));
                    if !direct.errors.is_empty() {
                        continue; // PyTorch's own internal errors (2.4: targeted release of expandable blocks)
                    }
                    let truth = &direct.stats.last().expect("the final p").1;
                    let config = vramkit_core::AllocatorConfig::parse_with_compat(conf, rules(release).compat()).expect("settings parse");
                    let capacity = capacity.unwrap_or(DEFAULT_CAPACITY);
                    let options = ModelOptions {
                        recorded_capacity_bytes: Some(capacity),
                        ..ModelOptions::for_conf(config, recorded.clone(), Some(capacity))
                    };
                    let m = model_replay(&trace, &options).unwrap_or_else(|e| panic!("{release} {label} seed {seed} {conf}: {e}"));
                    pairs += 1;
                    let ours = [
                        ("peak reserved", m.peak_reserved_bytes as i64),
                        ("device allocs", m.device_mallocs as i64),
                        ("device frees", m.device_frees as i64),
                        ("retries", m.alloc_retries as i64),
                        ("ooms", m.oom_count as i64),
                        ("first oom line", m.first_oom_event.and_then(line_of).map_or(-1, |l| l as i64)),
                    ];
                    let theirs = [
                        truth["reserved_bytes.all.peak"],
                        truth["num_device_alloc"],
                        truth["num_device_free"],
                        truth["num_alloc_retries"],
                        truth["num_ooms"],
                        direct.ooms.first().map_or(-1, |o| o.0 as i64),
                    ];
                    let differ: Vec<String> = ours
                        .iter()
                        .zip(theirs)
                        .filter(|((_, a), b)| a != b)
                        .map(|((what, a), b)| format!("{what}: PyTorch {b}, vramkit {a}"))
                        .collect();
                    if !differ.is_empty() {
                        failures.push(format!("{release} {label} seed {seed} {conf}: {}", differ.join("; ")));
                    }
                }
            }
        }
    }
    println!("{pairs} what-if pairs compared");
    if let Some(path) = std::env::var_os("VRAMKIT_SWEEP_REPORT") {
        std::fs::write(path, failures.join("\n")).expect("the report is written");
    }
    assert!(failures.is_empty(), "{} of {pairs} pairs differ:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}

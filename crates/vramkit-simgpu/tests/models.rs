//! One training step of three kinds of model on the simulated GPU, with
//! PyTorch's allocator recording: a GPT-2-small-sized transformer, a
//! ResNet-18-shaped convolutional network through cuDNN, a diffusion UNet.

use crate::support::{number, preset, releases, run, scratch, script, simulated};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use vramkit_core::TraceAction;
use vramkit_pytorch::Release;
use vramkit_simgpu::{Preset, Stack, TorchEnv};
use vramkit_trace::SnapshotFile;

/// One step of `name` (tests/py/<name>_step.py) at `batch` on `preset`:
/// its report, its snapshot, the wall time (torch's import included).
fn step(stack: &Stack, env: &TorchEnv, name: &str, batch: u32, preset: &Preset, dir: &Path) -> (Value, SnapshotFile, Duration) {
    let snapshot = dir.join(format!("{name}-{}-b{batch}.pickle", preset.key));
    let started = Instant::now();
    let batch = batch.to_string();
    let out = run(&mut script(stack, env, preset, &format!("{name}_step.py"), &["--batch", &batch, "--snapshot", &snapshot.to_string_lossy()]));
    let wall = started.elapsed();
    let report = out.report();
    let file = vramkit_trace::read_snapshot(&snapshot).unwrap_or_else(|e| panic!("vramkit cannot read the snapshot: {e}"));
    (report, file, wall)
}

fn count(file: &SnapshotFile, action: TraceAction) -> usize {
    file.snapshot.device_traces.iter().flatten().filter(|e| e.action == action).count()
}

/// Steps at a small and a larger batch: both fit, the snapshot recorded
/// every allocation, and the larger batch reserves more.
fn grows_with_batch(release: &'static Release, name: &str, batches: [u32; 2]) -> [Value; 2] {
    let Some((stack, env)) = simulated(release) else { return [Value::Null, Value::Null] };
    let card = preset("a100-80gb");
    let dir = scratch(&format!("{name}-{}", release.version));
    let runs = batches.map(|batch| {
        let (report, file, wall) = step(&stack, &env, name, batch, &card, &dir);
        let context = format!("{release} {name} batch {batch}: {report}");
        assert_eq!(report["oom"], Value::Null, "{context}");
        assert_eq!(report["device"], "NVIDIA A100-SXM4-80GB", "{context}");
        assert!(count(&file, TraceAction::Alloc) > 100, "the snapshot holds the step's allocations: {context}");
        assert!(count(&file, TraceAction::SegmentAlloc) > 0, "{context}");
        let reserved: u64 = file.snapshot.segments.iter().map(|s| s.total_size).sum();
        assert!(reserved > 0 && reserved <= number(&report, "peak_reserved"), "{context}");
        assert!(number(&report, "peak_reserved") >= number(&report, "peak_allocated"), "{context}");
        eprintln!(
            "{release} {name} batch {batch}: peak reserved {} MiB, peak allocated {} MiB, {:.1} s wall ({:.1} s in the step)",
            number(&report, "peak_reserved") >> 20,
            number(&report, "peak_allocated") >> 20,
            wall.as_secs_f64(),
            report["step_seconds"].as_f64().unwrap_or(0.0),
        );
        assert!(wall < Duration::from_secs(60), "{context}: {wall:?}");
        report
    });
    assert!(
        number(&runs[1], "peak_reserved") > number(&runs[0], "peak_reserved"),
        "{release} {name}: batch {} reserves no more than batch {}",
        batches[1],
        batches[0]
    );
    runs
}

#[test]
fn a_gpt2_small_step_fits_and_grows_with_the_batch() {
    for release in releases() {
        let [small, _] = grows_with_batch(release, "gpt2", [1, 4]);
        if small.is_null() {
            return;
        }
        // Weights, gradients and AdamW's two moments of 124M fp32 parameters.
        let floor = 4 * 124_000_000 * 4;
        assert!(number(&small, "peak_allocated") > floor, "{release}: {small}");
        assert!(number(&small, "peak_reserved") < 8 << 30, "{release}: {small}");
    }
}

#[test]
fn a_resnet_step_convolves_through_cudnn_and_grows_with_the_batch() {
    for release in releases() {
        let [small, large] = grows_with_batch(release, "resnet", [16, 64]);
        for report in [&small, &large].into_iter().filter(|r| !r.is_null()) {
            assert_eq!(report["cudnn_enabled"], true, "{release}: {report}");
            // 20 convolutions forward, 20 weight gradients, 19 input
            // gradients (none for the image).
            assert!(number(report, "cudnn_executions") >= 59, "{release}: PyTorch did not take its cuDNN path: {report}");
        }
    }
}

#[test]
fn a_diffusion_unet_step_fits_and_grows_with_the_batch() {
    for release in releases() {
        grows_with_batch(release, "unet", [2, 16]);
    }
}

#[test]
fn a_step_too_large_for_a_small_card_raises_pytorchs_out_of_memory_error() {
    for release in releases() {
        let Some((stack, env)) = simulated(release) else { return };
        let card = preset("2GiB");
        let dir = scratch(&format!("oom-{}", release.version));
        let (report, file, _) = step(&stack, &env, "gpt2", 4, &card, &dir);
        let text = report["oom"].as_str().unwrap_or_else(|| panic!("{release}: no OutOfMemoryError on 2 GiB: {report}"));
        assert!(text.starts_with("CUDA out of memory. Tried to allocate "), "{release}: {text}");
        assert!(text.contains("GPU 0 has a total capacity of 2.00 GiB of which "), "{release}: {text}");
        assert!(text.contains("is allocated by PyTorch"), "{release}: {text}");
        assert!(number(&report, "peak_reserved") <= 2 << 30, "{release}: {report}");
        assert!(count(&file, TraceAction::Oom) >= 1, "{release}: the snapshot records the OOM");
    }
}

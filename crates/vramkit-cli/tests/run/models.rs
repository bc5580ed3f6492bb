//! The largest batch of three training steps on a 16 GB T4 and an 80 GB A100: the search ran the
//! value found (it fits) and the next (it runs out); the next is run again on its own, and says
//! where it ran out.
//!
//! Ranges are chosen narrow enough for CI (a few runs each) and wide enough that the edge falls
//! strictly inside. Most cases tune only the recorded settings (`--max-candidates 1`); two let
//! the tune pick better ones among twelve, so the search with those runs too.

use super::support::{newest, number, program, vramkit_run};
use serde_json::Value;
use std::ffi::OsStr;
use vramkit_core::TraceAction;

/// `vramkit run --batch BS=<range>` on `gpu` for `tests/programs/<model>_train.py --batch {BS}`:
/// the largest batch, checked; `None` on a skip.
fn largest_batch(model: &str, gpu: &str, range: (u64, u64), candidates: &str) -> Option<u64> {
    let python = newest()?;
    let script = program(&format!("{model}_train.py"));
    let command = [python.as_os_str(), script.as_os_str(), OsStr::new("--batch"), OsStr::new("{BS}")];
    let spec = format!("BS={}..{}", range.0, range.1);
    let started = std::time::Instant::now();
    let snapshot = std::env::temp_dir().join(format!("vramkit-cli-run-{}-{model}-{gpu}.pickle", std::process::id()));
    let options = ["--json", "--gpu", gpu, "--batch", &spec, "--max-candidates", candidates, "-o", snapshot.to_str().unwrap()];
    let ran = vramkit_run(&options, &command, &[]);
    let v = ran.expect(0).json();
    assert_eq!(v["snapshot"].as_str(), snapshot.to_str(), "-o keeps the snapshot of the largest value that fits");
    let b = &v["batch"];
    let fit = number(&b["largest_fit"]);
    let runs = v["runs"].as_array().unwrap();
    eprintln!("{model} on {gpu}: BS={fit} fits ({} runs, {:.0} s); best settings {}: {}", runs.len(), started.elapsed().as_secs_f64(), b["best_conf"], b["largest_fit_best"]);
    assert!(range.0 < fit && fit < range.1, "{model} on {gpu}: the edge {fit} is not inside {spec}");
    assert_eq!(number(&b["smallest_oom"]), fit + 1, "{b}");
    let at = |value: u64, conf: &Value| runs.iter().find(|r| r["value"] == value && r["conf"] == *conf).unwrap_or_else(|| panic!("no run at {value}: {v}"));
    assert_eq!(at(fit, &v["conf"])["result"], "fits");
    assert_eq!(at(fit + 1, &v["conf"])["result"], "out of memory");
    assert!(number(&at(fit, &v["conf"])["peak_reserved_bytes"]) <= number(&v["gpu"]["usable_bytes"]));
    assert!(v["diagnosis"]["allocation_events"].as_u64().unwrap() > 1000, "the run at {fit} recorded the step");
    assert_eq!(b["best_conf"].is_string(), candidates != "1", "a better setting is searched when the tune may find one: {b}");
    if let Some(best) = b["best_conf"].as_str() {
        let best_fit = number(&b["largest_fit_best"]);
        assert!(best_fit >= fit, "{b}");
        if let Some(oom) = b["smallest_oom_best"].as_u64() {
            assert_eq!(oom, best_fit + 1, "{b}");
            assert_eq!(at(oom, &Value::from(best))["result"], "out of memory");
        }
    }
    // The next value, on its own.
    let over = (fit + 1).to_string();
    let command = [python.as_os_str(), script.as_os_str(), OsStr::new("--batch"), OsStr::new(&over)];
    let over = vramkit_run(&["--gpu", gpu, "--max-candidates", "1"], &command, &[]);
    over.expect(1).says("  It ran out of memory (peak reserved ").says(": CUDA out of memory. Tried to allocate ");
    // The program's line, quoted: where the forward pass allocated, or the one that started backward.
    let prefix = format!("  Where: {}:", script.display());
    let at = over.stdout.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {prefix:?} in:\n{}", over.stdout));
    let (line, rest) = at.split_once(" in ").unwrap_or_else(|| panic!("{at}"));
    let code = rest.split_once(": ").map(|(_, code)| code.split(" (allocating in ").next().unwrap_or(code)).unwrap_or_else(|| panic!("{at}"));
    let source = std::fs::read_to_string(&script).unwrap();
    let line: usize = line.parse().unwrap_or_else(|_| panic!("{at}"));
    assert_eq!(source.lines().nth(line - 1).map(str::trim), Some(code), "{at}");
    if model == "resnet" {
        let file = vramkit_trace::read_snapshot(&snapshot).unwrap_or_else(|e| panic!("{e}"));
        let through_cudnn = file.snapshot.device_traces.iter().flatten().filter(|e| e.action == TraceAction::Alloc).any(|e| {
            e.frames.as_deref().unwrap_or_default().iter().any(|f| f.name.contains("cudnn_convolution"))
        });
        assert!(through_cudnn, "PyTorch took its cuDNN convolution path");
    }
    let _ = std::fs::remove_file(&snapshot);
    Some(fit)
}

#[test]
fn gpt2_small_on_a_t4() {
    largest_batch("gpt2", "t4", (2, 16), "1");
}

#[test]
fn gpt2_small_on_an_a100_80gb() {
    largest_batch("gpt2", "a100-80gb", (32, 128), "12");
}

#[test]
fn resnet50_on_a_t4() {
    largest_batch("resnet", "t4", (256, 512), "1");
}

#[test]
fn resnet50_on_an_a100_80gb() {
    largest_batch("resnet", "a100-80gb", (1536, 2048), "1");
}

#[test]
fn diffusion_unet_on_a_t4() {
    largest_batch("unet", "t4", (64, 112), "12");
}

#[test]
fn diffusion_unet_on_an_a100_80gb() {
    largest_batch("unet", "a100-80gb", (448, 640), "1");
}

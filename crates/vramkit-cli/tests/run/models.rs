//! The largest batch of three training steps on a 16 GB T4 and an 80 GB A100: the search ran the
//! value found (it fits) and the next (it runs out); the next is run again on its own, and says
//! where it ran out.
//!
//! Ranges and lists are chosen narrow enough for CI (a few runs each) and wide enough that the
//! edge falls strictly inside; with a list, "the next" is the next value listed. Most cases tune
//! only the recorded settings (`--max-candidates 1`); the UNet on a T4 lets the tune pick among
//! twelve, and the better settings it finds are searched too.

use super::support::{newest, number, program, vramkit_run};
use serde_json::Value;
use std::ffi::OsStr;
use vramkit_core::TraceAction;

/// `vramkit run --batch BS=<values>` (a range or a list) on `gpu` for
/// `tests/programs/<model>_train.py --batch {BS}`, tuning `candidates` settings: the largest batch,
/// checked (nothing on a skip); `better`: the tune finds better settings, which are searched too.
fn largest_batch(model: &str, gpu: &str, values: &str, candidates: &str, better: bool) {
    let Some(python) = newest() else { return };
    let script = program(&format!("{model}_train.py"));
    let command = [python.as_os_str(), script.as_os_str(), OsStr::new("--batch"), OsStr::new("{BS}")];
    let spec = format!("BS={values}");
    let listed: Vec<u64> = match values.split_once("..") {
        Some((lo, hi)) => (lo.parse().unwrap()..=hi.parse().unwrap()).collect(),
        None => values.split(',').map(|v| v.parse().unwrap()).collect(),
    };
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
    let index = listed.iter().position(|&v| v == fit).unwrap_or_else(|| panic!("{fit} is not one of {spec}"));
    assert!(0 < index && index + 1 < listed.len(), "{model} on {gpu}: the edge {fit} is not inside {spec}");
    let next = listed[index + 1];
    assert_eq!(number(&b["smallest_oom"]), next, "{b}");
    let at = |value: u64, conf: &Value| runs.iter().find(|r| r["value"] == value && r["conf"] == *conf).unwrap_or_else(|| panic!("no run at {value}: {v}"));
    assert_eq!(at(fit, &v["conf"])["result"], "fits");
    assert_eq!(at(next, &v["conf"])["result"], "out of memory");
    assert!(number(&at(fit, &v["conf"])["peak_reserved_bytes"]) <= number(&v["gpu"]["usable_bytes"]));
    assert!(v["diagnosis"]["allocation_events"].as_u64().unwrap() > 1000, "the run at {fit} recorded the step");
    assert_eq!(b["best_conf"], v["recommended"]["conf"], "{b}");
    assert_eq!(b["best_conf"].is_string(), better, "{b}");
    if let Some(best) = b["best_conf"].as_str() {
        let best_fit = number(&b["largest_fit_best"]);
        assert!(best_fit >= fit, "{b}");
        assert_eq!(at(best_fit, &Value::from(best))["result"], "fits");
        if let Some(oom) = b["smallest_oom_best"].as_u64() {
            assert_eq!(oom, listed[listed.iter().position(|&v| v == best_fit).unwrap() + 1], "{b}");
            assert_eq!(at(oom, &Value::from(best))["result"], "out of memory");
        }
    }
    // The next value, on its own.
    let over = next.to_string();
    let command = [python.as_os_str(), script.as_os_str(), OsStr::new("--batch"), OsStr::new(&over)];
    let over = vramkit_run(&["--gpu", gpu, "--max-candidates", "1"], &command, &[]);
    over.expect(1).says("  It ran out of memory (peak reserved ").says(": CUDA out of memory. Tried to allocate ");
    // The program's line, quoted: where the forward pass allocated, or training.py's line that
    // started backward.
    let at = over.stdout.lines().find_map(|l| l.strip_prefix("  Where: ")).unwrap_or_else(|| panic!("no Where: in:\n{}", over.stdout));
    let (place, rest) = at.split_once(" in ").unwrap_or_else(|| panic!("{at}"));
    let (file, line) = place.rsplit_once(':').unwrap_or_else(|| panic!("{at}"));
    assert_eq!(std::path::Path::new(file).parent(), script.parent(), "{at}: not a line of the programs");
    let code = rest.split_once(": ").map(|(_, code)| code.split(" (allocating in ").next().unwrap_or(code)).unwrap_or_else(|| panic!("{at}"));
    let line: usize = line.parse().unwrap_or_else(|_| panic!("{at}"));
    let source = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(source.lines().nth(line - 1).map(str::trim), Some(code), "{at}");
    if model == "resnet" {
        let file = vramkit_trace::read_snapshot(&snapshot).unwrap_or_else(|e| panic!("{e}"));
        let through_cudnn = file.snapshot.device_traces.iter().flatten().filter(|e| e.action == TraceAction::Alloc).any(|e| {
            e.frames.as_deref().unwrap_or_default().iter().any(|f| f.name.contains("cudnn_convolution"))
        });
        assert!(through_cudnn, "PyTorch took its cuDNN convolution path");
    }
    let _ = std::fs::remove_file(&snapshot);
}

/// One test per case, so they run in parallel: `name: (model, gpu, values, tune candidates,
/// better settings found)`.
macro_rules! cases {
    ($($name:ident: ($model:literal, $gpu:literal, $values:literal, $candidates:literal, $better:literal),)*) => {
        $(
            #[test]
            fn $name() {
                largest_batch($model, $gpu, $values, $candidates, $better);
            }
        )*
    };
}

cases! {
    gpt2_small_on_a_t4: ("gpt2", "t4", "2..16", "1", false),
    gpt2_small_on_an_a100_80gb: ("gpt2", "a100-80gb", "32..128", "1", false),
    resnet50_on_a_t4: ("resnet", "t4", "288,304,320,336,352,368,384", "1", false),
    resnet50_on_an_a100_80gb: ("resnet", "a100-80gb", "1664,1728,1792,1856,1920,1984,2048", "1", false),
    diffusion_unet_on_a_t4: ("unet", "t4", "64..112", "12", true),
    diffusion_unet_on_an_a100_80gb: ("unet", "a100-80gb", "448..640", "1", false),
}

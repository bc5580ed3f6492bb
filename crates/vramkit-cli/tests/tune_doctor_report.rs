//! `tune`, `doctor` and `report` end to end on the shipped traces.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn snapshots() -> Vec<PathBuf> {
    let dir = repo().join("data/traces/pytorch_snapshots");
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "pickle")).collect();
    v.sort();
    v
}

/// The traces with allocation events (the README's five).
fn with_events() -> Vec<PathBuf> {
    snapshots().into_iter().filter(|p| p.to_string_lossy().contains("cs336")).collect()
}

fn vramkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramkit")).args(args).output().expect("the binary runs")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramkit-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Checks one tune result against `vramkit replay` and the invariants.
fn check_tune(t: &Value, snapshot: &Path, capacity: Option<&str>) {
    let name = snapshot.display();
    let (recorded, best) = (&t["recorded"], &t["best"]);
    assert_eq!(t["recommended"], best["conf"], "{name}");
    assert!(u(&best["peak_reserved_bytes"]) <= u(&recorded["peak_reserved_bytes"]) || recorded["oom"] == true, "{name}: {t}");
    let candidates = t["candidates"].as_array().unwrap();
    assert!(candidates.iter().any(|c| c["conf"] == recorded["conf"]), "{name}: the recorded settings are a candidate");
    assert_eq!(candidates[0], *best);
    let lower = u(&t["lower_bound_bytes"]);
    for c in candidates {
        assert!(lower <= u(&c["peak_reserved_bytes"]), "{name}: lower bound {lower} above {c}");
    }
    for w in candidates.windows(2) {
        let key = |c: &Value| (c["oom"].as_bool().unwrap(), u(&c["oom_count"]), u(&c["peak_reserved_bytes"]), u(&c["device_calls"]));
        assert!(key(&w[0]) <= key(&w[1]), "{name}: ranked out of order: {} then {}", w[0], w[1]);
    }
    // The predicted figures are what `vramkit replay --conf <recommended>` prints.
    let snapshot_arg = snapshot.to_str().unwrap();
    let conf = t["recommended"].as_str().unwrap();
    let mut args = vec!["replay", "--json", "--conf", conf, snapshot_arg];
    if let Some(c) = capacity {
        args.extend(["--capacity", c]);
    }
    let r = json(&vramkit(&args));
    assert_eq!(r["peak_reserved_bytes"], best["peak_reserved_bytes"], "{name} --conf {conf:?}");
    assert_eq!(u(&r["device_mallocs"]) + u(&r["device_frees"]), u(&best["device_calls"]), "{name}");
    assert_eq!(r["first_oom_event"].is_null(), !best["oom"].as_bool().unwrap(), "{name}");
    assert_eq!(r["capacity_bytes"], t["capacity_bytes"], "{name}");
    // And the recorded figures are `vramkit replay` under the recorded settings.
    let mut args = vec!["replay", "--json", snapshot_arg];
    if let Some(c) = capacity {
        args.extend(["--capacity", c]);
    }
    let r = json(&vramkit(&args));
    assert_eq!(r["conf"], recorded["conf"], "{name}");
    assert_eq!(r["peak_reserved_bytes"], recorded["peak_reserved_bytes"], "{name}");
}

#[test]
fn tune_recommends_no_more_than_recorded_and_replay_agrees() {
    for p in with_events() {
        let out = vramkit(&["tune", "--json", p.to_str().unwrap()]);
        assert!(out.stderr.is_empty(), "no progress bar when piped: {}", String::from_utf8_lossy(&out.stderr));
        let t = json(&out);
        assert_eq!(t["capacity_source"], "unlimited");
        assert!(t["candidates"].as_array().unwrap().iter().all(|c| !c["conf"].as_str().unwrap().contains("garbage")));
        check_tune(&t, &p, None);
    }
}

#[test]
fn tune_with_a_capacity_tries_garbage_collection_and_replay_agrees() {
    for p in with_events() {
        // A capacity just above the recorded peak: garbage collection can act.
        let recorded = json(&vramkit(&["replay", "--json", p.to_str().unwrap()]));
        let capacity = (u(&recorded["peak_reserved_bytes"]) + (64 << 20)).to_string();
        let t = json(&vramkit(&["tune", "--json", "--capacity", &capacity, "--max-candidates", "40", p.to_str().unwrap()]));
        let candidates = t["candidates"].as_array().unwrap();
        assert_eq!(candidates.len(), 40);
        assert_eq!(t["capacity_source"], "given");
        check_tune(&t, &p, Some(&capacity));
        // Every garbage-collection candidate is replayed as `replay --conf` would.
        let gc = candidates.iter().find(|c| c["conf"].as_str().unwrap().contains("garbage_collection_threshold")).expect("a gc candidate");
        let conf = gc["conf"].as_str().unwrap();
        let r = json(&vramkit(&["replay", "--json", "--capacity", &capacity, "--conf", conf, p.to_str().unwrap()]));
        assert_eq!(r["peak_reserved_bytes"], gc["peak_reserved_bytes"], "{} {conf}", p.display());
    }
}

#[test]
fn tune_of_several_ranks_names_the_setting_for_the_worst() {
    let ranks = [
        repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle"),
        repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__memory_forward_fp32_128.pickle"),
    ];
    let args: Vec<&str> = ["tune", "--json"].into_iter().chain(ranks.iter().map(|p| p.to_str().unwrap())).collect();
    let v = json(&vramkit(&args));
    let per = v["snapshots"].as_array().unwrap();
    assert_eq!(per.len(), 2);
    for (t, p) in per.iter().zip(&ranks) {
        check_tune(t, p, None);
    }
    let w = &v["worst_case"];
    let conf = w["recommended"].as_str().unwrap();
    let mut worst = 0;
    for (p, (label, peak)) in ranks.iter().zip(w["peaks"].as_array().unwrap().iter().map(|x| (&x[0], &x[1]))) {
        assert_eq!(label.as_str().unwrap(), p.file_name().unwrap().to_str().unwrap());
        let r = json(&vramkit(&["replay", "--json", "--conf", conf, p.to_str().unwrap()]));
        assert_eq!(r["peak_reserved_bytes"], *peak);
        worst = worst.max(u(peak));
    }
    assert_eq!(u(&w["worst_peak_reserved_bytes"]), worst);
    assert!(worst <= u(&w["recorded_worst_peak_reserved_bytes"]));
    // The human form ends with the setting for every rank.
    let args: Vec<&str> = ["tune"].into_iter().chain(ranks.iter().map(|p| p.to_str().unwrap())).collect();
    let text = String::from_utf8(vramkit(&args).stdout).unwrap();
    assert!(text.contains(&format!("for every rank: PYTORCH_CUDA_ALLOC_CONF=\"{conf}\"")), "{text}");
}

#[test]
fn tune_text_shows_the_table_and_the_saving() {
    let p = repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle");
    let out = vramkit(&["tune", p.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(" rank  peak reserved  vs recorded  device calls  OOM   PYTORCH_CUDA_ALLOC_CONF"), "{text}");
    assert!(text.contains("<- recorded"), "{text}");
    assert!(text.contains("recommended: PYTORCH_CUDA_ALLOC_CONF=\""), "{text}");
    assert!(text.contains("saving: "), "{text}");
}

#[test]
fn doctor_reads_every_real_snapshot() {
    for p in snapshots() {
        let out = vramkit(&["doctor", p.to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Where the reserved memory goes:"), "{}: {text}", p.display());
        let v = json(&vramkit(&["doctor", "--json", p.to_str().unwrap()]));
        let d = if v.get("devices").is_some() { &v["devices"][0] } else { &v };
        let m = &d["memory"];
        let parts = ["requested_bytes", "rounding_bytes", "pending_free_bytes", "free_in_partly_used_segments_bytes", "free_segments_bytes"];
        assert_eq!(parts.iter().map(|k| u(&m[*k])).sum::<u64>(), u(&m["reserved_bytes"]), "{}", p.display());
        let file = vramkit_trace::read_snapshot(&p).unwrap();
        let reserved: u64 = file.snapshot.segments.iter().filter(|s| s.device == d["device"].as_i64().unwrap()).map(|s| s.total_size).sum();
        assert_eq!(u(&m["reserved_bytes"]), reserved);
        let has_events = p.to_string_lossy().contains("cs336");
        assert_eq!(!d["recommendation"].is_null(), has_events, "{}", p.display());
        if has_events {
            assert!(text.contains("Replaying the trace under"), "{text}");
        } else {
            assert!(text.contains("No settings can be compared without allocation events"), "{text}");
        }
    }
}

#[test]
fn doctor_names_allocation_sites_from_frames() {
    let p = repo().join("data/traces/pytorch_snapshots/sketchkv2__my_snapshot.pickle");
    let text = String::from_utf8(vramkit(&["doctor", p.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("Allocation sites holding the most memory:"), "{text}");
    assert!(text.contains("update_new (models/cache_utils_V2.py:225)"), "{text}");
    assert!(text.contains("strand the most free space"), "{text}");
}

/// A snapshot whose trace ends in an out-of-memory error, recorded on a 1 GiB device.
fn oom_snapshot(dir: &Path) -> PathBuf {
    use vramkit_core::{AllocatorConfig, CachingAllocator, HistoryConfig, StreamId};
    let mut a = CachingAllocator::new(vramkit_sim::SimDevice::new(1 << 30), AllocatorConfig::pytorch_default());
    a.record_history(Some(HistoryConfig::default()));
    // One 1000 MiB segment cut into ten 100 MiB tensors, every other one
    // freed: 500 MiB free in the cache, in 100 MiB holes of a segment that
    // cannot be released, and 24 MiB left on the device.
    let whole = a.malloc(1000 << 20, StreamId(0)).unwrap();
    a.free(whole).unwrap();
    let live: Vec<_> = (0..10).map(|_| a.malloc(100 << 20, StreamId(0)).unwrap()).collect();
    for p in live.iter().step_by(2) {
        a.free(*p).unwrap();
    }
    assert!(a.malloc(300 << 20, StreamId(0)).is_err());
    let path = dir.join("oom.json");
    let file = vramkit_trace::SnapshotFile::from_snapshot(a.snapshot());
    vramkit_trace::write_json(&file, std::fs::File::create(&path).unwrap()).unwrap();
    path
}

#[test]
fn doctor_explains_an_out_of_memory_error() {
    let dir = temp_dir("oom");
    let path = oom_snapshot(&dir);
    let out = vramkit(&["doctor", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Out of memory at trace entry"), "{text}");
    assert!(text.contains("the program asked for 300.00 MiB"), "{text}");
    assert!(text.contains("the failure is fragmentation"), "{text}");
    let v = json(&vramkit(&["doctor", "--json", path.to_str().unwrap()]));
    let oom = &v["oom"];
    assert_eq!(u(&oom["requested_bytes"]), 300 << 20);
    assert!(!oom["reproduced"].is_null(), "vramkit fails the same request: {oom}");
    // tune ranks settings against the capacity the trace implies.
    let t = json(&vramkit(&["tune", "--json", path.to_str().unwrap()]));
    assert_eq!(t["capacity_source"], "inferred from the trace");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn report_writes_one_self_contained_page() {
    let dir = temp_dir("report");
    for name in ["cs336_silmont2000__mem_snapshot", "verl__mem"] {
        let src = repo().join(format!("data/traces/pytorch_snapshots/{name}.pickle"));
        let page = dir.join(format!("{name}.html"));
        let out = vramkit(&["report", src.to_str().unwrap(), "-o", page.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
        assert!(!html.contains("<script"), "{name}");
        assert!(!html.contains("<link") && !html.contains("@import") && !html.contains("src="), "{name}: nothing is loaded");
        assert_eq!(html.matches("http").count(), html.matches("http://www.w3.org/2000/svg").count(), "{name}");
        assert!(html.contains(r#"<svg id="segment-map-recorded""#), "{name}");
        assert!(html.contains(r#"<section id="doctor">"#), "{name}");
        if name.starts_with("cs336") {
            assert!(html.contains(r#"<svg id="timeline""#));
            assert!(html.contains(r#"data-series="reserved, recommended""#));
            assert!(html.contains("max_split_size_mb:32"));
            assert!(html.contains(r#"<section id="tune"><h2>Settings tried</h2><table>"#));
        } else {
            assert!(html.contains("state only"));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn report_renders_in_headless_chromium_when_present() {
    // Skips (the script exits 0 with a note) where no chromium is installed.
    let shots = temp_dir("shots");
    let out = Command::new("bash")
        .arg(repo().join("scripts/check_report.sh"))
        .env("VRAMKIT", env!("CARGO_BIN_EXE_vramkit"))
        .env("SCREENSHOT_DIR", &shots)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&shots).ok();
}

#[test]
fn bad_input_to_the_new_commands_exits_2() {
    let state_only = repo().join("data/traces/pytorch_snapshots/verl__mem.pickle");
    let trace = repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle");
    let dir = temp_dir("bad-new");
    let cases: Vec<Vec<String>> = vec![
        vec!["tune".into(), state_only.display().to_string()],
        vec!["tune".into(), "--capacity".into(), "lots".into(), trace.display().to_string()],
        vec!["doctor".into(), dir.join("missing.pickle").display().to_string()],
        vec!["report".into(), trace.display().to_string(), "-o".into(), dir.join("no/such/dir/r.html").display().to_string()],
        vec!["report".into(), "--device".into(), "7".into(), trace.display().to_string(), "-o".into(), dir.join("r.html").display().to_string()],
    ];
    for args in cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = vramkit(&refs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("vramkit: "), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

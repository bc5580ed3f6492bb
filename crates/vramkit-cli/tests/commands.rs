use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn snapshots() -> Vec<PathBuf> {
    let dir = repo().join("data/traces/pytorch_snapshots");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "pickle")).collect();
    v.sort();
    v.push(repo().join("data/traces/json/cs336_silmont2000__mem_snapshot.json"));
    v
}

/// The traces whose device trace holds allocations.
fn with_events() -> Vec<PathBuf> {
    snapshots().into_iter().filter(|p| p.to_string_lossy().contains("cs336")).collect()
}

fn vramkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramkit")).args(args).output().expect("the binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn verify_is_exact_on_every_real_trace_with_events() {
    for p in with_events() {
        let v = json(&vramkit(&["verify", "--json", p.to_str().unwrap()]));
        assert_eq!(v["match_rate"], 1.0, "{}: {v}", p.display());
        assert_eq!(v["segment_events_identical"], true, "{}", p.display());
        assert_eq!(v["end_state_identical"], true, "{}", p.display());
        assert_eq!(v["first_divergence"], serde_json::Value::Null);
        assert!(v["alloc_events"].as_u64().unwrap() > 0);
    }
}

#[test]
fn verify_names_the_rules_it_followed() {
    let bcrafton = repo().join("data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle");
    let path = bcrafton.to_str().unwrap();
    // Written by torch 2.10 to 2.12 (user_metadata, no max_round_threshold):
    // 2.12's rules are tried first, 2.11's verify.
    let v = json(&vramkit(&["verify", "--json", path]));
    assert_eq!(v["pytorch_rules"], "2.11");
    assert!(v["rules"].as_str().unwrap().contains("the snapshot's keys say torch 2.10 to 2.12; also tried 2.12's"), "{v}");
    let given = json(&vramkit(&["verify", "--json", "--pytorch", "2.4", path]));
    assert_eq!(given["pytorch_rules"], "2.4");
    assert!(given["rules"].as_str().unwrap().contains("(--pytorch)"));
    let out = vramkit(&["verify", "--pytorch", "two", path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pytorch \"two\" is not a PyTorch release; give major.minor"));
    let out = vramkit(&["verify", "--fraction", "1.5", "--capacity", "8GiB", path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fraction 1.5: a memory fraction is above 0 and at most 1"));
}

#[test]
fn oracle_peak_reserved_is_the_running_sum_of_segment_events() {
    for p in with_events() {
        let file = vramkit_trace::read_snapshot(&p).unwrap();
        let config = file.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
        let trace = &vramkit_replay::DeviceTrace::split(&file.snapshot)[0];
        let start = vramkit_replay::rebuild_start(trace, &config).unwrap();
        let mut reserved: u64 = start.segments.iter().map(|s| s.total_size).sum();
        let mut peak = reserved;
        for e in &trace.events {
            match e.action {
                vramkit_core::TraceAction::SegmentAlloc => reserved += e.size,
                vramkit_core::TraceAction::SegmentFree => reserved -= e.size,
                _ => {}
            }
            peak = peak.max(reserved);
        }
        let v = json(&vramkit(&["replay", "--oracle", "--json", p.to_str().unwrap()]));
        assert_eq!(v["mode"], "oracle");
        assert_eq!(v["peak_reserved_bytes"].as_u64().unwrap(), peak, "{}", p.display());
        // The oracle's end reserved must equal the snapshot's own segments.
        let end: u64 = trace.end_segments.iter().map(|s| s.total_size).sum();
        assert_eq!(reserved, end, "{}", p.display());
    }
}

#[test]
fn model_replay_under_recorded_settings_matches_the_oracle() {
    for p in with_events() {
        let o = json(&vramkit(&["replay", "--oracle", "--json", p.to_str().unwrap()]));
        let m = json(&vramkit(&["replay", "--json", p.to_str().unwrap()]));
        for key in ["peak_reserved_bytes", "peak_allocated_bytes", "peak_requested_bytes", "events"] {
            assert_eq!(m[key], o[key], "{} {key}", p.display());
        }
        assert_eq!(m["first_oom_event"], serde_json::Value::Null);
        assert_eq!(m["capacity_source"], "unlimited");
        assert!(m["lower_bound_bytes"].as_u64() <= m["peak_reserved_bytes"].as_u64());
    }
}

#[test]
fn replay_under_other_settings_and_capacity() {
    for p in with_events() {
        for conf in ["expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:4", "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9"] {
            let v = json(&vramkit(&["replay", "--json", "--conf", conf, p.to_str().unwrap()]));
            assert_eq!(v["conf"], conf);
            assert!(v["peak_reserved_bytes"].as_u64() >= v["lower_bound_bytes"].as_u64(), "{} {conf}: {v}", p.display());
        }
        // A capacity far below the start state's reserved memory: the first
        // allocation that needs new memory fails.
        let v = json(&vramkit(&["replay", "--json", "--capacity", "1GiB", "--conf", "expandable_segments:True", p.to_str().unwrap()]));
        assert_eq!(v["capacity_bytes"], 1u64 << 30);
        assert_eq!(v["capacity_source"], "given");
    }
}

#[test]
fn summary_reads_every_real_snapshot() {
    for p in snapshots() {
        let out = vramkit(&["summary", p.to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("|===="), "{}", p.display());
        let v = json(&vramkit(&["summary", "--json", p.to_str().unwrap()]));
        let stats = if v.get("devices").is_some() { &v["devices"][0]["memory_stats"] } else { &v["memory_stats"] };
        assert_eq!(stats.as_object().unwrap().len(), 123, "{}", p.display());
    }
}

#[test]
fn convert_round_trips_and_verify_still_passes() {
    let dir = std::env::temp_dir().join(format!("vramkit-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle");
    let as_json = dir.join("s.json");
    let back = dir.join("s.pickle");
    assert!(vramkit(&["convert", src.to_str().unwrap(), as_json.to_str().unwrap()]).status.success());
    assert!(vramkit(&["convert", as_json.to_str().unwrap(), back.to_str().unwrap()]).status.success());
    let a = vramkit_trace::read_snapshot(&src).unwrap();
    let b = vramkit_trace::read_snapshot(&back).unwrap();
    assert_eq!(a.snapshot, b.snapshot);
    assert!(vramkit(&["verify", back.to_str().unwrap()]).status.success());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("vramkit-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.pickle");
    std::fs::write(&empty, b"").unwrap();
    let junk = dir.join("junk.pickle");
    std::fs::write(&junk, b"\x80\x04\x95garbage that is not a pickle").unwrap();
    let trace = repo().join("data/traces/json/cs336_silmont2000__mem_snapshot.json");
    let cases: Vec<Vec<String>> = vec![
        vec!["verify".into(), dir.join("missing.pickle").display().to_string()],
        vec!["verify".into(), dir.display().to_string()],
        vec!["summary".into(), empty.display().to_string()],
        vec!["replay".into(), junk.display().to_string()],
        vec!["replay".into(), "--conf".into(), "max_split_size_mb:5".into(), trace.display().to_string()],
        vec!["replay".into(), "--conf".into(), "bogus_key:1".into(), trace.display().to_string()],
        vec!["replay".into(), "--capacity".into(), "lots".into(), trace.display().to_string()],
        vec!["convert".into(), trace.display().to_string(), dir.join("out.txt").display().to_string()],
    ];
    for args in cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = vramkit(&refs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("vramkit: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn verify_fails_with_exit_1_when_the_trace_disagrees() {
    // Move one allocation in the trace: verify must notice and exit 1.
    let src = repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle");
    let mut file = vramkit_trace::read_snapshot(&src).unwrap();
    let e = file.snapshot.device_traces[0].iter_mut().rev().find(|e| e.action == vramkit_core::TraceAction::Alloc).unwrap();
    e.addr += 512;
    let dir = std::env::temp_dir().join(format!("vramkit-cli-edit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let edited = dir.join("edited.json");
    vramkit_trace::write_json(&file, std::fs::File::create(&edited).unwrap()).unwrap();
    let out = vramkit(&["verify", edited.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("first divergence"));
    std::fs::remove_dir_all(&dir).ok();
}

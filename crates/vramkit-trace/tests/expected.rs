//! Every real snapshot checked against `EXPECTED.json` (computed with
//! CPython's `pickle`, independently of this reader).

use crate::common::{expected, snapshot_files};
use serde_json::{json, Value as Json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use vramkit_core::snapshot::{BlockState, TraceAction, TraceEntry};
use vramkit_core::PoolKind;
use vramkit_trace::{read_snapshot, SnapshotFile, SnapshotFormat};

fn set(json: &Json) -> BTreeSet<String> {
    json.as_array().expect("a list").iter().map(|v| v.as_str().expect("a str").to_owned()).collect()
}

fn format_name(format: SnapshotFormat) -> &'static str {
    match format {
        SnapshotFormat::Legacy => "legacy (blocks carry 'history', no 'segment_pool_id'/'frames')",
        SnapshotFormat::Current => "current",
        other => other.as_str(),
    }
}

/// The per-device final state, in EXPECTED.json's terms.
fn final_state(file: &SnapshotFile) -> Json {
    let has_pool_ids = file.keys.as_ref().is_some_and(|k| k.segment.contains("segment_pool_id"));
    let mut per_device: BTreeMap<String, Json> = BTreeMap::new();
    let devices: BTreeSet<i64> = file.snapshot.segments.iter().map(|s| s.device).collect();
    for device in devices {
        let segments: Vec<_> = file.snapshot.segments.iter().filter(|s| s.device == device).collect();
        let blocks = || segments.iter().flat_map(|s| s.blocks.iter());
        let mut pool_ids: BTreeMap<String, u64> = BTreeMap::new();
        for segment in &segments {
            let name = if has_pool_ids {
                format!("({}, {})", segment.segment_pool_id.0, segment.segment_pool_id.1)
            } else {
                "absent".to_owned()
            };
            *pool_ids.entry(name).or_default() += 1;
        }
        let state_count = |state: BlockState| blocks().filter(|b| b.state == state).count();
        let state_bytes = |state: BlockState| blocks().filter(|b| b.state == state).map(|b| b.size).sum::<u64>();
        per_device.insert(
            device.to_string(),
            json!({
                "active_allocated_blocks": state_count(BlockState::ActiveAllocated),
                "active_allocated_bytes": state_bytes(BlockState::ActiveAllocated),
                "active_pending_free_blocks": state_count(BlockState::ActivePendingFree),
                "blocks": blocks().count(),
                "expandable_segments": segments.iter().filter(|s| s.is_expandable).count(),
                "inactive_bytes": state_bytes(BlockState::Inactive),
                "large_segments": segments.iter().filter(|s| s.segment_type == PoolKind::Large).count(),
                "pool_ids": pool_ids,
                "reserved_bytes": segments.iter().map(|s| s.total_size).sum::<u64>(),
                "segments": segments.len(),
                "small_segments": segments.iter().filter(|s| s.segment_type == PoolKind::Small).count(),
            }),
        );
    }
    json!(per_device)
}

/// Per-device trace statistics, in EXPECTED.json's terms (non-empty traces only).
fn trace_stats(file: &SnapshotFile) -> Json {
    let entry_keys: Vec<String> = file.keys.as_ref().map(|k| k.entry.iter().cloned().collect()).unwrap_or_default();
    let mut out = Vec::new();
    for (device, trace) in file.snapshot.device_traces.iter().enumerate() {
        if trace.is_empty() {
            continue;
        }
        let mut actions: BTreeMap<&str, u64> = BTreeMap::new();
        for entry in trace {
            *actions.entry(entry.action.as_str()).or_default() += 1;
        }
        let sizes = trace.iter().map(|e| e.size);
        let times: Vec<u64> = trace.iter().filter_map(|e| e.time_us).collect();
        let segment_bytes =
            |action: TraceAction| trace.iter().filter(|e| e.action == action).map(|e| i128::from(e.size)).sum::<i128>();
        let (peak, live_at_end, orphans) = replay_from_zero(trace);
        out.push(json!({
            "actions": actions,
            "device": device,
            "distinct_streams": trace.iter().map(|e| e.stream).collect::<BTreeSet<_>>().len(),
            "entries": trace.len(),
            "entry_keys": entry_keys,
            "free_completed_without_alloc_in_window": orphans,
            "max_size": sizes.clone().max(),
            "min_size": sizes.min(),
            "net_segment_bytes_change": segment_bytes(TraceAction::SegmentAlloc) - segment_bytes(TraceAction::SegmentFree),
            "replay_live_requested_bytes_at_end_from_zero": live_at_end,
            "replay_peak_live_requested_bytes_from_zero": peak,
            "sum_alloc_requested_bytes": trace.iter().filter(|e| e.action == TraceAction::Alloc).map(|e| e.size).sum::<u64>(),
            "time_us_first": times.first(),
            "time_us_last": times.last(),
        }));
    }
    json!(out)
}

/// Live requested bytes replayed from an empty start: (peak, at end,
/// `free_completed` of addresses never allocated in the window).
fn replay_from_zero(trace: &[TraceEntry]) -> (u64, u64, u64) {
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut bytes, mut peak, mut orphans) = (0u64, 0u64, 0u64);
    for entry in trace {
        match entry.action {
            TraceAction::Alloc => {
                live.insert(entry.addr, entry.size);
                bytes += entry.size;
                peak = peak.max(bytes);
            }
            TraceAction::FreeCompleted => match live.remove(&entry.addr) {
                Some(size) => bytes -= size,
                None => orphans += 1,
            },
            _ => {}
        }
    }
    (peak, bytes, orphans)
}

fn settings_json(file: &SnapshotFile) -> Option<Json> {
    let settings = file.allocator_settings.as_ref()?;
    let mut map = serde_json::Map::new();
    let mut put = |key: &str, value: Json| {
        map.insert(key.to_owned(), value);
    };
    if let Some(v) = &settings.pytorch_cuda_alloc_conf {
        put("PYTORCH_CUDA_ALLOC_CONF", json!(v));
    }
    if let Some(v) = settings.max_split_size {
        put("max_split_size", json!(v));
    }
    if let Some(v) = settings.garbage_collection_threshold {
        put("garbage_collection_threshold", json!(v));
    }
    if let Some(v) = settings.expandable_segments {
        put("expandable_segments", json!(v));
    }
    if let Some(v) = settings.pinned_num_register_threads {
        put("pinned_num_register_threads", json!(v));
    }
    if let Some(v) = settings.release_lock_on_cudamalloc {
        put("release_lock_on_cudamalloc", json!(v));
    }
    if let Some(v) = settings.pinned_use_cuda_host_register {
        put("pinned_use_cuda_host_register", json!(v));
    }
    if let Some(v) = settings.graph_capture_record_stream_reuse {
        put("graph_capture_record_stream_reuse", json!(v));
    }
    if let Some(table) = &settings.roundup_power2_divisions {
        let table: serde_json::Map<String, Json> = table.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        put("roundup_power2_divisions", Json::Object(table));
    }
    assert!(settings.other.is_empty(), "no unknown settings keys in the real files");
    Some(Json::Object(map))
}

#[test]
fn every_real_snapshot_matches_expected_json() {
    let expected = expected();
    let files = snapshot_files();
    assert_eq!(files.len(), expected.as_object().expect("a dict").len(), "one EXPECTED entry per file");
    for path in files {
        let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8 name").to_owned();
        let want = &expected[&name];
        assert!(want.is_object(), "{name} is in EXPECTED.json");
        let file = read_snapshot(&path).unwrap_or_else(|e| panic!("{e}"));
        let keys = file.keys.as_ref().expect("keys recorded");

        assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), want["bytes"].as_u64(), "{name}: bytes");
        assert_eq!(file.pickle_protocol.map(u64::from), want["pickle_protocol"].as_u64(), "{name}: protocol");
        assert_eq!(json!(format_name(file.format)), want["format"], "{name}: format");
        assert_eq!(keys.top, set(&want["top_level_keys"]), "{name}: top-level keys");
        assert_eq!(keys.segment, set(&want["segment_keys"]), "{name}: segment keys");
        assert_eq!(keys.block, set(&want["block_keys"]), "{name}: block keys");
        let lens: Vec<usize> = file.snapshot.device_traces.iter().map(Vec::len).collect();
        assert_eq!(json!(lens), want["device_traces_len"], "{name}: device_traces_len");
        assert_eq!(final_state(&file), want["final_state_per_device"], "{name}: final state");
        assert_eq!(trace_stats(&file), want["device_traces"], "{name}: device traces");
        assert_eq!(settings_json(&file), want.get("allocator_settings").cloned(), "{name}: allocator_settings");
        assert!(file.skipped_entries.is_empty(), "{name}: every action is modelled");
        assert!(file.other.is_empty(), "{name}: no unknown top-level keys");
    }
}

#[test]
fn legacy_blocks_get_addresses_from_the_segment_and_keep_history() {
    let path = crate::common::traces_dir().join("pytorch_snapshots/flexgen_llm_inference__1.3b_snapshot.pickle");
    let file = read_snapshot(path).expect("reads");
    assert_eq!(file.format, SnapshotFormat::Legacy);
    let history = file.legacy_history.as_ref().expect("legacy history kept");
    for (s, segment) in file.snapshot.segments.iter().enumerate() {
        let mut next = segment.address;
        for (b, block) in segment.blocks.iter().enumerate() {
            assert_eq!(block.address, next, "blocks tile the segment");
            next += block.size;
            let entries = history.of(s, b);
            assert!(!entries.is_empty(), "every legacy block has a history");
            if block.state.is_active() {
                let latest = entries.last().expect("non-empty");
                assert_eq!(latest.addr, block.address, "an active block's latest allocation is at its address");
                assert_eq!(block.frames.as_ref(), latest.frames.as_ref(), "frames come from the latest allocation");
            } else {
                assert!(block.frames.is_none());
            }
        }
        assert_eq!(next, segment.address + segment.total_size, "blocks add up to total_size");
    }
}

#[test]
fn recorded_settings_become_a_core_config() {
    let path = crate::common::traces_dir().join("pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle");
    let file = read_snapshot(path).expect("reads");
    let settings = file.allocator_settings.as_ref().expect("recorded");
    assert_eq!(settings.pytorch_cuda_alloc_conf.as_deref(), Some(""));
    let config = settings.to_config();
    assert_eq!(config.max_split_size_bytes, None, "-1 is unlimited");
    assert_eq!(config.roundup_power2_divisions, [0; 16]);
    assert!(!config.expandable_segments);
    assert_eq!(config, vramkit_core::AllocatorConfig::pytorch_default(), "the defaults were recorded");
}

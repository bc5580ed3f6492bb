//! Snapshot-shape errors, unknown keys, generations, settings.

use crate::common::temp_path;
use vramkit_core::snapshot::{BlockState, TraceAction};
use vramkit_trace::{read_snapshot, read_snapshot_bytes, write_json, write_pickle, SnapshotFormat, TraceError, Value};

fn schema_error(text: &str) -> (String, String, String) {
    match read_snapshot_bytes(text.as_bytes()) {
        Err(TraceError::Schema { key_path, expected, found, .. }) => (key_path, expected, found),
        other => panic!("expected a schema error, got {other:?}"),
    }
}

const SEGMENT: &str = r#"{"device": 0, "address": 1048576, "total_size": 2097152, "allocated_size": 512,
    "active_size": 512, "requested_size": 100, "stream": 0, "segment_type": "small",
    "segment_pool_id": [0, 0], "is_expandable": false, "frames": [],
    "blocks": [{"address": 1048576, "size": 512, "requested_size": 100, "state": "active_allocated", "frames": []},
               {"address": 1049088, "size": 2096640, "requested_size": 0, "state": "inactive", "frames": []}]}"#;

#[test]
fn errors_name_the_key_path_what_was_expected_and_what_was_found() {
    let bad = SEGMENT.replace(r#""size": 2096640"#, r#""size": "big""#);
    let (path, expected, found) = schema_error(&format!(r#"{{"segments": [{SEGMENT}, {bad}], "device_traces": []}}"#));
    assert_eq!(path, "segments[1].blocks[1].size");
    assert_eq!(expected, "a non-negative int below 2^64");
    assert_eq!(found, r#"a str ("big")"#);

    let bad = SEGMENT.replace(r#""address": 1048576, "total_size""#, r#""total_size""#);
    let (path, _, found) = schema_error(&format!(r#"{{"segments": [{bad}]}}"#));
    assert_eq!((path.as_str(), found.as_str()), ("segments[0].address", "no such key"));

    let (path, expected, _) = schema_error(
        r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": -5, "size": 1, "stream": 0}]]}"#,
    );
    assert_eq!((path.as_str(), expected.as_str()), ("device_traces[0][0].addr", "a non-negative int below 2^64"));

    let (path, _, found) = schema_error(r#"{"device_traces": []}"#);
    assert_eq!((path.as_str(), found.as_str()), ("segments", "no such key"));

    match read_snapshot_bytes(b"\x80\x04\x8c\x05hello.") {
        Err(TraceError::Schema { key_path, expected, .. }) => {
            assert_eq!((key_path.as_str(), expected.as_str()), ("<root>", "a dict or a list of segments"));
        }
        other => panic!("{other:?}"),
    }
    let (path, expected, _) = schema_error("[1]");
    assert_eq!((path.as_str(), expected.as_str()), ("[0]", "a dict"));

    let bad = SEGMENT.replace(r#""state": "inactive""#, r#""state": "gone""#);
    let (path, _, found) = schema_error(&format!(r#"{{"segments": [{bad}]}}"#));
    assert_eq!((path.as_str(), found.as_str()), ("segments[0].blocks[1].state", r#"a str ("gone")"#));

    // From a file, the message starts with the path.
    let file = temp_path("schema.json");
    std::fs::write(&file, format!(r#"{{"segments": [{}]}}"#, SEGMENT.replace("\"small\"", "\"medium\"")))
        .expect("written");
    let err = read_snapshot(&file).expect_err("bad segment_type");
    let _ = std::fs::remove_file(&file);
    let text = err.to_string();
    assert!(text.starts_with(&file.display().to_string()), "{text}");
    assert!(
        text.contains("segments[0].segment_type: expected \"small\" or \"large\", found a str (\"medium\")"),
        "{text}"
    );
}

#[test]
fn unknown_keys_are_kept_or_ignored_never_fatal() {
    let seg = SEGMENT.replace(r#""device": 0,"#, r#""device": 0, "new_segment_key": 1,"#);
    let text = format!(
        r#"{{"segments": [{seg}], "device_traces": [[
            {{"action": "alloc", "addr": 1048576, "size": 100, "stream": 0, "category": "x"}},
            {{"action": "workspace_snapshot", "addr": 0, "size": 7, "stream": 0}},
            {{"action": "oom", "device_free": 4096, "size": 2097152, "stream": 0, "time_us": 5}}
        ]], "host_segments": [{{"a": [1, 2]}}], "allocator_settings": {{"brand_new": true, "max_split_size": -1}}}}"#
    );
    let file = read_snapshot_bytes(text.as_bytes()).expect("reads");
    assert_eq!(file.format, SnapshotFormat::Current);
    let keys = file.keys.as_ref().expect("keys");
    assert!(keys.segment.contains("new_segment_key") && keys.entry.contains("category"));
    assert_eq!(file.other.len(), 1);
    assert_eq!(file.other[0].0, "host_segments");
    let settings = file.allocator_settings.as_ref().expect("settings");
    assert_eq!(settings.other, vec![("brand_new".to_owned(), Value::Bool(true))]);
    let trace = &file.snapshot.device_traces[0];
    assert_eq!(trace.iter().map(|e| e.action).collect::<Vec<_>>(), [TraceAction::Alloc, TraceAction::Oom]);
    assert_eq!(trace[1].addr, 4096, "oom keeps device_free in addr");
    assert_eq!(file.skipped_entries.len(), 1);
    assert_eq!((file.skipped_entries[0].device, file.skipped_entries[0].index), (0, 1));

    // Written again, the unknown action and the unknown top-level key come back in place.
    let mut out = Vec::new();
    write_pickle(&file, &mut out).expect("writes");
    let again = read_snapshot_bytes(&out).expect("reads back");
    assert_eq!(again.skipped_entries, file.skipped_entries);
    assert_eq!(again.other, file.other);
    assert_eq!(again.snapshot, file.snapshot);
    assert_eq!(again.allocator_settings, file.allocator_settings);
}

#[test]
fn recorded_settings_map_to_the_core_config() {
    let text = r#"{"segments": [], "device_traces": [], "allocator_settings": {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512",
        "max_split_size": 536870912, "garbage_collection_threshold": 0.6, "expandable_segments": true,
        "pinned_num_register_threads": 8, "release_lock_on_cudamalloc": true,
        "pinned_use_cuda_host_register": true, "graph_capture_record_stream_reuse": true,
        "roundup_power2_divisions": {"1": 4, "2": 8, "4": 0, "32768": 2}}}"#;
    let file = read_snapshot_bytes(text.as_bytes()).expect("reads");
    let settings = file.allocator_settings.as_ref().expect("settings");
    assert_eq!(settings.pytorch_cuda_alloc_conf.as_deref(), Some("expandable_segments:True,max_split_size_mb:512"));
    let config = settings.to_config();
    assert_eq!(config.max_split_size_bytes, Some(512 << 20));
    assert_eq!(config.garbage_collection_threshold, 0.6);
    assert!(config.expandable_segments && config.release_lock_on_cudamalloc);
    assert!(config.pinned_use_cuda_host_register && config.graph_capture_record_stream_reuse);
    assert_eq!(config.pinned_num_register_threads, 8);
    let mut table = [0; 16];
    table[0] = 4;
    table[1] = 8;
    table[15] = 2;
    assert_eq!(config.roundup_power2_divisions, table);

    let (path, expected, _) =
        schema_error(r#"{"segments": [], "allocator_settings": {"roundup_power2_divisions": {"big": 1}}}"#);
    assert_eq!(path, "allocator_settings.roundup_power2_divisions.big");
    assert!(expected.contains("size class"), "{expected}");
}

#[test]
fn legacy_blocks_without_requested_size_take_it_from_history() {
    let text = r#"{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "allocated_size": 512,
        "active_size": 512, "stream": 0, "segment_type": "small",
        "blocks": [
            {"size": 512, "state": "active_allocated", "history": [
                {"addr": 4096, "real_size": 10, "frames": [{"filename": "old.py", "line": 1, "name": "f"}]},
                {"addr": 4096, "real_size": 300, "frames": [{"filename": "new.py", "line": 2, "name": "g"}]}]},
            {"size": 2096640, "state": "inactive", "history": [{"addr": 4608, "real_size": 7}]}]}],
        "device_traces": [[{"action": "snapshot", "addr": 0, "size": 512, "stream": 0}]]}"#;
    let file = read_snapshot_bytes(text.as_bytes()).expect("reads");
    assert_eq!(file.format, SnapshotFormat::Legacy);
    let blocks = &file.snapshot.segments[0].blocks;
    assert_eq!((blocks[0].address, blocks[0].requested_size), (4096, 300), "latest history entry");
    assert_eq!(blocks[0].frames.as_ref().map(|f| f[0].filename.as_str()), Some("new.py"));
    assert_eq!((blocks[1].address, blocks[1].requested_size, blocks[1].state), (4608, 0, BlockState::Inactive));
    assert_eq!(file.snapshot.segments[0].requested_size, 300, "summed from the active blocks");
    let history = file.legacy_history.as_ref().expect("kept");
    assert_eq!(history.of(0, 0).len(), 2);
    assert_eq!(history.of(0, 1)[0].real_size, 7);

    for json in [false, true] {
        let mut out = Vec::new();
        if json {
            write_json(&file, &mut out).expect("writes");
        } else {
            write_pickle(&file, &mut out).expect("writes");
        }
        let again = read_snapshot_bytes(&out).expect("reads back");
        assert_eq!(again.snapshot, file.snapshot);
        assert_eq!(again.legacy_history, file.legacy_history);
        assert_eq!(again.format, SnapshotFormat::Legacy);
    }
}

#[test]
fn unknown_content_is_refused_by_sniffing() {
    for (bytes, what) in [(&b""[..], "an empty file"), (b"PK\x03\x04", "first bytes 50 4b 03 04")] {
        match read_snapshot_bytes(bytes) {
            Err(TraceError::UnknownFormat { found, .. }) => assert!(found.contains(what), "{found}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(read_snapshot_bytes(b"\xEF\xBB\xBF  \n [] ").is_ok(), "BOM and blanks before JSON are fine");
}

#[test]
fn one_object_used_in_two_roles_is_an_error_not_a_mixup() {
    // The writer memoizes by identity, so the same dict is referenced twice:
    // once as a frame, once where a frames list belongs.
    let frame = Value::dict(vec![
        (Value::str("filename"), Value::str("a.py")),
        (Value::str("line"), Value::int(1)),
        (Value::str("name"), Value::str("f")),
    ]);
    let entry = |frames: Value| {
        Value::dict(vec![
            (Value::str("action"), Value::str("alloc")),
            (Value::str("addr"), Value::int(512)),
            (Value::str("size"), Value::int(4)),
            (Value::str("stream"), Value::int(0)),
            (Value::str("frames"), frames),
        ])
    };
    let doc = Value::dict(vec![
        (Value::str("segments"), Value::list(vec![])),
        (
            Value::str("device_traces"),
            Value::list(vec![Value::list(vec![entry(Value::list(vec![frame.clone()])), entry(frame)])]),
        ),
    ]);
    let bytes = vramkit_trace::pickle::write::to_vec(&doc).expect("writes");
    match read_snapshot_bytes(&bytes) {
        Err(TraceError::Schema { key_path, expected, .. }) => {
            assert_eq!((key_path.as_str(), expected.as_str()), ("device_traces[0][1].frames", "a list of frames"));
        }
        other => panic!("{other:?}"),
    }
    // A key string reused as a value where a list belongs.
    let doc = Value::dict(vec![(Value::str("segments"), Value::str("segments"))]);
    let bytes = vramkit_trace::pickle::write::to_vec(&doc).expect("writes");
    assert!(matches!(read_snapshot_bytes(&bytes), Err(TraceError::Schema { .. })));
}

#[test]
fn recorded_settings_pick_the_allocator_generation() {
    use vramkit_core::config::Compat;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/pytorch_snapshots");
    let newer = vramkit_trace::read_snapshot(dir.join("cs336_bcrafton__memory_snapshot.pickle")).unwrap();
    let older = vramkit_trace::read_snapshot(dir.join("cs336_silmont2000__mem_snapshot.pickle")).unwrap();
    assert_eq!(newer.allocator_settings.unwrap().to_config().compat, Compat::R26);
    assert_eq!(older.allocator_settings.unwrap().to_config().compat, Compat::R24);
}

#[test]
fn a_setting_that_is_not_a_finite_float_is_refused() {
    // Found by the `snapshot` fuzz target: a NaN threshold read fine, and
    // `vramkit convert` then wrote it to JSON as `null`, which did not read
    // back. PyTorch never records one; refuse it where it is read.
    for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let settings = Value::dict(vec![(Value::str("garbage_collection_threshold"), Value::Float(x))]);
        let file = Value::dict(vec![
            (Value::str("segments"), Value::list(vec![])),
            (Value::str("device_traces"), Value::list(vec![])),
            (Value::str("allocator_settings"), settings),
        ]);
        let bytes = vramkit_trace::pickle::write::to_vec(&file).unwrap();
        match read_snapshot_bytes(&bytes) {
            Err(TraceError::Schema { key_path, expected, .. }) => {
                assert_eq!(key_path, "allocator_settings.garbage_collection_threshold");
                assert_eq!(expected, "a finite float");
            }
            other => panic!("{x}: expected a schema error, got {other:?}"),
        }
    }
}

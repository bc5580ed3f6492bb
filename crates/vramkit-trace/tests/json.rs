//! JSON input and output.

use crate::common::traces_dir;
use vramkit_trace::{read_snapshot, read_snapshot_bytes, SnapshotFile, TraceError};

#[test]
fn the_shared_json_conversion_reads_like_its_pickle() {
    let dir = traces_dir();
    let from_json = read_snapshot(dir.join("json/cs336_silmont2000__mem_snapshot.json")).expect("reads JSON");
    let from_pickle =
        read_snapshot(dir.join("pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle")).expect("reads pickle");
    assert_eq!(from_json.pickle_protocol, None);
    // Tuples were written as lists; they read back as the same pool ids.
    assert_eq!(SnapshotFile { pickle_protocol: Some(4), ..from_json }, from_pickle);
}

#[test]
fn json_is_sniffed_by_content_not_extension() {
    let text = br#"
        {"segments": [], "device_traces": [[{"action": "oom", "device_free": 1024, "size": 2097152, "stream": 0}]]}"#;
    let file = read_snapshot_bytes(text).expect("reads");
    let oom = &file.snapshot.device_traces[0][0];
    assert_eq!(oom.action, vramkit_core::snapshot::TraceAction::Oom);
    assert_eq!(oom.addr, 1024, "device_free is kept in addr");
    let mut out = Vec::new();
    vramkit_trace::write_json(&file, &mut out).expect("writes");
    let written = String::from_utf8(out).expect("utf-8");
    assert!(written.contains(r#""device_free":1024"#) && !written.contains(r#""addr""#), "{written}");
}

#[test]
fn a_top_level_list_is_a_segment_list() {
    let text = br#"[{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "segment_type": "small",
        "blocks": [{"size": 512, "requested_size": 4, "state": "active_allocated"},
                   {"size": 2096640, "requested_size": 0, "state": "inactive"}]}]"#;
    let file = read_snapshot_bytes(text).expect("reads");
    assert_eq!(file.format, vramkit_trace::SnapshotFormat::SegmentList);
    let segment = &file.snapshot.segments[0];
    assert_eq!(segment.blocks[1].address, 4096 + 512, "addresses follow the sizes");
    assert_eq!((segment.allocated_size, segment.active_size, segment.requested_size), (512, 512, 4), "sums computed");
    assert!(file.snapshot.device_traces.is_empty());
    let mut out = Vec::new();
    vramkit_trace::write_json(&file, &mut out).expect("writes");
    assert_eq!(out.first(), Some(&b'['), "written back as a list");
    assert_eq!(read_snapshot_bytes(&out).expect("reads back"), file);
}

#[test]
fn bad_json_names_line_and_column() {
    let err = read_snapshot_bytes(b"{\"segments\": [\n  1,\n  }").expect_err("invalid");
    assert!(matches!(err, TraceError::Json { line: 3, .. }), "{err:?}");
}

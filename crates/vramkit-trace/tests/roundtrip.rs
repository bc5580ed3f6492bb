//! Read -> write -> read gives the same model, for every real file, in
//! pickle and in JSON; CPython loads what we write.

use crate::common::{python3, snapshot_files, temp_path, traces_dir};
use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use vramkit_trace::{
    read_snapshot, read_snapshot_bytes, write_json, write_pickle, write_pickle_protocol, SnapshotFile,
};

fn pickle_bytes(file: &SnapshotFile) -> Vec<u8> {
    let mut out = Vec::new();
    write_pickle(file, &mut out).expect("writes");
    out
}

#[test]
fn pickle_round_trip_gives_an_equal_model() {
    for path in snapshot_files() {
        let file = read_snapshot(&path).expect("reads");
        let written = pickle_bytes(&file);
        let again = read_snapshot_bytes(&written).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(again, file, "{}", path.display());
        // Shared stacks stay shared, so the output stays about as small as the input.
        let original = std::fs::metadata(&path).expect("exists").len() as f64;
        assert!(
            (written.len() as f64) < original * 1.2,
            "{}: wrote {} bytes for {original}",
            path.display(),
            written.len()
        );
    }
}

#[test]
fn json_round_trip_gives_an_equal_model() {
    for path in snapshot_files() {
        let file = read_snapshot(&path).expect("reads");
        let mut text = Vec::new();
        write_json(&file, &mut text).expect("writes");
        let again = read_snapshot_bytes(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(again.pickle_protocol, None);
        assert_eq!(SnapshotFile { pickle_protocol: file.pickle_protocol, ..again }, file, "{}", path.display());
    }
}

#[test]
fn older_protocols_round_trip_too() {
    let path = traces_dir().join("pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle");
    let file = read_snapshot(path).expect("reads");
    for protocol in [2, 3] {
        let mut out = Vec::new();
        write_pickle_protocol(&file, protocol, &mut out).expect("writes");
        let again = read_snapshot_bytes(&out).expect("reads back");
        assert_eq!(again.pickle_protocol, Some(protocol));
        assert_eq!(SnapshotFile { pickle_protocol: Some(4), ..again }, file);
        if let Some(python) = python3() {
            // Every opcode must exist in the protocol written, and CPython must load it.
            let path = temp_path(&format!("protocol-{protocol}.pickle"));
            std::fs::write(&path, &out).expect("temp file written");
            let check = "import pickle, pickletools, sys\n\
                data = open(sys.argv[1], 'rb').read()\n\
                bad = [op.name for op, _, _ in pickletools.genops(data) if op.proto > int(sys.argv[2])]\n\
                assert not bad, bad\n\
                print(len(pickle.loads(data)['segments']))";
            let result =
                Command::new(python).arg("-c").arg(check).arg(&path).arg(protocol.to_string()).output().expect("runs");
            let _ = std::fs::remove_file(&path);
            assert!(result.status.success(), "protocol {protocol}: {}", String::from_utf8_lossy(&result.stderr));
            assert_eq!(String::from_utf8_lossy(&result.stdout).trim(), file.snapshot.segments.len().to_string());
        }
    }
    assert!(write_pickle_protocol(&file, 5, Vec::new()).is_err(), "the viewer cannot read protocol 5");
}

#[test]
fn shared_frames_are_one_allocation() {
    let path = traces_dir().join("pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle");
    for file in [
        read_snapshot(&path).expect("reads"),
        read_snapshot_bytes(&pickle_bytes(&read_snapshot(&path).expect("reads"))).expect("reads back"),
    ] {
        let trace = &file.snapshot.device_traces[0];
        let distinct: HashSet<*const ()> =
            trace.iter().filter_map(|e| e.frames.as_ref()).map(|f| Arc::as_ptr(f) as *const ()).collect();
        // CPython's pickle holds 4,324 distinct list objects here but only 142
        // distinct stacks; lists of the same frame objects share one Arc.
        assert!(distinct.len() <= 200, "{} distinct stacks for {} entries", distinct.len(), trace.len());
    }
}

#[test]
fn legacy_files_can_be_written_in_the_current_layout() {
    let path = traces_dir().join("pytorch_snapshots/flexgen_llm_inference__oom_snapshot.pickle");
    let file = read_snapshot(path).expect("reads");
    let current = file.clone().into_current_layout();
    let again = read_snapshot_bytes(&pickle_bytes(&current)).expect("reads back");
    assert_eq!(again.format, vramkit_trace::SnapshotFormat::Dict);
    assert_eq!(again.snapshot, file.snapshot, "the model survives the change of layout");
    let keys = again.keys.expect("keys");
    assert!(keys.block.contains("address") && keys.block.contains("frames") && !keys.block.contains("history"));
}

/// Loads with CPython and prints counts plus the set of opcodes used.
const PY_CHECK: &str = r#"
import pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
ops = sorted({op.name for op, _, _ in pickletools.genops(data)})
d = pickle.loads(data)
segs = d['segments'] if isinstance(d, dict) else d
traces = d.get('device_traces', []) if isinstance(d, dict) else []
blocks = sum(len(s['blocks']) for s in segs)
frames = sum(len(e.get('frames', ())) for t in traces for e in t)
pools = sorted({s['segment_pool_id'] for s in segs if 'segment_pool_id' in s})
print(len(segs), blocks, [len(t) for t in traces], frames, pools)
print(' '.join(ops))
"#;

/// Opcodes the pytorch.org/memory_viz viewer's parser accepts.
const VIEWER_OPCODES: [&str; 32] = [
    "PROTO",
    "FRAME",
    "MARK",
    "STOP",
    "EMPTY_DICT",
    "DICT",
    "SETITEM",
    "SETITEMS",
    "EMPTY_LIST",
    "LIST",
    "APPEND",
    "APPENDS",
    "EMPTY_TUPLE",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG1",
    "BINFLOAT",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINPUT",
    "LONG_BINPUT",
    "MEMOIZE",
    "BINGET",
    "LONG_BINGET",
];

#[test]
fn cpython_loads_what_we_write_and_the_viewer_knows_every_opcode() {
    let Some(python) = python3() else { return };
    for path in snapshot_files() {
        let file = read_snapshot(&path).expect("reads");
        let out = temp_path(&format!("cpython-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("x")));
        std::fs::write(&out, pickle_bytes(&file)).expect("temp file written");
        let result = Command::new(python).arg("-c").arg(PY_CHECK).arg(&out).output().expect("python3 runs");
        let _ = std::fs::remove_file(&out);
        assert!(result.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&result.stderr));
        let stdout = String::from_utf8_lossy(&result.stdout);
        let (counts, ops) = stdout.trim().split_once('\n').expect("two lines");
        let blocks: usize = file.snapshot.segments.iter().map(|s| s.blocks.len()).sum();
        let lens: Vec<usize> = file.snapshot.device_traces.iter().map(Vec::len).collect();
        let frames: usize =
            file.snapshot.device_traces.iter().flatten().map(|e| e.frames.as_ref().map_or(0, |f| f.len())).sum();
        let pools: std::collections::BTreeSet<(u64, u64)> = file
            .snapshot
            .segments
            .iter()
            .filter(|_| file.keys.as_ref().is_some_and(|k| k.segment.contains("segment_pool_id")))
            .map(|s| s.segment_pool_id)
            .collect();
        let pools: Vec<String> = pools.iter().map(|(a, b)| format!("({a}, {b})")).collect();
        // Pool ids print as tuples: they were written as tuples (a list could not be in a set).
        let expected =
            format!("{} {} {:?} {} [{}]", file.snapshot.segments.len(), blocks, lens, frames, pools.join(", "));
        assert_eq!(counts, expected, "{}: what CPython saw", path.display());
        for op in ops.split_whitespace() {
            assert!(VIEWER_OPCODES.contains(&op), "{}: wrote {op}, which the viewer refuses", path.display());
        }
    }
}

//! Trace entries the pickle reader puts straight into columns: the same
//! model as the generic path gives (JSON takes that one), streamed from a
//! file or read from bytes, whatever the window boundaries, `FRAME`s and
//! memo references to an entry's dict.

use crate::common::{small_snapshot, temp_path};
use std::sync::Arc;
use vramkit_core::snapshot::{Frame, Frames, Snapshot, TraceAction, TraceEntry};
use vramkit_trace::pickle::write::{to_vec, write_value};
use vramkit_trace::{read_snapshot_bytes, read_trace_file, read_trace_file_bytes, write_json, write_pickle_protocol, SnapshotFile, Value};

fn stack(name: &str, depth: usize) -> Frames {
    Arc::from((0..depth).map(|i| Frame { filename: format!("/w/{name}.py"), line: i as i64, name: format!("{name}{i}") }).collect::<Vec<_>>())
}

/// A trace long enough to cross the reader's 4 MiB window several times,
/// with every optional field here and there and every action.
fn long_trace(entries: usize) -> SnapshotFile {
    let stacks = [stack("forward", 12), stack("backward", 30), stack("step", 3)];
    let mut trace = Vec::with_capacity(entries);
    for i in 0..entries as u64 {
        let action = TraceAction::ALL[(i % 13).min(9) as usize];
        let mut e = TraceEntry::new(action, 0x7f00_0000_0000 + (i % 4096) * 512, (i * 7919) % (1 << 30), i % 3);
        e.time_us = (i % 1000 != 7).then_some(1_700_000_000_000_000 + i);
        e.frames = (i % 5 != 0).then(|| stacks[(i % 3) as usize].clone());
        e.compile_context = (i % 2 == 0).then(|| if i % 4 == 0 { "N/A".to_string() } else { format!("graph {}", i % 3) });
        e.user_metadata = (i % 997 == 3).then(String::new);
        if i % 101 == 50 {
            e.stream = u64::MAX - 4; // PyTorch's int64 spelling, negative
        }
        trace.push(e);
    }
    SnapshotFile::from_snapshot(Snapshot { segments: Vec::new(), device_traces: vec![Vec::new(), trace] })
}

#[test]
fn a_long_trace_reads_the_same_streamed_from_bytes_and_from_json() {
    let file = long_trace(200_000);
    for protocol in [2, 4] {
        let mut bytes = Vec::new();
        write_pickle_protocol(&file, protocol, &mut bytes).expect("writes");
        assert!(bytes.len() > 8 << 20, "{} bytes: not past two windows", bytes.len());
        let path = temp_path(&format!("columns-{protocol}.pickle"));
        std::fs::write(&path, &bytes).expect("writes");
        let streamed = read_trace_file(&path).expect("reads");
        std::fs::remove_file(&path).ok();
        assert_eq!(streamed, read_trace_file_bytes(&bytes).expect("reads"));
        assert_eq!(streamed.device_traces[1].stacks().len(), 3, "protocol {protocol}: each stack once");
        assert_eq!(streamed.into_snapshot_file().snapshot, file.snapshot, "protocol {protocol}");
    }
    let file = long_trace(20_000);
    let (mut json, mut pickle) = (Vec::new(), Vec::new());
    write_json(&file, &mut json).expect("writes");
    write_pickle_protocol(&file, 4, &mut pickle).expect("writes");
    assert_eq!(read_snapshot_bytes(&json).expect("reads").snapshot, read_snapshot_bytes(&pickle).expect("reads").snapshot);
}

fn key(k: &str) -> Value {
    Value::str(k)
}

/// An entry dict in the writers' key order.
fn entry(action: &str, addr: i64) -> Value {
    Value::dict(vec![
        (key("action"), key(action)),
        (key("addr"), Value::Int(addr)),
        (key("size"), Value::Int(512)),
        (key("stream"), Value::Int(-3)),
        (key("time_us"), Value::Int(17)),
    ])
}

#[test]
fn an_entry_referenced_twice_and_outside_the_traces() {
    // The first entry brings the keys in; the second, the same dict three
    // times, is one the reader takes straight into a row.
    let first = entry("alloc", 4096);
    let twice = entry("free_requested", 4096);
    let doc = Value::dict(vec![
        (key("segments"), Value::list(Vec::new())),
        (key("device_traces"), Value::list(vec![Value::list(vec![first, twice.clone(), twice.clone()])])),
        (key("copy"), twice.clone()),
    ]);
    let file = read_snapshot_bytes(&to_vec(&doc).expect("writes")).expect("reads");
    let trace = &file.snapshot.device_traces[0];
    assert_eq!(trace.len(), 3);
    assert_eq!(trace[1], trace[2]);
    assert_eq!((trace[1].action, trace[1].stream, trace[1].time_us), (TraceAction::FreeRequested, u64::MAX - 2, Some(17)));
    assert_eq!(file.other, vec![("copy".to_string(), twice)]);
}

#[test]
fn frames_inside_entries_change_nothing() {
    let file = long_trace(2_000);
    let mut bytes = Vec::new();
    write_value(&vramkit_trace::to_value(&file), 4, &mut bytes).expect("writes");
    // A FRAME of length 0 after the MARK of every memoized dict, and one
    // before every SETITEMS that ends an entry (CPython frames at any opcode).
    let frame = [0x95, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut framed = Vec::with_capacity(bytes.len() * 2);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"}\x94(") {
            framed.extend_from_slice(b"}\x94(");
            framed.extend_from_slice(&frame);
            i += 3;
        } else {
            framed.push(bytes[i]);
            i += 1;
        }
    }
    assert!(framed.len() > bytes.len() + 9 * 2_000);
    let read = read_trace_file_bytes(&framed).expect("reads");
    assert_eq!(read, read_trace_file_bytes(&bytes).expect("reads"));
    assert_eq!(read.into_snapshot_file().snapshot, file.snapshot);
}

#[test]
fn a_streamed_pickle_reads_as_the_written_one() {
    let file = long_trace(5_000);
    let mut stream = vramkit_trace::PickleStream::new(Vec::new()).expect("starts");
    for e in &file.snapshot.device_traces[1] {
        stream.entry(e).expect("writes");
    }
    let segments = read_snapshot_bytes(&small_snapshot()).expect("reads").snapshot.segments;
    let bytes = stream.finish(segments.clone()).expect("ends");
    let read = read_snapshot_bytes(&bytes).expect("reads");
    assert_eq!(read.snapshot.segments, segments);
    assert_eq!(read.snapshot.device_traces, vec![file.snapshot.device_traces[1].clone()]);
}

/// Ints of every width a pickle spells (1, 2 and 4-byte opcodes, `LONG1`
/// of 1 to 9 bytes) and their edges.
fn any_width() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![0u64..256, 256u64..65536, 0u64..1 << 31, (1u64 << 31)..1 << 40, any::<u64>(), Just(u64::MAX), Just(1 << 63), Just((1 << 63) - 1)]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Entries after the first (whose keys are memo references, read on
    /// the columns' straight path) read as written, whatever their ints.
    #[test]
    fn entries_of_any_int_width_read_as_written(
        fields in proptest::collection::vec((0usize..10, any_width(), any_width(), any_width(), proptest::option::of(any_width()), 0u8..3), 2..40),
    ) {
        let stacks = [stack("a", 2), stack("b", 1)];
        let trace: Vec<TraceEntry> = fields
            .iter()
            .map(|&(action, addr, size, stream, time_us, frames)| {
                let mut e = TraceEntry::new(TraceAction::ALL[action], addr, size, stream);
                e.time_us = time_us;
                e.frames = stacks.get(usize::from(frames)).cloned();
                e
            })
            .collect();
        let file = SnapshotFile::from_snapshot(Snapshot { segments: Vec::new(), device_traces: vec![trace] });
        for protocol in [2, 4] {
            let mut bytes = Vec::new();
            write_pickle_protocol(&file, protocol, &mut bytes).expect("writes");
            proptest::prop_assert_eq!(&read_snapshot_bytes(&bytes).expect("reads").snapshot, &file.snapshot);
        }
    }
}

/// CPython's own pickles of a trace whose entries have the usual form
/// (protocol 2 puts each dict with `BINPUT`, then `LONG_BINPUT`; 4 with
/// `MEMOIZE`; one dict appended twice is a memo reference): every entry
/// reads as CPython wrote it, past the window's and the memo's edges.
#[test]
fn cpython_pickles_of_usual_entries_read_as_written() {
    let Some(python) = crate::common::python3() else { return };
    const PY: &str = r#"
import pickle, sys
stack = [{"name": "f", "filename": "a.py", "line": 3}]
other = [{"name": "g", "filename": "b.py", "line": 4}]
trace = []
for i in range(300_000):
    e = {"action": ["alloc", "free_requested", "free_completed"][i % 3], "addr": 0x7f0000000000 + (i % 4096) * 512,
         "size": (i * 7919) % (1 << 33), "stream": -5 if i % 101 == 50 else i % 3}
    if i % 1000 != 7:
        e["time_us"] = 1_700_000_000_000_000 + i
    if i % 5 != 0:
        e["frames"] = stack if i % 7 else other
    trace.append(e)
    if i % 9973 == 1:
        trace.append(e)
doc = {"segments": [], "device_traces": [trace]}
with open(sys.argv[1], "wb") as f:
    pickle.dump(doc, f, protocol=int(sys.argv[2]))
"#;
    // The same entries, built here.
    let frames = |name: &str, file: &str, line| -> Frames { Arc::from(vec![Frame { filename: file.into(), line, name: name.into() }]) };
    let (stack, other) = (frames("f", "a.py", 3), frames("g", "b.py", 4));
    let mut expected = Vec::new();
    for i in 0..300_000u64 {
        let action = [TraceAction::Alloc, TraceAction::FreeRequested, TraceAction::FreeCompleted][(i % 3) as usize];
        let stream = if i % 101 == 50 { -5i64 as u64 } else { i % 3 };
        let mut e = TraceEntry::new(action, 0x7f00_0000_0000 + (i % 4096) * 512, (i * 7919) % (1 << 33), stream);
        e.time_us = (i % 1000 != 7).then_some(1_700_000_000_000_000 + i);
        e.frames = (i % 5 != 0).then(|| if i % 7 != 0 { stack.clone() } else { other.clone() });
        expected.push(e.clone());
        if i % 9973 == 1 {
            expected.push(e);
        }
    }
    for protocol in [2, 4] {
        cpython_reads_as_expected(python, PY, "usual", protocol, &expected);
    }
}

/// Runs `py` in CPython with a path and `protocol`, and reads the pickle it
/// wrote there, from the file (streamed) and from its bytes: the first
/// device trace is `expected`, entry by entry. The pickle's bytes.
fn cpython_reads_as_expected(python: &str, py: &str, name: &str, protocol: u8, expected: &[TraceEntry]) -> Vec<u8> {
    let path = temp_path(&format!("cpython-{name}-{protocol}.pickle"));
    let out = std::process::Command::new(python).arg("-c").arg(py).arg(&path).arg(protocol.to_string()).output().expect("python3 runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let streamed = read_trace_file(&path).expect("reads");
    let bytes = std::fs::read(&path).expect("written");
    let _ = std::fs::remove_file(&path);
    let trace = streamed.into_snapshot_file().snapshot.device_traces.remove(0);
    assert_eq!(trace.len(), expected.len(), "protocol {protocol}");
    for (k, (got, want)) in trace.iter().zip(expected).enumerate() {
        assert_eq!(got, want, "protocol {protocol}: entry {k}");
    }
    assert_eq!(read_snapshot_bytes(&bytes).expect("reads").snapshot.device_traces[0], trace, "protocol {protocol}: from bytes");
    bytes
}

/// Entries as PyTorch pickles them: every stack a new list of frame dicts
/// shared by all, every `compile_context` a new str, `user_metadata` one
/// shared str. The reader shares stacks' items and strs it has read
/// before: the entries read as written, from a file (columns filled on a
/// second thread) and from bytes.
#[test]
fn cpython_pickles_of_pytorch_entries_read_as_written() {
    let Some(python) = crate::common::python3() else { return };
    const PY: &str = r#"
import pickle, sys
frames = [{"name": "f%d" % k, "filename": "m%d.py" % (k % 3), "line": k * 10} for k in range(12)]
stacks = [[frames[k] for k in s] for s in ([0, 1, 2, 3], [4, 5, 1, 2, 3], [6], [7, 8, 9, 10, 11, 0, 1], [])]
metadata = ""
trace = []
for i in range(540_000):
    trace.append({"action": ["alloc", "free_requested", "free_completed"][i % 3], "addr": 0x7f0000000000 + (i % 4096) * 512,
                  "size": (i * 7919) % (1 << 33), "stream": i % 2, "time_us": 1_700_000_000_000_000 + i,
                  "compile_context": "".join(["N/", "A"]) if i % 11 else "".join(["graph ", str(i % 4)]),
                  "user_metadata": metadata, "frames": list(stacks[i % 5])})
doc = {"segments": [], "device_traces": [trace]}
with open(sys.argv[1], "wb") as f:
    pickle.dump(doc, f, protocol=int(sys.argv[2]))
"#;
    let frame = |k: i64| Frame { filename: format!("m{}.py", k % 3), line: k * 10, name: format!("f{k}") };
    let stacks: Vec<Frames> = [&[0, 1, 2, 3][..], &[4, 5, 1, 2, 3], &[6], &[7, 8, 9, 10, 11, 0, 1], &[]]
        .iter()
        .map(|s| Arc::from(s.iter().map(|&k| frame(k)).collect::<Vec<_>>()))
        .collect();
    let expected: Vec<TraceEntry> = (0..540_000u64)
        .map(|i| {
            let action = [TraceAction::Alloc, TraceAction::FreeRequested, TraceAction::FreeCompleted][(i % 3) as usize];
            let mut e = TraceEntry::new(action, 0x7f00_0000_0000 + (i % 4096) * 512, (i * 7919) % (1 << 33), i % 2);
            e.time_us = Some(1_700_000_000_000_000 + i);
            e.compile_context = Some(if i % 11 != 0 { "N/A".to_string() } else { format!("graph {}", i % 4) });
            e.user_metadata = Some(String::new());
            e.frames = Some(stacks[(i % 5) as usize].clone());
            e
        })
        .collect();
    for protocol in [2, 4] {
        let bytes = cpython_reads_as_expected(python, PY, "pytorch", protocol, &expected);
        assert!(bytes.len() > 32 << 20, "protocol {protocol}: {} bytes, too few for the column thread", bytes.len());
    }
}

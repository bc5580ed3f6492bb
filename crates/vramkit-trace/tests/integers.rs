//! Integers in every spelling PyTorch writes them: a frame's line as
//! CPython's -1 cast to `uint64_t` (2^64-1, a 9-byte `LONG1`), stream
//! handles cast to `int64_t` (negative), pool ids signed or unsigned, the
//! extremes of addresses and sizes. They read, round-trip through both
//! writers, and out-of-range values are refused with the key path.

use crate::common::temp_path;
use std::process::Command;
use vramkit_core::snapshot::Frame;
use vramkit_trace::{read_snapshot, read_snapshot_bytes, write_json, write_pickle, SnapshotFile, TraceError, Value};

/// A key of [`snapshot`] and the int to write there.
type Int<'a> = (&'a str, i128);

const U64_MAX: i128 = u64::MAX as i128;
const I64_MIN: i128 = i64::MIN as i128;

fn int(n: i128) -> Value {
    Value::int(n)
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::dict(pairs.into_iter().map(|(k, v)| (Value::str(k), v)).collect())
}

fn frame(line: i128) -> Value {
    dict(vec![("filename", Value::str("train.py")), ("name", Value::str("step")), ("line", int(line))])
}

/// A current-layout snapshot with one segment of one block and one trace
/// entry, each integer taken from `ints` (key -> value), the rest plain.
fn snapshot(ints: &[Int]) -> Value {
    let get = |key: &str, default: i128| ints.iter().find(|(k, _)| *k == key).map_or(default, |&(_, n)| n);
    let frames = Value::list(vec![frame(get("line", 7)), frame(get("line2", 8))]);
    let address = get("address", 1 << 20);
    let size = get("size", 2 << 20);
    let block = dict(vec![
        ("address", int(address)),
        ("size", int(size)),
        ("requested_size", int(get("requested_size", size))),
        ("state", Value::str("active_allocated")),
        ("frames", frames.clone()),
    ]);
    let segment = dict(vec![
        ("device", int(get("device", 0))),
        ("address", int(address)),
        ("total_size", int(size)),
        ("allocated_size", int(size)),
        ("active_size", int(size)),
        ("requested_size", int(get("requested_size", size))),
        ("stream", int(get("stream", 0))),
        ("segment_type", Value::str("large")),
        ("segment_pool_id", Value::Tuple(vec![int(get("pool0", 0)), int(get("pool1", 0))].into())),
        ("is_expandable", Value::Bool(false)),
        ("frames", frames.clone()),
        ("blocks", Value::list(vec![block])),
    ]);
    let entry = dict(vec![
        ("action", Value::str("alloc")),
        ("addr", int(address)),
        ("size", int(get("entry_size", size))),
        ("stream", int(get("stream", 0))),
        ("time_us", int(get("time_us", 1_700_000_000_000_000))),
        ("frames", frames),
    ]);
    let settings = dict(vec![("max_split_size", int(get("max_split_size", -1)))]);
    dict(vec![
        ("segments", Value::list(vec![segment])),
        ("device_traces", Value::list(vec![Value::list(vec![entry])])),
        ("allocator_settings", settings),
    ])
}

fn pickle(doc: &Value) -> Vec<u8> {
    vramkit_trace::pickle::write::to_vec(doc).expect("writes")
}

fn json(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    vramkit_trace::write_json_value(doc, &mut out).expect("writes");
    out
}

/// Reads `doc` as a pickle and as JSON; both give the same model.
fn read_both(doc: &Value) -> SnapshotFile {
    let from_pickle = read_snapshot_bytes(&pickle(doc)).unwrap_or_else(|e| panic!("pickle: {e}"));
    let from_json = read_snapshot_bytes(&json(doc)).unwrap_or_else(|e| panic!("JSON: {e}"));
    assert_eq!(from_json.snapshot, from_pickle.snapshot);
    assert_eq!(from_json.allocator_settings, from_pickle.allocator_settings);
    from_pickle
}

/// Written as a pickle and as JSON, `file` reads back as the same model.
fn assert_round_trips(file: &SnapshotFile) {
    let mut out = Vec::new();
    write_pickle(file, &mut out).expect("writes a pickle");
    assert_eq!(&read_snapshot_bytes(&out).expect("reads the pickle back"), file);
    let mut out = Vec::new();
    write_json(file, &mut out).expect("writes JSON");
    let again = read_snapshot_bytes(&out).expect("reads the JSON back");
    assert_eq!(SnapshotFile { pickle_protocol: file.pickle_protocol, ..again }, *file);
}

fn schema_error(bytes: &[u8]) -> (String, String) {
    match read_snapshot_bytes(bytes) {
        Err(TraceError::Schema { key_path, expected, .. }) => (key_path, expected),
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn a_line_of_2_pow_64_minus_1_is_cpythons_no_line() {
    let doc = snapshot(&[("line", U64_MAX), ("line2", -1)]);
    let bytes = pickle(&doc);
    // As `_dump_snapshot` has it: LONG1 with 9 bytes, ff x 8 then a sign byte.
    let long1 = [0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];
    assert!(bytes.windows(long1.len()).any(|w| w == long1), "the test pickle carries a 9-byte LONG1");
    assert!(String::from_utf8_lossy(&json(&doc)).contains(r#""line":18446744073709551615"#));
    let file = read_both(&doc);
    let expected = |line| Frame { filename: "train.py".into(), name: "step".into(), line };
    let block = &file.snapshot.segments[0].blocks[0];
    // 2^64-1 (the Python writer) and -1 (the C++ writer) are one value.
    assert_eq!(block.frames.as_deref(), Some(&[expected(-1), expected(-1)][..]));
    assert_round_trips(&file);
}

#[test]
fn every_line_pytorch_can_write_reads() {
    for (line, expected) in
        [(0, 0), (1, 1), (i128::from(i32::MAX), i64::from(i32::MAX)), (I64_MIN, i64::MIN), (1 << 63, i64::MIN)]
    {
        let file = read_both(&snapshot(&[("line", line)]));
        let frames = file.snapshot.device_traces[0][0].frames.as_ref().expect("frames");
        assert_eq!(frames[0].line, expected, "line {line}");
        assert_round_trips(&file);
    }
}

#[test]
fn negative_stream_handles_and_pool_ids_read_as_their_64_bits() {
    // PyTorch writes `int64_t(stream)`; a pool id comes unsigned from
    // Python and as `int64_t` from C++.
    let signed = read_both(&snapshot(&[("stream", -2), ("pool0", -1), ("pool1", I64_MIN), ("time_us", -5)]));
    let unsigned = [("stream", U64_MAX - 1), ("pool0", U64_MAX), ("pool1", 1 << 63), ("time_us", U64_MAX - 4)];
    let unsigned = read_both(&snapshot(&unsigned));
    assert_eq!(signed.snapshot, unsigned.snapshot, "both spellings are one value");
    let segment = &signed.snapshot.segments[0];
    assert_eq!(segment.stream, u64::MAX - 1);
    assert_eq!(segment.segment_pool_id, (u64::MAX, 1 << 63));
    let entry = &signed.snapshot.device_traces[0][0];
    assert_eq!((entry.stream, entry.time_us), (u64::MAX - 1, Some(u64::MAX - 4)));
    for file in [&signed, &unsigned] {
        assert_round_trips(file);
    }
    // Written back as PyTorch writes them: the stream and time_us signed.
    let mut out = Vec::new();
    write_json(&unsigned, &mut out).expect("writes");
    let text = String::from_utf8(out).expect("UTF-8");
    assert!(text.contains(r#""stream":-2"#) && text.contains(r#""time_us":-5"#), "{text}");
}

#[test]
fn addresses_and_sizes_up_to_2_pow_64_minus_1_read() {
    let doc = snapshot(&[("address", U64_MAX - 4096), ("size", 4096), ("entry_size", U64_MAX), ("device", 7)]);
    let file = read_both(&doc);
    let segment = &file.snapshot.segments[0];
    assert_eq!((segment.address, segment.total_size, segment.device), (u64::MAX - 4096, 4096, 7));
    assert_eq!(file.snapshot.device_traces[0][0].size, u64::MAX);
    assert_round_trips(&file);
}

#[test]
fn max_split_size_reads_signed_or_unsigned() {
    for (written, expected) in [(-1, -1), (U64_MAX, -1), (512 << 20, 512 << 20)] {
        let file = read_both(&snapshot(&[("max_split_size", written)]));
        let settings = file.allocator_settings.as_ref().expect("settings");
        assert_eq!(settings.max_split_size, Some(expected), "{written}");
        assert_eq!(settings.to_config().max_split_size_bytes, u64::try_from(expected).ok());
        assert_round_trips(&file);
    }
}

#[test]
fn out_of_range_integers_are_refused_with_their_key_path() {
    let cases: [(&[Int], &str, &str); 7] = [
        (&[("line", 1 << 64)], "segments[0].frames[0].line", "an int from -2^63 to 2^64-1"),
        (&[("line", I64_MIN - 1)], "segments[0].frames[0].line", "an int from -2^63 to 2^64-1"),
        (&[("stream", 1 << 64)], "segments[0].stream", "an int from -2^63 to 2^64-1"),
        (&[("pool1", -(1 << 70))], "segments[0].segment_pool_id[1]", "an int from -2^63 to 2^64-1"),
        (&[("address", -1)], "segments[0].address", "a non-negative int below 2^64"),
        (&[("entry_size", 1 << 64)], "device_traces[0][0].size", "a non-negative int below 2^64"),
        (&[("device", 1 << 63)], "segments[0].device", "an int from -2^63 to 2^63-1"),
    ];
    for (ints, path, expected) in cases {
        let (key_path, what) = schema_error(&pickle(&snapshot(ints)));
        assert_eq!((key_path.as_str(), what.as_str()), (path, expected), "{ints:?}");
    }
    // JSON has no ints past 2^64-1: they parse as floats, and are refused as such.
    let text = String::from_utf8(json(&snapshot(&[]))).expect("UTF-8").replacen(r#""line":7"#, r#""line":1e30"#, 1);
    assert_eq!(schema_error(text.as_bytes()).0, "segments[0].frames[0].line");
}

#[test]
fn a_refusal_names_the_file() {
    let path = temp_path("integers.pickle");
    std::fs::write(&path, pickle(&snapshot(&[("stream", 1 << 64)]))).expect("written");
    let err = read_snapshot(&path).expect_err("refused");
    let _ = std::fs::remove_file(&path);
    let text = err.to_string();
    assert!(text.starts_with(&path.display().to_string()), "{text}");
    let message = "segments[0].stream: expected an int from -2^63 to 2^64-1, found an int (18446744073709551616)";
    assert!(text.contains(message), "{text}");
}

#[test]
fn cpython_loads_what_we_write_for_such_a_file() {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: python3 is not available");
        return;
    }
    let file = read_both(&snapshot(&[("line", U64_MAX), ("stream", -2), ("pool0", U64_MAX), ("time_us", -5)]));
    let mut out = Vec::new();
    write_pickle(&file, &mut out).expect("writes");
    let path = temp_path("integers-cpython.pickle");
    std::fs::write(&path, &out).expect("written");
    let check = "import pickle, sys\n\
        d = pickle.load(open(sys.argv[1], 'rb'))\n\
        s = d['segments'][0]; e = d['device_traces'][0][0]\n\
        print(s['frames'][0]['line'], s['stream'], s['segment_pool_id'], e['stream'], e['time_us'])";
    let result = Command::new("python3").arg("-c").arg(check).arg(&path).output().expect("runs");
    let _ = std::fs::remove_file(&path);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(String::from_utf8_lossy(&result.stdout).trim(), "-1 -2 (18446744073709551615, 0) -2 -5");
}

//! The unpickler on hand-made and CPython-made pickles, and its refusals.

use crate::common::temp_path;
use std::process::Command;
use std::sync::Arc;
use vramkit_trace::pickle::read::{pickle_protocol, read_value};
use vramkit_trace::{TraceError, Value};

fn int(n: i128) -> Value {
    Value::int(n)
}

fn tuple(items: Vec<Value>) -> Value {
    Value::Tuple(Arc::from(items))
}

fn pickle_error(data: &[u8]) -> (u64, String) {
    match read_value(data) {
        Err(TraceError::Pickle { offset, message, .. }) => (offset, message),
        other => panic!("expected a pickle error for {data:?}, got {other:?}"),
    }
}

#[test]
fn protocol_2_with_binput_and_binget() {
    // {'a': [1, 'x'], 'b': <the same list>} as CPython writes it at protocol 2.
    let data =
        b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01X\x01\x00\x00\x00xq\x03eX\x01\x00\x00\x00bq\x04h\x02u.";
    let value = read_value(data).expect("reads");
    let (Some(a), Some(b)) = (value.get("a"), value.get("b")) else { panic!("keys a and b: {value}") };
    assert_eq!(a, &Value::list(vec![int(1), Value::str("x")]));
    let (Value::List(a), Value::List(b)) = (a, b) else { panic!("lists") };
    assert!(Arc::ptr_eq(a, b), "a memo reference is the same object, not a copy");
    assert_eq!(pickle_protocol(data), Some(2));
}

#[test]
fn protocol_0_text_forms() {
    // {1: [1, 2.5, 2**70, None, True]} at protocol 0.
    let data = b"(dp0\nI1\n(lp1\nI1\naF2.5\naL1180591620717411303424L\naNaI01\nas.";
    let value = read_value(data).expect("reads");
    let expected = Value::dict(vec![(
        int(1),
        Value::list(vec![int(1), Value::Float(2.5), int(1 << 70), Value::None, Value::Bool(true)]),
    )]);
    assert_eq!(value, expected);
    assert_eq!(pickle_protocol(data), None);
}

#[test]
fn small_opcodes() {
    // PROTO 4, MARK, TUPLE1/2/3, EMPTY_TUPLE, DUP, POP, POP_MARK, LONG1 negative,
    // LONG4, BINUNICODE8, NEWFALSE, NONE, BINFLOAT, SETITEM, APPEND, DICT, LIST, TUPLE.
    let mut data = vec![0x80, 4, b']']; // an empty list to append to
    data.extend_from_slice(&[b'K', 7, 0x85, b'a']); // (7,)
    data.extend_from_slice(&[b'K', 1, b'K', 2, 0x86, b'a']); // (1, 2)
    data.extend_from_slice(&[b'K', 1, b'K', 2, b'K', 3, 0x87, b'a']); // (1, 2, 3)
    data.extend_from_slice(b")a"); // ()
    data.extend_from_slice(&[0x8a, 1, 0xff, b'a']); // -1
    data.extend_from_slice(&[0x8b, 2, 0, 0, 0, 0x00, 0x01, b'a']); // 256 via LONG4
    data.extend_from_slice(&[0x8d, 2, 0, 0, 0, 0, 0, 0, 0, b'h', b'i', b'a']); // 'hi' via BINUNICODE8
    data.extend_from_slice(&[0x89, b'N', 0x86, b'a']); // (False, None)
    data.push(b'G');
    data.extend_from_slice(&(-0.25f64).to_be_bytes());
    data.push(b'a');
    data.extend_from_slice(&[b'}', b'K', 1, b'K', 2, b's', b'a']); // {1: 2}
    data.extend_from_slice(&[b'(', b'K', 3, b'K', 4, b'd', b'a']); // {3: 4} via DICT
    data.extend_from_slice(&[b'(', b'K', 5, b'l', b'a']); // [5] via LIST
    data.extend_from_slice(&[b'(', b'K', 6, b'K', 6, b'K', 6, b'K', 6, b't', b'a']); // (6, 6, 6, 6)
    data.extend_from_slice(&[b'K', 9, b'2', b'0', b'0']); // DUP then POP twice: a no-op
    data.extend_from_slice(&[b'(', b'K', 1, b'K', 2, b'1']); // MARK ... POP_MARK: a no-op
    data.push(b'.');
    let value = read_value(&data).expect("reads");
    let expected = Value::list(vec![
        tuple(vec![int(7)]),
        tuple(vec![int(1), int(2)]),
        tuple(vec![int(1), int(2), int(3)]),
        tuple(vec![]),
        int(-1),
        int(256),
        Value::str("hi"),
        tuple(vec![Value::Bool(false), Value::None]),
        Value::Float(-0.25),
        Value::dict(vec![(int(1), int(2))]),
        Value::dict(vec![(int(3), int(4))]),
        Value::list(vec![int(5)]),
        tuple(vec![int(6), int(6), int(6), int(6)]),
    ]);
    assert_eq!(value, expected);
}

/// The object CPython pickles in `cpython_pickles_of_every_protocol_read_back`.
const PY_OBJECT: &str = r#"
import pickle, sys
s = [{'filename': 'f.py', 'line': 1, 'name': 'n'}]
obj = {'ints': [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**40, -2**63, 2**64 + 5, -(2**100)],
       't1': (1,), 't2': (1, 2), 't3': (1, 2, 3), 't4': (1, 2, 3, 4), 't0': (),
       'text': 'h\u00e9llo \u2603', 'long': 'x' * 300, 'none': None, 'yes': True, 'no': False,
       'float': 1.5, 'empty_dict': {}, 'empty_list': [], 'shared': [s, s], 'big': list(range(2500))}
sys.stdout.buffer.write(pickle.dumps(obj, protocol=int(sys.argv[1])))
"#;

fn expected_py_object() -> Value {
    let s = Value::list(vec![Value::dict(vec![
        (Value::str("filename"), Value::str("f.py")),
        (Value::str("line"), int(1)),
        (Value::str("name"), Value::str("n")),
    ])]);
    let ints =
        [0, 1, -1, 255, 256, 65535, 65536, (1 << 31) - 1, -(1 << 31), 1 << 40, -(1 << 63), (1 << 64) + 5, -(1 << 100)];
    Value::dict(vec![
        (Value::str("ints"), Value::list(ints.iter().map(|&n| int(n)).collect())),
        (Value::str("t1"), tuple(vec![int(1)])),
        (Value::str("t2"), tuple(vec![int(1), int(2)])),
        (Value::str("t3"), tuple(vec![int(1), int(2), int(3)])),
        (Value::str("t4"), tuple(vec![int(1), int(2), int(3), int(4)])),
        (Value::str("t0"), tuple(vec![])),
        (Value::str("text"), Value::str("h\u{e9}llo \u{2603}")),
        (Value::str("long"), Value::str(&"x".repeat(300))),
        (Value::str("none"), Value::None),
        (Value::str("yes"), Value::Bool(true)),
        (Value::str("no"), Value::Bool(false)),
        (Value::str("float"), Value::Float(1.5)),
        (Value::str("empty_dict"), Value::dict(vec![])),
        (Value::str("empty_list"), Value::list(vec![])),
        (Value::str("shared"), Value::list(vec![s.clone(), s])),
        (Value::str("big"), Value::list((0..2500).map(int).collect())),
    ])
}

#[test]
fn cpython_pickles_of_every_protocol_read_back() {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: python3 is not available");
        return;
    }
    for protocol in 1..=5 {
        let out = Command::new("python3").arg("-c").arg(PY_OBJECT).arg(protocol.to_string()).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let value = read_value(&out.stdout).unwrap_or_else(|e| panic!("protocol {protocol}: {e}"));
        assert_eq!(value, expected_py_object(), "protocol {protocol}");
        let Some(Value::List(shared)) = value.get("shared") else { panic!("shared") };
        let (Value::List(first), Value::List(second)) = (&shared[0], &shared[1]) else { panic!("lists") };
        assert!(Arc::ptr_eq(first, second), "protocol {protocol}: sharing kept");
    }
}

#[test]
fn code_execution_opcodes_are_refused() {
    // GLOBAL 'os system' then REDUCE: the classic exploit shape.
    let data = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.";
    match read_value(data) {
        Err(TraceError::RefusedOpcode { offset: 2, name: "GLOBAL", opcode: b'c', .. }) => {}
        other => panic!("expected GLOBAL refused at byte 2, got {other:?}"),
    }
    for (code, name) in [
        (0x93u8, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (b'B', "BINBYTES"),
        (0x8f, "EMPTY_SET"),
    ] {
        let err = read_value(&[0x80, 4, b'N', code, b'.']).expect_err("refused");
        assert!(matches!(err, TraceError::RefusedOpcode { name: n, offset: 3, .. } if n == name), "{name}: {err:?}");
        assert!(err.to_string().contains(name), "{err}");
    }
    let err = read_value(&[0x80, 4, 0xff]).expect_err("refused");
    assert!(matches!(err, TraceError::RefusedOpcode { name: "unknown", .. }), "{err:?}");
}

#[test]
fn malformed_input_names_the_offset_and_what_was_expected() {
    let (offset, message) = pickle_error(b"\x80\x04K");
    assert_eq!(offset, 2);
    assert!(message.contains("BININT1") && message.contains("expected 1 more bytes"), "{message}");

    let (offset, message) = pickle_error(b"\x80\x04N");
    assert_eq!(offset, 3);
    assert!(message.contains("no STOP"), "{message}");

    // A BINUNICODE8 claiming 2^60 bytes: refused before any allocation.
    let mut data = vec![0x80, 4, 0x8d];
    data.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let (offset, message) = pickle_error(&data);
    assert_eq!(offset, 2);
    assert!(message.contains("truncated or length corrupt"), "{message}");

    // LONG4 wider than 16 bytes: bounded.
    let mut data = vec![0x80, 4, 0x8b, 32, 0, 0, 0];
    data.extend_from_slice(&[1; 32]);
    data.push(b'.');
    let (_, message) = pickle_error(&data);
    assert!(message.contains("at most 16 bytes"), "{message}");

    let (offset, message) = pickle_error(b"\x80\x04h\x05.");
    assert_eq!(offset, 2);
    assert!(message.contains("memo index") && message.contains('5'), "{message}");

    let (offset, message) = pickle_error(b"\x80\x04}K\x01a.");
    assert_eq!(offset, 5);
    assert!(message.contains("APPEND: expected a list on the stack, found a dict"), "{message}");

    let (_, message) = pickle_error(b"\x80\x04]K\x01u.");
    assert!(message.contains("open MARK"), "{message}");

    let (_, message) = pickle_error(b"\x80\x04}(K\x01u.");
    assert!(message.contains("odd number"), "{message}");

    let (_, message) = pickle_error(b"\x80\x04a.");
    assert!(message.contains("stack underflow"), "{message}");

    // Nothing may be popped from below a MARK (as in CPython).
    let (_, message) = pickle_error(b"\x80\x04](K\x01a.");
    assert!(message.contains("APPEND") && message.contains("stack underflow"), "{message}");

    let (_, message) = pickle_error(b"\x80\x07N.");
    assert!(message.contains("protocol 0 to 5"), "{message}");

    let (_, message) = pickle_error(b"\x80\x04\x8c\x02\xff\xfe.");
    assert!(message.contains("UTF-8"), "{message}");

    let mut deep = vec![0x80, 4];
    deep.extend(std::iter::repeat_n(b'(', 5000));
    let (_, message) = pickle_error(&deep);
    assert!(message.contains("nesting too deep"), "{message}");
}

#[test]
fn deep_or_cyclic_structures_fail_cleanly() {
    // 100k nested lists built without MARKs: parsing works, freezing stops.
    let n = 100_000;
    let mut data = vec![0x80, 4];
    data.extend(std::iter::repeat_n(b']', n));
    data.extend(std::iter::repeat_n(b'a', n - 1));
    data.push(b'.');
    let (_, message) = pickle_error(&data);
    assert!(message.contains("levels of nesting"), "{message}");
    // A list that contains itself.
    let (_, message) = pickle_error(b"\x80\x04]\x94h\x00a.");
    assert!(message.contains("levels of nesting"), "{message}");
    // As a snapshot, the same input is a schema error, not a crash.
    assert!(vramkit_trace::read_snapshot_bytes(&data).is_err());
}

#[test]
fn sparse_memo_indices_work_without_a_huge_table() {
    // LONG_BINPUT 4,000,000,000 then LONG_BINGET of it.
    let mut data = vec![0x80, 2, b'K', 42, b'r'];
    data.extend_from_slice(&4_000_000_000u32.to_le_bytes());
    data.push(b'0'); // POP
    data.push(b'j');
    data.extend_from_slice(&4_000_000_000u32.to_le_bytes());
    data.push(b'.');
    assert_eq!(read_value(&data).expect("reads"), int(42));
}

#[test]
fn errors_from_files_name_the_file() {
    let path = temp_path("truncated.pickle");
    std::fs::write(&path, b"\x80\x04}").expect("written");
    let err = vramkit_trace::read_snapshot(&path).expect_err("truncated");
    let _ = std::fs::remove_file(&path);
    let text = err.to_string();
    assert!(text.starts_with(&path.display().to_string()) && text.contains("pickle byte 3"), "{text}");
}

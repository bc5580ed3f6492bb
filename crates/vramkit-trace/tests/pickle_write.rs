//! The pickle writer: values round-trip through our reader; sharing is kept.

use std::sync::Arc;
use vramkit_trace::pickle::read::read_value;
use vramkit_trace::pickle::write::{to_vec, write_value};
use vramkit_trace::Value;

fn sample() -> Value {
    let frames = Value::list(vec![Value::dict(vec![
        (Value::str("name"), Value::str("f")),
        (Value::str("filename"), Value::str("a.py")),
        (Value::str("line"), Value::int(3)),
    ])]);
    let ints = [
        0,
        1,
        255,
        256,
        65535,
        65536,
        -1,
        i32::MIN as i128,
        i32::MAX as i128,
        1 << 40,
        i64::MIN as i128,
        i64::MAX as i128,
        u64::MAX as i128,
        -(1 << 100),
        (1 << 126) + 7,
    ];
    Value::dict(vec![
        (Value::str("ints"), Value::list(ints.iter().map(|&n| Value::int(n)).collect())),
        (Value::str("floats"), Value::list(vec![Value::Float(0.0), Value::Float(-2.5e300)])),
        (
            Value::str("strs"),
            Value::list(vec![Value::str(""), Value::str("\u{2603}"), Value::str(&"y".repeat(70_000))]),
        ),
        (Value::str("tuples"), Value::list((0..6).map(|n| Value::Tuple((0..n).map(Value::int).collect())).collect())),
        (Value::str("misc"), Value::list(vec![Value::None, Value::Bool(true), Value::Bool(false)])),
        (Value::int(7), Value::dict(vec![])),
        (Value::str("shared"), Value::list(vec![frames.clone(), frames.clone(), frames])),
        (Value::str("many"), Value::list((0..2500).map(Value::int).collect())),
    ])
}

#[test]
fn values_round_trip_at_protocols_2_to_4() {
    let value = sample();
    for protocol in 2..=4 {
        let mut out = Vec::new();
        write_value(&value, protocol, &mut out).expect("writes");
        assert_eq!(out[..2], [0x80, protocol]);
        assert_eq!(read_value(&out).expect("reads"), value, "protocol {protocol}");
    }
}

#[test]
fn shared_values_are_written_once() {
    let big = Value::list((0..1000).map(|i| Value::str(&format!("frame number {i}"))).collect());
    let shared = Value::list(vec![big.clone(); 200]);
    let once = to_vec(&Value::list(vec![big])).expect("writes").len();
    let many = to_vec(&shared).expect("writes").len();
    assert!(many < once + 200 * 6, "200 references cost {} bytes over one copy", many - once);
    let back = read_value(&to_vec(&shared).expect("writes")).expect("reads");
    let Value::List(items) = back else { panic!("a list") };
    let (Value::List(a), Value::List(b)) = (&items[0], &items[199]) else { panic!("lists") };
    assert!(Arc::ptr_eq(a, b));
}

#[test]
fn protocol_5_and_deep_values_are_refused() {
    assert!(write_value(&Value::None, 5, Vec::new()).is_err());
    let mut deep = Value::None;
    for _ in 0..300 {
        deep = Value::list(vec![deep]);
    }
    assert!(to_vec(&deep).is_err());
    assert!(vramkit_trace::write_json_value(&deep, Vec::new()).is_err());
}

#[test]
fn json_writes_tuples_as_lists_and_int_keys_as_strings() {
    let value = Value::dict(vec![
        (Value::int(1), Value::Tuple(Arc::from(vec![Value::int(0), Value::int(2)]))),
        (Value::str("f"), Value::Float(0.5)),
        (Value::str("n"), Value::None),
    ]);
    let mut out = Vec::new();
    vramkit_trace::write_json_value(&value, &mut out).expect("writes");
    assert_eq!(String::from_utf8(out).expect("utf-8"), r#"{"1":[0,2],"f":0.5,"n":null}"#);
    let bad = Value::dict(vec![(Value::Tuple(Arc::from(vec![])), Value::None)]);
    assert!(vramkit_trace::write_json_value(&bad, Vec::new()).is_err());
}

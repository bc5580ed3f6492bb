//! The fuzz targets' bodies. Each takes the fuzzer's bytes, feeds them to
//! one reader (or to the allocator), and panics on a finding: a panic of
//! the code under test, or an oracle that does not hold. A clean error for
//! bad input is not a finding.

use crate::model::{preset, Action, Shadow, PRESETS};
use arbitrary::Unstructured;
use std::collections::HashSet;
use vramkit_core::config::{Compat, Generation};
use vramkit_core::AllocatorConfig;
use vramkit_trace::pickle::read::read_value;
use vramkit_trace::rmm::read_rmm_log_str;
use vramkit_trace::{read_snapshot_bytes, sniff, write_json, write_pickle, Encoding, SnapshotFile, TraceError, Value};

/// A fuzz target: the bytes in, a panic out when something is wrong.
pub type Target = fn(&[u8]);

/// Every target by the name `fuzz/` and the corpus directories use.
pub const TARGETS: [(&str, Target); 6] = [
    ("pickle", pickle),
    ("snapshot", snapshot),
    ("json", json),
    ("rmm", rmm),
    ("alloc_conf", alloc_conf),
    ("actions", actions),
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The unpickler: any bytes read as a value or fail cleanly, and a value
/// read writes back (protocol 4) to a pickle that reads as the same value.
pub fn pickle(data: &[u8]) {
    let Ok(value) = read_value(data) else { return };
    let bytes = vramkit_trace::pickle::write::to_vec(&value).expect("a value read from a pickle writes back");
    let again = read_value(&bytes).expect("a pickle vramkit wrote reads back");
    assert!(same_value(&value, &again), "pickle round trip changed the value:\n{value:?}\n{again:?}");
}

/// The snapshot reader (pickle or JSON, sniffed): any bytes read or fail
/// cleanly, and a snapshot read writes as a pickle and as JSON that both
/// read back to the same segments and traces.
pub fn snapshot(data: &[u8]) {
    if let Ok(file) = read_snapshot_bytes(data) {
        round_trip(&file);
    }
}

/// The JSON reader: as [`snapshot`], for input that sniffs as JSON.
pub fn json(data: &[u8]) {
    if sniff(data) == Some(Encoding::Json) {
        snapshot(data);
    }
}

fn round_trip(file: &SnapshotFile) {
    let mut pickled = Vec::new();
    write_pickle(file, &mut pickled).expect("a snapshot read writes as a pickle");
    let back = read_snapshot_bytes(&pickled).expect("a pickle vramkit wrote reads back");
    assert_eq!(back.snapshot, file.snapshot, "pickle round trip changed the snapshot");
    let mut text = Vec::new();
    match write_json(file, &mut text) {
        Ok(()) => {
            let back = read_snapshot_bytes(&text).expect("JSON vramkit wrote reads back");
            assert_eq!(back.snapshot, file.snapshot, "JSON round trip changed the snapshot");
        }
        // A pickle can hold what JSON cannot (a dict key that is a tuple or a
        // dict, in a key vramkit keeps but does not model): refused cleanly.
        Err(e @ TraceError::Encode { .. }) => assert!(file.pickle_protocol.is_some(), "JSON read does not write as JSON: {e}"),
        Err(other) => panic!("writing JSON failed: {other}"),
    }
}

/// The RMM log reader: any text reads or fails cleanly, and a log read
/// converts to a snapshot whose pickle reads back to the same trace.
pub fn rmm(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(log) = read_rmm_log_str(text) else { return };
    let file = log.into_snapshot_file();
    let mut pickled = Vec::new();
    write_pickle(&file, &mut pickled).expect("an RMM log writes as a pickle");
    let back = read_snapshot_bytes(&pickled).expect("the pickle reads back");
    assert_eq!(back.snapshot, file.snapshot, "RMM log -> pickle -> snapshot changed the trace");
}

/// The `PYTORCH_CUDA_ALLOC_CONF` parser: any string parses or fails
/// cleanly under every generation's rules; settings that parse are valid
/// and survive `to_conf_string` and parsing again; a refused update
/// changes nothing.
pub fn alloc_conf(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for generation in [Generation::R24, Generation::V2_8, Generation::R26] {
        let compat = Compat::of(generation);
        let Ok(config) = AllocatorConfig::parse_with_compat(text, compat) else { continue };
        config.validate().unwrap_or_else(|e| panic!("{text:?} parsed to settings that do not validate: {e}"));
        let conf = config.to_conf_string();
        let again = AllocatorConfig::parse_with_compat(&conf, compat)
            .unwrap_or_else(|e| panic!("{text:?} parsed, but its to_conf_string {conf:?} does not: {e}"));
        assert_eq!(again, config, "{text:?} -> {conf:?} does not parse back to the same settings");
    }
    let base = preset("expandable_gc_fraction");
    let mut updated = base.clone();
    if updated.update(text).is_err() {
        assert_eq!(updated, base, "a refused update changed the settings");
    }
    let mut runtime = base.clone();
    if runtime.set_allocator_settings_pytorch(text).is_err() {
        assert_eq!(runtime, base, "a refused runtime setter changed the settings");
    }
}

/// Most actions one input runs: long enough to fill, fragment and empty
/// the device, short enough for thousands of runs a second.
pub const MAX_ACTIONS: usize = 1000;

/// Allocator action sequences against the shadow model, under one of the
/// presets, with the invariant checker on.
pub fn actions(data: &[u8]) {
    let (preset_name, actions) = decode_actions(data);
    let mut shadow = Shadow::new(preset(preset_name));
    for action in &actions {
        shadow.apply(action);
    }
    shadow.finish();
}

/// What the `actions` target makes of `data`: a preset and at most
/// [`MAX_ACTIONS`] actions (to print a finding as a readable test).
pub fn decode_actions(data: &[u8]) -> (&'static str, Vec<Action>) {
    let mut u = Unstructured::new(data);
    let which = u.int_in_range(0..=PRESETS.len() - 1).unwrap_or(0);
    let actions = match u.arbitrary_iter::<Action>() {
        Ok(iter) => iter.take(MAX_ACTIONS).map_while(Result::ok).collect(),
        Err(_) => Vec::new(),
    };
    (PRESETS[which], actions)
}

/// Equality of values, with floats compared bit for bit (NaN equals
/// itself) and each pair of shared containers compared once.
fn same_value(a: &Value, b: &Value) -> bool {
    same_in(a, b, &mut HashSet::new())
}

fn same_in(a: &Value, b: &Value, seen: &mut HashSet<(usize, usize)>) -> bool {
    // Whether this pair of containers is met for the first time.
    let first = |seen: &mut HashSet<(usize, usize)>, x: *const Value, y: *const Value| seen.insert((x as usize, y as usize));
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
            if !first(seen, x.as_ptr(), y.as_ptr()) {
                return true;
            }
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same_in(p, q, seen))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            if !first(seen, x.as_ptr().cast(), y.as_ptr().cast()) {
                return true;
            }
            x.len() == y.len() && x.iter().zip(y.iter()).all(|((k1, v1), (k2, v2))| same_in(k1, k2, seen) && same_in(v1, v2, seen))
        }
        _ => a == b,
    }
}

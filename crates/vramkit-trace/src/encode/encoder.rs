//! [`Encoder`]: the per-write caches that keep shared values shared, and
//! how numbers and optional keys are written.

use crate::value::Value;
use std::collections::{BTreeSet, HashMap};
use vramkit_core::snapshot::{Frame, Frames};

/// Per-write caches. They keep what they are keyed by (a stack's `Arc`
/// stays alive, so its address is not handed to another stack while a
/// stream of entries is written).
#[derive(Debug)]
pub(crate) struct Encoder {
    keys: HashMap<&'static str, Value>,
    /// One list value per distinct `Frames` allocation, by its address.
    pub(super) frames: HashMap<usize, (Frames, Value)>,
    /// One dict value per distinct frame content.
    pub(super) frame_dicts: HashMap<Frame, Value>,
}

/// An unsigned quantity (an address, a size, a count), as the int it is.
pub(super) fn int(n: u64) -> Value {
    Value::int(i128::from(n))
}

/// A value PyTorch writes as `int64_t` (a stream handle, `time_us`): its 64
/// bits as a signed int, so a negative handle is written as it was read.
pub(super) fn int64(n: u64) -> Value {
    Value::Int(n as i64)
}

/// Whether to write an optional key: always when the source's keys are
/// unknown, else when the source had it.
pub(super) fn want(keys: Option<&BTreeSet<String>>, key: &str) -> bool {
    keys.is_none_or(|set| set.contains(key))
}

impl Encoder {
    pub(crate) fn new() -> Encoder {
        Encoder { keys: HashMap::new(), frames: HashMap::new(), frame_dicts: HashMap::new() }
    }

    /// A dict key; one shared string per name.
    pub(crate) fn key(&mut self, name: &'static str) -> Value {
        self.keys.entry(name).or_insert_with(|| Value::str(name)).clone()
    }
}

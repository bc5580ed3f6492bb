//! Device traces, with the entries vramkit does not model put back in place.

use super::encoder::{int, int64, Encoder};
use crate::file::SnapshotFile;
use crate::value::Value;
use vramkit_core::snapshot::{TraceAction, TraceEntry};

impl Encoder {
    pub(super) fn trace(&mut self, file: &SnapshotFile, device: usize) -> Value {
        let entries: &[TraceEntry] = file.snapshot.device_traces.get(device).map_or(&[], Vec::as_slice);
        let mut skipped = file.skipped_entries.iter().filter(|s| s.device == device).peekable();
        let mut out = Vec::with_capacity(entries.len());
        let mut entries = entries.iter();
        loop {
            if let Some(skip) = skipped.next_if(|s| s.index <= out.len()) {
                out.push(skip.entry.clone());
                continue;
            }
            match entries.next() {
                Some(entry) => {
                    let value = self.entry(entry);
                    out.push(value);
                }
                None => break,
            }
        }
        out.extend(skipped.map(|s| s.entry.clone()));
        Value::list(out)
    }

    fn entry(&mut self, entry: &TraceEntry) -> Value {
        Value::dict(self.entry_pairs(entry))
    }

    /// An entry dict's pairs, in the order PyTorch writes them.
    pub(crate) fn entry_pairs(&mut self, entry: &TraceEntry) -> Vec<(Value, Value)> {
        let mut pairs = Vec::with_capacity(8);
        pairs.push((self.key("action"), self.key(entry.action.as_str())));
        let addr_key = if entry.action == TraceAction::Oom { "device_free" } else { "addr" };
        pairs.push((self.key(addr_key), int(entry.addr)));
        pairs.push((self.key("size"), int(entry.size)));
        pairs.push((self.key("stream"), int64(entry.stream)));
        if let Some(t) = entry.time_us {
            pairs.push((self.key("time_us"), int64(t)));
        }
        if let Some(context) = &entry.compile_context {
            pairs.push((self.key("compile_context"), Value::str(context)));
        }
        if let Some(metadata) = &entry.user_metadata {
            pairs.push((self.key("user_metadata"), Value::str(metadata)));
        }
        if let Some(frames) = &entry.frames {
            let frames = self.frames(frames);
            pairs.push((self.key("frames"), frames));
        }
        pairs
    }
}

//! Device traces: one list of entries per device, into columns
//! ([`Entries`]). An entry whose action vramkit does not model is kept as
//! it was ([`SkippedEntry`]).

use super::reader::Reader;
use super::rows::DecodedTrace;
use super::schema_err::{AtKey, SchemaErr};
use crate::entries::{EntriesBuilder, Entry};
use crate::file::SkippedEntry;
use crate::tree::{Item, Kind};
use crate::words::Word;
use vramkit_core::snapshot::TraceAction;

/// The keys of a trace entry dict this crate knows; a key's bit in the
/// entry level's [`Seen`](super::reader::Seen) mask is its index here.
pub(super) const ENTRY_KEYS: [&str; 9] =
    ["action", "addr", "device_free", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"];

impl Reader<'_> {
    pub(super) fn device_traces(
        &mut self,
        item: Item,
        skipped: &mut Vec<SkippedEntry>,
    ) -> Result<Vec<DecodedTrace>, SchemaErr> {
        let devices = self.seq(item)?;
        let mut out = Vec::with_capacity(devices.len());
        for (device, &trace) in devices.iter().enumerate() {
            // The list's items, then the rows it holds as a range (`Node::Rows`).
            let (head, tail) = match self.tree.as_rows(trace) {
                Some((head, rows)) => (head, rows),
                None => (self.seq(trace).at_index(device)?, 0..0),
            };
            let items = || head.iter().copied().chain(tail.clone().map(Item::entry));
            // An entry that is no row; false when it is skipped.
            let mut other = |reader: &mut Self, index: usize, entry: Item, out: &mut EntriesBuilder| {
                let kept = reader.entry(entry, out).at_index(index)?;
                if !kept {
                    let entry = reader.value(entry).at_index(index)?;
                    skipped.push(SkippedEntry { device, index, entry });
                }
                Ok(kept)
            };
            let decoded = match self.row_run(head, tail.clone()) {
                Some(rows) => self.rows(head, tail.clone(), rows, other),
                None => {
                    let mut decoded = EntriesBuilder::default();
                    let mut each = || -> Result<(), SchemaErr> {
                        for (index, entry) in items().enumerate() {
                            match entry.kind() {
                                Kind::Entry(row) => self.row(row, &mut decoded).at_index(index)?,
                                _ => _ = other(self, index, entry, &mut decoded)?,
                            }
                        }
                        Ok(())
                    };
                    each().map(|()| DecodedTrace::Built(decoded.finish()))
                }
            };
            out.push(decoded.at_index(device)?);
        }
        Ok(out)
    }

    /// One trace entry, appended to `out`; false for an action vramkit does
    /// not model (nothing appended).
    fn entry(&mut self, item: Item, out: &mut EntriesBuilder) -> Result<bool, SchemaErr> {
        let mut action = None;
        let mut addr = None;
        let mut device_free = None;
        let mut size = None;
        let mut stream = None;
        let mut time_us = None;
        let mut frames = None;
        let mut compile_context = None;
        let mut user_metadata = None;
        let mut seen = 0u32;
        for &(k, v) in self.dict(item)? {
            let word = self.word(k)?;
            let key = word.name();
            match word {
                Word::Action => {
                    seen |= 1;
                    action = Some(self.word(v).at(key)?);
                }
                Word::Addr => {
                    seen |= 1 << 1;
                    addr = Some(v);
                }
                Word::DeviceFree => {
                    seen |= 1 << 2;
                    device_free = Some(v);
                }
                Word::Size => {
                    seen |= 1 << 3;
                    size = Some(v);
                }
                Word::Stream => {
                    seen |= 1 << 4;
                    stream = Some(v);
                }
                Word::TimeUs => {
                    seen |= 1 << 5;
                    time_us = Some(self.bits64(v).at(key)?);
                }
                Word::CompileContext => {
                    seen |= 1 << 6;
                    compile_context = Some(self.str(v).at(key)?);
                }
                Word::UserMetadata => {
                    seen |= 1 << 7;
                    user_metadata = Some(self.str(v).at(key)?);
                }
                Word::Frames => {
                    seen |= 1 << 8;
                    frames = Some(self.frames(v).at(key)?);
                }
                _ => {
                    let key = self.key_name(k)?;
                    self.entry.unknown.insert(key.to_owned());
                }
            }
        }
        let action = action.ok_or_else(|| SchemaErr::missing("action"))?;
        let Some(kind) = action.action() else { return Ok(false) };
        self.entry.mask |= seen;
        // `oom` records the device's free bytes instead of an address.
        let (addr_key, addr) = if kind == TraceAction::Oom { ("device_free", device_free) } else { ("addr", addr) };
        let number = |value: Option<Item>, key: &str, read: fn(&Self, Item) -> Result<u64, SchemaErr>| {
            match value {
                Some(v) => read(self, v).at(key),
                // Annotations of PyTorch ~2.4 carry no address or size.
                None if kind == TraceAction::UserDefined => Ok(0),
                None => Err(SchemaErr::missing(key)),
            }
        };
        let entry = Entry {
            action: kind,
            addr: number(addr, addr_key, Self::u64)?,
            size: number(size, "size", Self::u64)?,
            stream: number(stream, "stream", Self::bits64)?,
        };
        let ids = [
            frames.map_or(0, |f| out.stack_id(&f)),
            compile_context.map_or(0, |s| out.string_id(s)),
            user_metadata.map_or(0, |s| out.string_id(s)),
        ];
        out.push(entry, time_us, ids);
        Ok(true)
    }
}

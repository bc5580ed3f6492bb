//! What trace entries make again: stacks and short strs.
//!
//! PyTorch records every trace entry's stack as a new list of the frame
//! dicts it memoized, so a long snapshot holds millions of lists whose
//! pickled bodies (`MARK`, a `BINGET` or `LONG_BINGET` per frame,
//! `APPENDS`) repeat a few thousand byte strings. The scan keeps each body
//! it has made a list of, with the range of the tree's item buffer that
//! list's items went to. A body met again names the same items, as long as
//! no memo slot has been put again since (that forgets them all): the new
//! list shares the range, no item is read or stored twice, and the decoder
//! sees the same items (and decodes the stack once).
//!
//! Likewise every entry's `compile_context` is a new str, `"N/A"` almost
//! always: a short str made again is the node made last time (strs never
//! change), so the decoder looks it up once.

use crate::pickle::op;
use crate::fx::{FxHashMap, FxHasher};
use crate::tree::Item;
use std::hash::Hasher;

/// Bytes of bodies kept; past it they are all forgotten (a bound on what a
/// file of endless distinct stacks can make this hold).
const MAX_BYTES: usize = 64 << 20;

/// List bodies read so far, by a hash of their bytes.
#[derive(Debug, Default)]
pub(super) struct KnownLists {
    /// Per hash, the body last kept with it (at `bytes[at..at + len]`)
    /// and the range of the item buffer its list holds.
    by_hash: FxHashMap<u64, (usize, usize, (usize, usize))>,
    bytes: Vec<u8>,
}

impl KnownLists {
    /// The item range of the list made of `body`, if one was.
    #[inline]
    pub(super) fn get(&self, body: &[u8]) -> Option<(usize, usize)> {
        if self.by_hash.is_empty() {
            return None;
        }
        let &(at, len, items) = self.by_hash.get(&hash(body))?;
        (self.bytes.get(at..at + len)? == body).then_some(items)
    }

    /// Keeps `body`, whose list holds the item range `items`.
    pub(super) fn remember(&mut self, body: &[u8], items: (usize, usize)) {
        if self.bytes.len() + body.len() > MAX_BYTES {
            self.forget();
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(body);
        self.by_hash.insert(hash(body), (at, body.len(), items));
    }

    /// Forgets every body (a memo slot holds something else now).
    pub(super) fn forget(&mut self) {
        if !self.by_hash.is_empty() {
            self.by_hash.clear();
            self.bytes.clear();
        }
    }
}

/// Longest str kept.
const SHORT: usize = 23;
/// Strs kept (by their length and first and last bytes).
const STR_SLOTS: usize = 16;

/// The last short strs made, and their nodes.
#[derive(Debug, Default)]
pub(super) struct KnownStrs {
    slots: [Option<(u8, [u8; SHORT], Item)>; STR_SLOTS],
}

impl KnownStrs {
    fn slot(text: &[u8]) -> usize {
        match text {
            [] => 0,
            [first, .., last] => (text.len() + usize::from(*first) * 3 + usize::from(*last)) % STR_SLOTS,
            [only] => (1 + usize::from(*only)) % STR_SLOTS,
        }
    }

    /// The node of a str `text` made before, if it is kept.
    #[inline]
    pub(super) fn get(&self, text: &[u8]) -> Option<Item> {
        let (len, bytes, item) = self.slots[Self::slot(text)]?;
        (bytes.get(..usize::from(len))? == text).then_some(item)
    }

    /// Keeps `item`, a str node of `text`, if `text` is short.
    pub(super) fn remember(&mut self, text: &[u8], item: Item) {
        if text.len() <= SHORT {
            let mut bytes = [0; SHORT];
            bytes[..text.len()].copy_from_slice(text);
            self.slots[Self::slot(text)] = Some((text.len() as u8, bytes, item));
        }
    }
}

fn hash(body: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(body);
    hasher.write_usize(body.len());
    hasher.finish()
}

/// The window range of a list body of memo references only from `p`
/// (`MARK`, references, `APPENDS`; or one reference and `APPEND`), if that
/// is what is there and the list ends with it (the next opcode does not add
/// to it: no second batch, no `APPEND`).
pub(super) fn refs_body(d: &[u8], p: usize) -> Option<(usize, usize)> {
    let end = match *d.get(p)? {
        op::MARK => {
            let mut q = p + 1;
            loop {
                match *d.get(q)? {
                    op::BINGET => q += 2,
                    op::LONG_BINGET => q += 5,
                    op::APPENDS => break q + 1,
                    _ => return None,
                }
            }
        }
        op::BINGET if d.get(p + 2) == Some(&op::APPEND) => p + 3,
        op::LONG_BINGET if d.get(p + 5) == Some(&op::APPEND) => p + 6,
        _ => return None,
    };
    let adds = match *d.get(end)? {
        op::MARK | op::EMPTY_DICT => true,
        op::BINGET => d.get(end + 2) == Some(&op::APPEND),
        op::LONG_BINGET => d.get(end + 5) == Some(&op::APPEND),
        _ => false,
    };
    (!adds).then_some((p, end))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::pickle::read::parse;
    use crate::value::Value;
    use crate::read_snapshot_bytes;
    use proptest::prelude::*;
    use vramkit_core::snapshot::Frame;

    #[test]
    fn a_body_is_known_by_its_bytes_until_forgotten() {
        let body = [op::MARK, op::BINGET, 7, op::LONG_BINGET, 1, 2, 0, 0, op::APPENDS];
        let mut known = KnownLists::default();
        assert_eq!(known.get(&body), None);
        known.remember(&body, (40, 2));
        assert_eq!(known.get(&body), Some((40, 2)));
        assert_eq!(known.get(&body[..body.len() - 1]), None);
        let mut other = body;
        other[2] = 8;
        assert_eq!(known.get(&other), None);
        // What the hash finds is compared, byte for byte.
        known.bytes[2] ^= 1;
        assert_eq!(known.get(&body), None);
        known.forget();
        known.remember(&body, (40, 2));
        known.forget();
        assert_eq!(known.get(&body), None);
    }

    #[test]
    fn a_short_str_is_known_by_its_bytes() {
        let (na, other) = (Item::small_int(1).expect("small"), Item::small_int(2).expect("small"));
        let mut known = KnownStrs::default();
        assert_eq!(known.get(b"N/A"), None);
        known.remember(b"N/A", na);
        assert_eq!(known.get(b"N/A"), Some(na));
        assert_eq!((known.get(b"N/B"), known.get(b"N/AA"), known.get(b"")), (None, None, None));
        // The same slot (length, first and last bytes), other bytes.
        known.remember(b"aXb", other);
        assert_eq!(known.get(b"aYb"), None);
        assert_eq!(known.get(b"aXb"), Some(other));
        let long = [b'x'; SHORT + 1];
        known.remember(&long, other);
        assert_eq!(known.get(&long), None, "only short strs are kept");
    }

    #[test]
    fn a_body_is_memo_references_to_the_end_of_the_list() {
        let mut d = vec![op::MARK, op::BINGET, 7, op::LONG_BINGET, 1, 2, 0, 0, op::APPENDS];
        for (next, ends) in [
            (vec![op::SETITEMS], true),
            (vec![op::BINGET, 3, op::BINGET], true),
            (vec![op::BINGET, 3, op::APPEND], false),
            (vec![op::LONG_BINGET, 3, 0, 0, 0, op::APPEND], false),
            (vec![op::MARK], false),
            (vec![op::EMPTY_DICT], false),
        ] {
            let mut bytes = d.clone();
            bytes.extend(next);
            assert_eq!(refs_body(&bytes, 0), ends.then_some((0, 9)), "{bytes:?}");
        }
        assert_eq!(refs_body(&d, 0), None, "the input ends before the next opcode");
        assert_eq!(refs_body(&[op::BINGET, 3, op::APPEND, op::SETITEMS], 0), Some((0, 3)), "one item");
        assert_eq!(refs_body(&[op::LONG_BINGET, 3, 0, 0, 0, op::APPEND, op::SETITEMS], 0), Some((0, 6)));
        assert_eq!(refs_body(&[op::BINGET, 3, op::SETITEMS], 0), None, "not an item of the list");
        d[3] = op::EMPTY_DICT;
        d.push(op::SETITEMS);
        assert_eq!(refs_body(&d, 0), None, "a new frame in the body");
    }

    /// A snapshot as PyTorch pickles one: each entry's stack a new list
    /// (its own `Arc`) of frame dicts shared by all, `stacks[k]` naming
    /// frames of `frames`.
    fn document(frames: &[(usize, i64, usize)], stacks: &[Vec<usize>], entries: &[usize]) -> Value {
        let frames: Vec<Value> = frames
            .iter()
            .map(|&(file, line, name)| {
                Value::dict(vec![
                    (Value::str("filename"), Value::str(&format!("/src/m{file}.py"))),
                    (Value::str("line"), Value::int(i128::from(line))),
                    (Value::str("name"), Value::str(&format!("f{name}"))),
                ])
            })
            .collect();
        let trace = entries
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let stack = &stacks[k % stacks.len()];
                Value::dict(vec![
                    (Value::str("action"), Value::str(["alloc", "free_requested", "free_completed"][i % 3])),
                    (Value::str("addr"), Value::int(0x7f00_0000_0000 + i as i128 * 512)),
                    (Value::str("size"), Value::int(512)),
                    (Value::str("stream"), Value::int(0)),
                    (Value::str("compile_context"), Value::str("N/A")),
                    (Value::str("frames"), Value::list(stack.iter().map(|&f| frames[f % frames.len()].clone()).collect())),
                ])
            })
            .collect();
        Value::dict(vec![
            (Value::str("segments"), Value::list(Vec::new())),
            (Value::str("device_traces"), Value::list(vec![Value::list(trace)])),
        ])
    }

    proptest! {
        /// Entries whose new stack lists hold the same frames read as the
        /// JSON of the same document does, their items stored once.
        #[test]
        fn new_lists_of_the_same_frames_read_as_json(
            frames in proptest::collection::vec((0usize..3, -1i64..500, 0usize..9), 1..12),
            stacks in proptest::collection::vec(proptest::collection::vec(0usize..12, 0..40), 1..6),
            entries in proptest::collection::vec(0usize..6, 1..60),
        ) {
            let doc = document(&frames, &stacks, &entries);
            let pickle = crate::pickle::write::to_vec(&doc).expect("writes");
            let mut json = Vec::new();
            crate::json::write_value(&doc, &mut json).expect("writes");
            let expected = read_snapshot_bytes(&json).expect("reads").snapshot;
            prop_assert_eq!(&read_snapshot_bytes(&pickle).expect("reads").snapshot, &expected);
            // Each stack's items are stored at most twice: when its frames
            // are new, and when its body is first all memo references.
            let most: usize = stacks.iter().map(|s| 2 * s.len()).sum::<usize>() + 1;
            prop_assert!(parse(&pickle).expect("parses").tree.items_len() <= most);
        }
    }

    /// Opcodes: a str, memoized.
    pub(in crate::pickle::read) fn str_op(out: &mut Vec<u8>, text: &str) {
        out.extend([op::SHORT_BINUNICODE, text.len() as u8]);
        out.extend(text.as_bytes());
        out.push(op::MEMOIZE);
    }

    /// Opcodes of a snapshot up to its one device trace's entries, memo
    /// slots 0 to 5 taken (the entries and [`document_end`] to follow).
    pub(in crate::pickle::read) fn document_start() -> Vec<u8> {
        let mut d = vec![op::PROTO, 4, op::EMPTY_DICT, op::MEMOIZE, op::MARK];
        str_op(&mut d, "segments"); // 1
        d.extend([op::EMPTY_LIST, op::MEMOIZE]); // 2
        str_op(&mut d, "device_traces"); // 3
        d.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK, op::EMPTY_LIST, op::MEMOIZE, op::MARK]); // 4, 5
        d
    }

    /// Closes what [`document_start`] opened.
    pub(in crate::pickle::read) fn document_end(d: &mut Vec<u8>) {
        d.extend([op::APPENDS, op::APPENDS, op::SETITEMS, op::STOP]);
    }

    /// A memo slot put again between two lists of the same bytes: the
    /// second holds what the slot holds then.
    #[test]
    fn a_slot_put_again_changes_what_the_same_bytes_name() {
        let mut d = document_start();
        // Frames at 6, 12 and 15.
        d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK]);
        str_op(&mut d, "filename"); // 7
        str_op(&mut d, "a.py"); // 8
        str_op(&mut d, "line"); // 9
        d.extend([op::BININT1, 1]);
        str_op(&mut d, "name"); // 10
        str_op(&mut d, "f"); // 11
        d.extend([op::SETITEMS, op::POP]);
        for (file, line, name) in [("b.py", 2, "g"), ("c.py", 3, "h")] {
            d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK, op::BINGET, 7]); // 12, 15
            str_op(&mut d, file); // 13, 16
            d.extend([op::BINGET, 9, op::BININT1, line, op::BINGET, 10]);
            str_op(&mut d, name); // 14, 17
            d.extend([op::SETITEMS, op::POP]);
        }
        let body = [op::MARK, op::BINGET, 6, op::BINGET, 12, op::APPENDS];
        // The first entry brings the keys (18 the dict, 19 to 24), its list 25.
        d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK]);
        for (key, value) in [("action", None), ("addr", Some(0)), ("size", Some(1)), ("stream", Some(0))] {
            str_op(&mut d, key);
            match value {
                None => str_op(&mut d, "alloc"),
                Some(n) => d.extend([op::BININT1, n]),
            }
        }
        str_op(&mut d, "frames");
        d.extend([op::EMPTY_LIST, op::MEMOIZE]);
        d.extend(body);
        d.push(op::SETITEMS);
        let again = |d: &mut Vec<u8>| {
            d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK, op::BINGET, 19, op::BINGET, 20, op::BINGET, 21, op::BININT1, 0]);
            d.extend([op::BINGET, 22, op::BININT1, 1, op::BINGET, 23, op::BININT1, 0, op::BINGET, 24, op::EMPTY_LIST, op::MEMOIZE]);
            d.extend(body);
            d.push(op::SETITEMS);
        };
        again(&mut d);
        // Slot 6 now holds the third frame.
        d.extend([op::BINGET, 15, op::BINPUT, 6, op::POP]);
        again(&mut d);
        document_end(&mut d);
        let trace = &read_snapshot_bytes(&d).expect("reads").snapshot.device_traces[0];
        let frame = |file: &str, line: i64, name: &str| Frame { filename: file.into(), line, name: name.into() };
        let stacks: Vec<Vec<Frame>> = trace.iter().map(|e| e.frames.as_deref().expect("a stack").to_vec()).collect();
        let (first, second) = (vec![frame("a.py", 1, "f"), frame("b.py", 2, "g")], vec![frame("c.py", 3, "h"), frame("b.py", 2, "g")]);
        assert_eq!(stacks, [first.clone(), first, second]);
        let parsed = parse(&d).expect("parses");
        assert_eq!(parsed.tree.entry_rows.len(), 3, "every entry a row");
    }
}

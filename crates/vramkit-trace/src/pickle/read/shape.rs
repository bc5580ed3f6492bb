//! Trace entries read by their shape: the bytes of the last few usual
//! entries, with the parts that change from entry to entry masked out.
//!
//! One pickler writes a snapshot's millions of entries in a handful of
//! layouts: the same keys in the same order, each a `BINGET` of the same
//! memo slot, each int in the same opcode of the same width. Once
//! [`usual_entry`](super::Unpickler::usual_entry) has read an entry, its
//! bytes are a *shape*, masked where the next entry of that layout may
//! differ: the ints' payloads and the memo indices of the action and the
//! stack. An entry whose bytes equal a shape's under its mask is read from
//! it in a straight line: eight words compared, the ints taken from where
//! the shape says they are, the action and stack looked up as
//! `usual_entry` looks them up.
//!
//! It reads exactly what `usual_entry` would read, or nothing (and then
//! `usual_entry` reads the entry): the opcodes, int widths, key slots and
//! `SETITEMS` are the bytes `usual_entry` checked in the shape's entry; a
//! key slot still spells its key, because a memo put that changes what a
//! slot spells forgets every shape; a negative int where none may be, an
//! `oom` action, a stack that is not a list already seen, and a memo slot
//! already taken for the dict are all left to `usual_entry`, as is an entry
//! too close to the end of the window for the whole shape to be compared.

use super::entry::Put;
use super::Unpickler;
use crate::entries::Entry;
use crate::pickle::op;
use crate::words::Word;
use vramkit_core::snapshot::TraceAction;

/// Longest entry a shape describes, in bytes.
const MAX_LEN: usize = 56;
/// Bytes compared from an entry's start (those past its end masked out).
const COMPARED: usize = 64;
/// Bytes looked at from an entry's start: an int's payload is read as the
/// 8 bytes from its first, which lies before `MAX_LEN`.
const WINDOW: usize = COMPARED + 8;
/// Shapes kept, the one used last first.
const SLOTS: usize = 4;

/// Where an int's payload lies in a shape's entry and how to read it: the
/// 8 bytes from `at`, cut to the payload's bytes (`low`) and sign-extended
/// from its top bit (`sign`; 0 when the opcode's int is unsigned).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Int {
    at: u8,
    low: u64,
    sign: u64,
}

impl Int {
    /// The int opcode at `b[p]` (`BININT1`, `BININT2`, `BININT`, or
    /// `LONG1` of 1 to 8 bytes), as [`int_at`](super::entry) reads it, and
    /// the index past it.
    fn of(b: &[u8], p: usize) -> Option<(Int, usize)> {
        let (at, bytes, signed) = match *b.get(p)? {
            op::BININT1 => (p + 1, 1, false),
            op::BININT2 => (p + 1, 2, false),
            op::BININT => (p + 1, 4, true),
            op::LONG1 => match *b.get(p + 1)? {
                n @ 1..=8 => (p + 2, usize::from(n), true),
                _ => return None,
            },
            _ => return None,
        };
        let end = at + bytes;
        let low = u64::MAX >> (64 - 8 * bytes);
        let sign = if signed { 1 << (8 * bytes - 1) } else { 0 };
        (end <= b.len()).then_some((Int { at: at as u8, low, sign }, end))
    }

    /// Its 64 bits in `w` (an entry's first bytes) and whether it is negative.
    #[inline(always)]
    fn read(self, w: &[u8; WINDOW]) -> (u64, bool) {
        let at = usize::from(self.at) & 63;
        let x = u64::from_le_bytes(w[at..at + 8].try_into().expect("8 bytes"));
        // Sign extension without a branch: flipping the sign bit and
        // subtracting it leaves a clear one alone and extends a set one.
        let n = ((x & self.low) ^ self.sign).wrapping_sub(self.sign);
        (n, (n as i64) < 0)
    }
}

/// One layout of the usual entry.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Bytes, `EMPTY_DICT` to `SETITEMS`.
    len: u8,
    /// The entry's bytes, and which of them every entry of this layout
    /// has (0xff; the rest, and the bytes past `len`, 0).
    bytes: [u8; COMPARED],
    mask: [u8; COMPARED],
    /// The dict is put in the next memo slot (`MEMOIZE`); else not put.
    memoize: bool,
    /// Index of the action's memo index (a `BINGET`'s byte).
    action_at: u8,
    addr: Int,
    size: Int,
    stream: Int,
    time_us: Option<Int>,
    /// Index of the stack's memo index, if the entry has one.
    frames_at: Option<u8>,
}

impl Shape {
    const EMPTY: Shape = Shape {
        len: 0,
        bytes: [0; COMPARED],
        mask: [0; COMPARED],
        memoize: false,
        action_at: 0,
        addr: Int { at: 0, low: 0, sign: 0 },
        size: Int { at: 0, low: 0, sign: 0 },
        stream: Int { at: 0, low: 0, sign: 0 },
        time_us: None,
        frames_at: None,
    };

    /// The shape of `b`, a usual entry's bytes (`usual_entry` read them
    /// with the memo put `put` and `words` as the key slots' words), if it
    /// has one: `None` past `MAX_LEN`, for a dict put at a given index, and
    /// for anything `usual_entry` would not have read.
    fn of(b: &[u8], put: Put, words: &[Option<Word>]) -> Option<Shape> {
        if b.len() > MAX_LEN {
            return None;
        }
        let (memoize, mut p) = match (put, b) {
            (Put::None, [op::EMPTY_DICT, op::MARK, ..]) => (false, 2),
            (Put::Memoize, [op::EMPTY_DICT, op::MEMOIZE, op::MARK, ..]) => (true, 3),
            _ => return None,
        };
        let mut fixed = [0xffu8; MAX_LEN];
        let mut shape = Shape { len: b.len() as u8, memoize, ..Shape::EMPTY };
        let (mut action, mut addr, mut size, mut stream) = (None, None, None, None);
        while p + 1 < b.len() {
            let &[op::BINGET, index] = b.get(p..p + 2)? else { return None };
            p += 2;
            let word = words.get(usize::from(index)).copied().flatten()?;
            if matches!(word, Word::Action | Word::Frames) {
                let &[op::BINGET, _] = b.get(p..p + 2)? else { return None };
                fixed[p + 1] = 0;
                let at = Some((p + 1) as u8);
                *if word == Word::Action { &mut action } else { &mut shape.frames_at } = at;
                p += 2;
                continue;
            }
            let (int, end) = Int::of(b, p)?;
            fixed[usize::from(int.at)..end].fill(0);
            p = end;
            *match word {
                Word::Addr => &mut addr,
                Word::Size => &mut size,
                Word::Stream => &mut stream,
                Word::TimeUs => &mut shape.time_us,
                _ => return None,
            } = Some(int);
        }
        if b.get(p) != Some(&op::SETITEMS) || p + 1 != b.len() {
            return None;
        }
        (shape.action_at, shape.addr, shape.size, shape.stream) = (action?, addr?, size?, stream?);
        for (i, &byte) in b.iter().enumerate() {
            shape.mask[i] = fixed[i];
            shape.bytes[i] = byte & fixed[i];
        }
        Some(shape)
    }

    /// Whether an entry whose first bytes are `w` has this layout: the
    /// 64 bytes compared as eight words, a loop of known length that the
    /// compiler unrolls into a few vector instructions.
    #[inline(always)]
    fn fits(&self, w: &[u8; WINDOW]) -> bool {
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let mut differ = 0;
        for i in 0..COMPARED / 8 {
            differ |= (word(w, i) ^ word(&self.bytes, i)) & word(&self.mask, i);
        }
        differ == 0
    }
}

/// The shapes of the last usual entries of different layouts.
#[derive(Debug)]
pub(super) struct Shapes {
    /// Used last first; `len` of them.
    slots: [Shape; SLOTS],
    len: usize,
    /// Off: every entry goes to `usual_entry` (to compare, in tests).
    pub(super) on: bool,
    /// Entries read by a shape (for tests to know they were).
    #[cfg(test)]
    pub(super) hits: std::rc::Rc<std::cell::Cell<usize>>,
}

impl Default for Shapes {
    fn default() -> Shapes {
        Shapes {
            slots: [Shape::EMPTY; SLOTS],
            len: 0,
            on: true,
            #[cfg(test)]
            hits: std::rc::Rc::default(),
        }
    }
}

impl Shapes {
    /// Forgets every shape (a key slot may spell something else now).
    #[inline]
    pub(super) fn forget(&mut self) {
        self.len = 0;
    }

    /// The shape `words` fits, moved to the front.
    #[inline(always)]
    fn find(&mut self, w: &[u8; WINDOW]) -> Option<&Shape> {
        let k = self.slots[..self.len].iter().position(|s| s.fits(w))?;
        if k > 0 {
            self.slots[..=k].rotate_right(1);
        }
        Some(&self.slots[0])
    }

    /// Puts `shape` first, dropping the one used longest ago if all slots are taken.
    fn learn(&mut self, shape: Shape) {
        self.len = (self.len + 1).min(SLOTS);
        self.slots[..self.len].rotate_right(1);
        self.slots[0] = shape;
    }
}

impl Unpickler<'_> {
    /// The entry at `start` read by a shape it fits, as
    /// [`usual_entry`](Self::usual_entry) would read it; false, having
    /// changed nothing, when it fits none or the shape leaves it to `usual_entry`.
    #[inline(always)]
    pub(super) fn shaped_entry(&mut self, start: usize) -> bool {
        if self.shapes.len == 0 {
            return false;
        }
        let Some(w) = self.input.data().get(start..start + WINDOW).and_then(|b| <&[u8; WINDOW]>::try_from(b).ok()) else {
            return false;
        };
        let Some(shape) = self.shapes.find(w) else { return false };
        let (memoize, len, action_index) = (shape.memoize, usize::from(shape.len), usize::from(w[usize::from(shape.action_at) & 63]));
        let ((addr, addr_negative), (size, size_negative)) = (shape.addr.read(w), shape.size.read(w));
        let time_us = shape.time_us.map(|t| t.read(w).0);
        let stream = shape.stream.read(w).0;
        let frames_index = shape.frames_at.map(|at| usize::from(w[usize::from(at) & 63]));
        let (put, slot) = if memoize { (Put::Memoize, self.memo_len) } else { (Put::None, usize::MAX) };
        let action = self.key_words.get(action_index).copied().flatten().and_then(Word::action);
        let Some(action) = action.filter(|&a| a != TraceAction::Oom) else { return false };
        if addr_negative || size_negative || (slot != usize::MAX && self.slot_taken(slot)) {
            return false;
        }
        let Some(frames) = self.stack_id(frames_index, slot) else { return false };
        self.commit_row(put, Entry { action, addr, size, stream }, time_us, [frames, 0, 0], start + len);
        #[cfg(test)]
        self.shapes.hits.set(self.shapes.hits.get() + 1);
        true
    }

    /// Remembers the shape of the usual entry just read from `start` to
    /// `end` with the memo put `put`, if it has one.
    #[cold]
    #[inline(never)]
    pub(super) fn learn_shape(&mut self, start: usize, end: usize, put: Put) {
        if let Some(shape) = Shape::of(&self.input.data()[start..end], put, &self.key_words) {
            self.shapes.learn(shape);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_shapes;
    use crate::pickle::op;
    use proptest::prelude::*;

    /// How an int is written: `BININT1`, `BININT2`, `BININT`, or `LONG1`
    /// of 0 to 9 bytes.
    #[derive(Clone, Copy, Debug)]
    enum Form {
        K,
        M,
        J,
        Long(u8),
    }

    fn form() -> impl Strategy<Value = Form> {
        prop_oneof![
            3 => Just(Form::K),
            3 => Just(Form::M),
            3 => Just(Form::J),
            9 => (1u8..=8).prop_map(Form::Long),
            1 => prop_oneof![Just(Form::Long(0)), Just(Form::Long(9))],
        ]
    }

    /// An int field: its form and bits (cut to the form's width).
    fn int() -> impl Strategy<Value = (Form, u64)> {
        let bits = prop_oneof![
            6 => 0u64..600,
            3 => (0u64..1 << 40).prop_map(|a| a | 0x7f00_0000_0000),
            1 => prop_oneof![any::<u64>(), Just(u64::MAX), Just(1 << 63)],
        ];
        (form(), bits)
    }

    #[derive(Clone, Debug)]
    enum Step {
        /// A trace entry. `action`: a memo slot, an action's most often;
        /// `ints`: address, size, stream and time (`timed`); `frames`:
        /// none, the stack list, a str, or the dict's own slot; `put`:
        /// none, `MEMOIZE`, or `BINPUT` to the slot this many past the
        /// memo's length; `frame_at`: a `FRAME` before the n-th opcode.
        Entry { action: u8, ints: [(Form, u64); 4], timed: bool, frames: u8, put: (u8, u8), frame_at: Option<u8> },
        /// Puts a str in memo slot `slot` (a key's, often): what it spells changes.
        Reput { slot: u8, word: u8 },
    }

    /// What an entry written again changes: ints (their forms kept), the
    /// action, the stack, the memo put. The layout stays, or nearly.
    #[derive(Clone, Debug)]
    struct Again {
        step: usize,
        bits: [Option<u64>; 4],
        action: Option<u8>,
        frames: Option<u8>,
        put: Option<(u8, u8)>,
    }

    /// Memo slots: 6.. the strs of `WORDS`, then the stack list.
    const WORDS: [&str; 11] = ["action", "addr", "size", "stream", "time_us", "frames", "alloc", "free_requested", "free_completed", "oom", "segment_map"];
    const FIRST_WORD: u8 = 6;
    const STACK: u8 = FIRST_WORD + WORDS.len() as u8;

    fn action() -> impl Strategy<Value = u8> {
        prop_oneof![8 => (FIRST_WORD + 6)..(FIRST_WORD + 9), 1 => 0u8..=STACK + 2]
    }

    fn frames() -> impl Strategy<Value = u8> {
        prop_oneof![4 => Just(0u8), 4 => Just(1), 1 => Just(2), 1 => Just(3)]
    }

    fn put() -> impl Strategy<Value = (u8, u8)> {
        (prop_oneof![4 => Just(0u8), 4 => Just(1), 1 => Just(2)], 0u8..3)
    }

    fn step() -> impl Strategy<Value = Step> {
        let entry = (action(), [int(), int(), int(), int()], any::<bool>(), frames(), put(), proptest::option::weighted(0.05, 0u8..14))
            .prop_map(|(action, ints, timed, frames, put, frame_at)| Step::Entry { action, ints, timed, frames, put, frame_at });
        prop_oneof![
            30 => entry,
            1 => (FIRST_WORD..STACK, 0u8..WORDS.len() as u8).prop_map(|(slot, word)| Step::Reput { slot, word }),
        ]
    }

    fn again() -> impl Strategy<Value = Again> {
        let bits = || proptest::option::weighted(0.3, int().prop_map(|(_, bits)| bits));
        (0usize..6, [bits(), bits(), bits(), bits()], proptest::option::weighted(0.1, action()), proptest::option::weighted(0.1, frames()), proptest::option::weighted(0.1, put()))
            .prop_map(|(step, bits, action, frames, put)| Again { step, bits, action, frames, put })
    }

    impl Again {
        /// Its step, changed.
        fn apply(&self, steps: &[Step]) -> Step {
            let mut step = steps[self.step % steps.len()].clone();
            if let Step::Entry { action, ints, frames, put, .. } = &mut step {
                for (int, bits) in ints.iter_mut().zip(self.bits) {
                    int.1 = bits.unwrap_or(int.1);
                }
                *action = self.action.unwrap_or(*action);
                *frames = self.frames.unwrap_or(*frames);
                *put = self.put.unwrap_or(*put);
            }
            step
        }
    }

    fn str_op(out: &mut Vec<u8>, text: &str) {
        out.extend([op::SHORT_BINUNICODE, text.len() as u8]);
        out.extend(text.as_bytes());
    }

    fn int_op(out: &mut Vec<u8>, (form, bits): (Form, u64)) {
        match form {
            Form::K => out.extend([op::BININT1, bits as u8]),
            Form::M => {
                out.push(op::BININT2);
                out.extend((bits as u16).to_le_bytes());
            }
            Form::J => {
                out.push(op::BININT);
                out.extend((bits as u32).to_le_bytes());
            }
            Form::Long(n) => {
                out.extend([op::LONG1, n]);
                let bytes = bits.to_le_bytes();
                out.extend(bytes.iter().chain(std::iter::repeat(&((bits >> 56) as u8))).take(usize::from(n)));
            }
        }
    }

    /// A snapshot pickle: the strs and the stack list memoized first, then
    /// the steps in the one device trace.
    fn document(steps: &[Step]) -> Vec<u8> {
        let mut out = vec![op::PROTO, 4, op::EMPTY_DICT, op::MEMOIZE, op::MARK];
        str_op(&mut out, "segments");
        out.extend([op::MEMOIZE, op::EMPTY_LIST, op::MEMOIZE]);
        str_op(&mut out, "device_traces");
        out.extend([op::MEMOIZE, op::EMPTY_LIST, op::MEMOIZE, op::MARK, op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
        for word in WORDS {
            str_op(&mut out, word);
            out.extend([op::MEMOIZE, op::POP]);
        }
        out.extend([op::EMPTY_LIST, op::MEMOIZE, op::POP]);
        // Memo slots taken: `MEMOIZE` uses the count as the next one.
        let mut taken: std::collections::BTreeSet<usize> = (0..=usize::from(STACK)).collect();
        let key = |out: &mut Vec<u8>, k: u8| out.extend([op::BINGET, FIRST_WORD + k]);
        for step in steps {
            match *step {
                Step::Entry { action, ints, timed, frames, put, frame_at } => {
                    let mut ops: Vec<Vec<u8>> = Vec::new();
                    let mut head = vec![op::EMPTY_DICT];
                    let own = match put {
                        (0, _) => None,
                        (1, _) => Some(taken.len()),
                        (_, past) => Some(taken.len() + usize::from(past)),
                    };
                    let own = own.and_then(|slot| u8::try_from(slot).ok());
                    match (put.0, own) {
                        (1, Some(_)) => head.push(op::MEMOIZE),
                        (_, Some(slot)) => head.extend([op::BINPUT, slot]),
                        _ => {}
                    }
                    taken.extend(own.map(usize::from));
                    ops.push(head);
                    ops.push(vec![op::MARK]);
                    let mut pair = |k: u8, value: Vec<u8>| {
                        let mut bytes = Vec::new();
                        key(&mut bytes, k);
                        ops.push(bytes);
                        ops.push(value);
                    };
                    pair(0, vec![op::BINGET, action]);
                    for (k, &int) in ints.iter().enumerate().take(if timed { 4 } else { 3 }) {
                        let mut bytes = Vec::new();
                        int_op(&mut bytes, int);
                        pair(k as u8 + 1, bytes);
                    }
                    match frames {
                        1 => pair(5, vec![op::BINGET, STACK]),
                        2 => pair(5, vec![op::BINGET, FIRST_WORD + 6]),
                        3 => pair(5, vec![op::BINGET, own.unwrap_or(STACK)]),
                        _ => {}
                    }
                    ops.push(vec![op::SETITEMS]);
                    for (i, bytes) in ops.iter().enumerate() {
                        if frame_at == Some(i as u8) {
                            out.push(op::FRAME);
                            out.extend(0u64.to_le_bytes());
                        }
                        out.extend(bytes);
                    }
                }
                Step::Reput { slot, word } => {
                    str_op(&mut out, WORDS[usize::from(word)]);
                    out.extend([op::BINPUT, slot, op::POP]);
                }
            }
        }
        out.extend([op::APPENDS, op::APPENDS, op::SETITEMS, op::STOP]);
        out
    }

    /// What a parse gives, to compare: the rows (every column) and the
    /// document (entries as their dicts, unless a dict holds itself), or
    /// the error; and the entries read by a shape.
    fn outcome(bytes: &[u8], shapes: bool) -> (String, usize) {
        let (parsed, hits) = parse_shapes(bytes, shapes);
        let text = match parsed {
            Ok(p) => format!("{:?}\n{:?}", p.tree.entry_rows, p.tree.freeze(p.root)),
            Err(e) => format!("error: {e}"),
        };
        (text, hits)
    }

    /// Layouts repeated, mixed, broken in every way `usual_entry` refuses
    /// (negative addresses and sizes, `oom`, 9-byte ints, a stack that is
    /// a str or the dict itself, a dict put in a taken slot, `FRAME`s
    /// inside), and keys' slots put again: each entry reads the same with
    /// shapes as without.
    #[test]
    fn entries_read_by_shape_read_as_without() {
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config { cases: 400, ..Default::default() });
        let hits = std::cell::Cell::new(0);
        runner
            .run(&(proptest::collection::vec(step(), 1..6), proptest::collection::vec(again(), 0..80)), |(steps, again)| {
                // A few steps written again and again, so that layouts come again.
                let steps: Vec<Step> = steps.iter().cloned().chain(again.iter().map(|a| a.apply(&steps))).collect();
                let bytes = document(&steps);
                let (with, shaped) = outcome(&bytes, true);
                let (without, none) = outcome(&bytes, false);
                prop_assert_eq!(none, 0);
                prop_assert_eq!(with, without);
                hits.set(hits.get() + shaped);
                Ok(())
            })
            .expect("the same with shapes as without");
        // About a third of some 16,000 entries are.
        assert!(hits.get() > 3_000, "only {} entries were read by a shape", hits.get());
    }
}

//! Trace entries straight into columns.
//!
//! A long snapshot is millions of dicts of one shape, `{action, addr, size,
//! stream, time_us, ..., frames}`. As generic dicts they would cost ~180
//! bytes each in the document; one whose bytes have the usual form goes
//! straight into a row of the tree's `entry_rows` instead (~40 bytes), and
//! the item standing for the dict names its row ([`Item::entry`]).
//!
//! The usual form: `EMPTY_DICT`, its memo put, `MARK`, key/value pairs,
//! `SETITEMS`, with `FRAME`s anywhere between. Each key is a str naming an
//! entry key, a memo reference or first seen here; each value an int
//! opcode, a memo reference, or a str or a list (a stack) first seen here,
//! with its memo put. A new stack's items are memo references (to objects
//! this entry made among them, too) or frames first seen here: dicts whose
//! keys and values are strs, ints, `None`s, bools and memo references. And
//! the entry must decode without error: a modeled action, the address key
//! that action reads (`device_free` for `oom`) and not the other, a size
//! and a stream, ints in range, strs where strs go. Anything else is read
//! by the generic path as before, errors included: the scan changes nothing
//! until it has seen the whole dict, so falling back is just not moving on.

use super::known;
use super::Unpickler;
use crate::pickle::op;
use crate::entries::Entry;
use crate::tree::{Item, Node, Tree};
use crate::words::Word;
use vramkit_core::snapshot::TraceAction;

/// Objects an entry may make (strs, lists and frame dicts seen for the
/// first time): a new stack of a hundred frames from new places, each with
/// a new file name and function name, makes 301. (A bound on the work one
/// entry's scan may do before it gives up.)
const MAX_FRESH: usize = 1024;
/// Memo indices whose schema word is cached (keys are memoized early).
const MAX_CACHED_INDEX: usize = 1 << 20;

/// A memo put after an object.
#[derive(Clone, Copy, Debug)]
pub(super) enum Put {
    None,
    /// `MEMOIZE`: the next free index.
    Memoize,
    /// `BINPUT`/`LONG_BINPUT`.
    At(usize),
}

/// An object the entry makes, in the order it is complete: a str (a range
/// of the window), a list (a range of `fresh_items`) or a frame's dict (a
/// range of `fresh_pairs`). Its memo put is at the index it has in pickle
/// order (`Put::At`), so that the objects inside a list can be made first.
#[derive(Clone, Copy, Debug)]
pub(super) enum Fresh {
    Str { text: (usize, usize), put: Put },
    /// `body`: the window range of its items' bytes, when they are memo
    /// references only (see `known.rs`).
    List { items: (usize, usize), body: Option<(usize, usize)>, put: Put },
    /// A list of the items of the tree's range `items` (a list whose body
    /// was byte for byte this one's).
    Like { items: (usize, usize), put: Put },
    Dict { pairs: (usize, usize), put: Put },
}

impl Fresh {
    fn put(self) -> Put {
        match self {
            Fresh::Str { put, .. } | Fresh::List { put, .. } | Fresh::Like { put, .. } | Fresh::Dict { put, .. } => put,
        }
    }
}

/// An item of a list or dict the entry makes: one that exists, or the
/// `n`-th object the entry makes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Part {
    Item(Item),
    Made(usize),
}

/// A value that is a node: one the memo holds, or one the entry makes.
#[derive(Clone, Copy, Debug)]
enum Ref {
    None,
    Node(usize),
    Fresh(usize),
}

/// The int opcode at `p`, if it is from -2^63 to 2^64-1: its low 64 bits,
/// whether it is negative, and where the next opcode is.
#[inline(always)]
fn int_at(d: &[u8], p: usize) -> Option<(u64, bool, usize)> {
    match *d.get(p)? {
        op::BININT1 => Some((u64::from(*d.get(p + 1)?), false, p + 2)),
        op::BININT2 => {
            let &[a, b] = d.get(p + 1..p + 3)? else { return None };
            Some((u64::from(u16::from_le_bytes([a, b])), false, p + 3))
        }
        op::BININT => {
            let &[a, b, c, e] = d.get(p + 1..p + 5)? else { return None };
            let n = i32::from_le_bytes([a, b, c, e]);
            Some((i64::from(n) as u64, n < 0, p + 5))
        }
        op::LONG1 => {
            let len = usize::from(*d.get(p + 1)?);
            let end = p + 2 + len;
            let (bits, negative) = match d.get(p + 2..p + 10) {
                // Eight bytes at hand (those past the int ignored): sign-extend the int's.
                Some(&[a, b, c, e, f, g, h, i]) if (1..=8).contains(&len) && end <= d.len() => {
                    let shift = 64 - 8 * len as u32;
                    let n = ((u64::from_le_bytes([a, b, c, e, f, g, h, i]) << shift) as i64) >> shift;
                    (n as u64, n < 0)
                }
                _ => long1(d.get(p + 2..end)?)?,
            };
            Some((bits, negative, end))
        }
        _ => None,
    }
}

/// The int at `*p` (see [`int_at`]), moving `*p` past it: its 64 bits if
/// it is in range, `signed` saying whether negative ints are.
#[inline(always)]
fn int_field(d: &[u8], p: &mut usize, signed: bool) -> Option<u64> {
    let (bits, negative, next) = int_at(d, *p)?;
    *p = next;
    (signed || !negative).then_some(bits)
}

/// A `LONG1` int's little-endian two's-complement bytes as [`int_at`]
/// gives it (`None` outside -2^63..2^64).
#[inline]
fn long1(b: &[u8]) -> Option<(u64, bool)> {
    match *b {
        [] => Some((0, false)),
        // Nine bytes: a u64 (sign byte 0), or an i64 sign-extended.
        [.., 0] if b.len() == 9 => Some((low64(&b[..8]), false)),
        [.., high, 0xff] if b.len() == 9 && high >= 0x80 => Some((low64(&b[..8]), true)),
        _ if b.len() > 8 => None,
        _ => {
            let shift = 64 - 8 * b.len() as u32;
            let n = ((low64(b) << shift) as i64) >> shift;
            Some((n as u64, n < 0))
        }
    }
}

/// Up to 8 little-endian bytes as a u64.
#[inline]
fn low64(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |n, &x| n << 8 | u64::from(x))
}

/// What the scan found: everything the commit needs.
#[derive(Debug)]
struct Scanned {
    /// Window index after `SETITEMS`.
    end: usize,
    put: Put,
    entry: Entry,
    time_us: Option<u64>,
    /// Stack, compile context, user metadata.
    refs: [Ref; 3],
}

/// The scan of one dict: read-only on everything but two caches.
struct Scan<'u> {
    data: &'u [u8],
    p: usize,
    /// Bytes of the input left after `data` (for `FRAME` lengths).
    beyond: usize,
    /// Memo indices from here on are kept apart by the unpickler (`memo_sparse`).
    dense_memo: usize,
    memo: &'u [Item],
    tree: &'u Tree,
    /// Per memo index, the schema word code of the str it holds (0: not
    /// known yet); the unpickler clears a slot it puts again.
    key_words: &'u mut Vec<Option<Word>>,
    fresh_items: &'u mut Vec<Part>,
    fresh_pairs: &'u mut Vec<(Part, Part)>,
    fresh: &'u mut Vec<Fresh>,
    known_lists: &'u known::KnownLists,
    /// Memo slots this dict puts: the next `MEMOIZE` index, and each index
    /// put, the lowest apart (references are almost all to slots below it).
    next_memo: usize,
    puts: &'u mut Vec<usize>,
    lowest_put: usize,
}

impl Scan<'_> {
    #[inline(always)]
    fn byte(&self) -> Option<u8> {
        self.data.get(self.p).copied()
    }

    #[inline(always)]
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.data.get(self.p..self.p + N)?;
        self.p += N;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Some(out)
    }

    /// Past any `FRAME`s whose length the input can hold.
    fn frames(&mut self) -> Option<()> {
        while self.byte()? == op::FRAME {
            self.p += 1;
            let len = u64::from_le_bytes(self.bytes::<8>()?);
            let remaining = (self.data.len() - self.p + self.beyond) as u64;
            if len > remaining {
                return None;
            }
        }
        Some(())
    }

    /// An optional memo put; slots already taken (or taken by this dict) are left to the generic path.
    #[inline(always)]
    fn put(&mut self) -> Option<Put> {
        match self.byte() {
            Some(op::MEMOIZE | op::BINPUT | op::LONG_BINPUT) => self.put_slot(),
            _ => Some(Put::None),
        }
    }

    /// The memo put next (one of its opcodes), unless its slot is taken.
    fn put_slot(&mut self) -> Option<Put> {
        let index = match self.byte() {
            Some(op::MEMOIZE) => {
                self.p += 1;
                None
            }
            Some(op::BINPUT) => {
                self.p += 1;
                Some(usize::from(self.bytes::<1>()?[0]))
            }
            Some(op::LONG_BINPUT) => {
                self.p += 1;
                Some(u32::from_le_bytes(self.bytes::<4>()?) as usize)
            }
            _ => return Some(Put::None),
        };
        let slot = index.unwrap_or(self.next_memo);
        let taken = slot >= self.dense_memo || self.memo.get(slot).is_some_and(|&item| item != Item::UNSET) || self.put_here(slot);
        if taken || self.puts.len() > MAX_FRESH {
            return None;
        }
        self.puts.push(slot);
        self.lowest_put = self.lowest_put.min(slot);
        self.next_memo += 1;
        Some(Put::At(slot))
    }

    /// Whether this dict puts memo slot `index`.
    #[inline(always)]
    fn put_here(&self, index: usize) -> bool {
        index >= self.lowest_put && self.puts.contains(&index)
    }

    /// The memo index a `BINGET`/`LONG_BINGET` refers to.
    #[inline(always)]
    fn get_index(&mut self) -> Option<usize> {
        match self.byte()? {
            op::BINGET => {
                let index = *self.data.get(self.p + 1)?;
                self.p += 2;
                Some(usize::from(index))
            }
            op::LONG_BINGET => {
                self.p += 1;
                Some(u32::from_le_bytes(self.bytes::<4>()?) as usize)
            }
            _ => None,
        }
    }

    /// A memo reference to an item stored before this dict.
    #[inline(always)]
    fn memo_ref(&mut self) -> Option<Item> {
        let index = self.get_index()?;
        self.memo_item(index)
    }

    #[inline(always)]
    fn memo_item(&self, index: usize) -> Option<Item> {
        if self.put_here(index) {
            return None;
        }
        self.memo.get(index).copied().filter(|&item| item != Item::UNSET)
    }

    /// A memo reference to a str naming a schema word (cached per memo index).
    #[inline(always)]
    fn word_ref(&mut self) -> Option<Word> {
        let index = self.get_index()?;
        match self.key_words.get(index) {
            Some(&Some(word)) => Some(word),
            _ => self.classify(index),
        }
    }

    /// The word memo slot `index` spells, cached for the next time.
    #[cold]
    fn classify(&mut self, index: usize) -> Option<Word> {
        let word = Word::classify(self.tree.as_str(self.memo_item(index)?)?);
        if index < MAX_CACHED_INDEX {
            if index >= self.key_words.len() {
                self.key_words.resize(index + 1, None);
            }
            self.key_words[index] = Some(word);
        }
        Some(word)
    }

    fn make(&mut self, fresh: Fresh) -> Option<usize> {
        if self.fresh.len() >= MAX_FRESH {
            return None;
        }
        self.fresh.push(fresh);
        Some(self.fresh.len() - 1)
    }

    /// A str: one the memo holds, or a new one (with its put).
    fn str(&mut self) -> Option<(Ref, Option<Word>)> {
        let len = match self.byte()? {
            op::BINGET | op::LONG_BINGET => {
                let item = self.memo_ref()?;
                let Some(Node::Str { .. }) = self.tree.node(item) else { return None };
                return Some((Ref::Node(item.node_id()?), None));
            }
            op::SHORT_BINUNICODE => {
                self.p += 1;
                usize::from(self.bytes::<1>()?[0])
            }
            op::BINUNICODE => {
                self.p += 1;
                u32::from_le_bytes(self.bytes::<4>()?) as usize
            }
            _ => return None,
        };
        let start = self.p;
        let text = std::str::from_utf8(self.data.get(start..start + len)?).ok()?;
        let word = Word::classify(text);
        self.p += len;
        let put = self.put()?;
        Some((Ref::Fresh(self.make(Fresh::Str { text: (start, start + len), put })?), Some(word)))
    }

    /// The action a str names, if vramkit models it.
    #[inline(always)]
    fn action(&mut self) -> Option<TraceAction> {
        let word = match self.byte()? {
            op::BINGET | op::LONG_BINGET => self.word_ref()?,
            _ => self.str()?.1?,
        };
        word.action()
    }

    /// A list: one the memo holds, or a new one of memo references (with its put).
    #[inline(always)]
    fn list(&mut self) -> Option<Ref> {
        match self.byte()? {
            op::BINGET | op::LONG_BINGET => {
                let item = self.memo_ref().filter(|&item| self.tree.is_seq(item))?;
                Some(Ref::Node(item.node_id()?))
            }
            op::EMPTY_LIST => self.new_list(),
            _ => None,
        }
    }

    /// A list made here (`EMPTY_LIST` next), of memo references and new
    /// frames' dicts, with its put.
    fn new_list(&mut self) -> Option<Ref> {
        self.p += 1;
        let put = self.put()?;
        let body = known::refs_body(self.data, self.p);
        if let Some((from, to)) = body {
            if let Some(items) = self.known_lists.get(&self.data[from..to]) {
                self.p = to;
                return Some(Ref::Fresh(self.make(Fresh::Like { items, put })?));
            }
        }
        let first = self.fresh_items.len();
        loop {
            match self.byte()? {
                op::MARK => {
                    self.p += 1;
                    loop {
                        self.frames()?;
                        let item = match self.byte()? {
                            op::APPENDS => {
                                self.p += 1;
                                break;
                            }
                            op::EMPTY_DICT => self.new_dict()?,
                            _ => self.part_ref()?,
                        };
                        self.fresh_items.push(item);
                    }
                }
                op::BINGET | op::LONG_BINGET => {
                    let at = self.p;
                    let item = self.part_ref()?;
                    if self.byte() != Some(op::APPEND) {
                        // Not an item of this list: the next key.
                        self.p = at;
                        break;
                    }
                    self.p += 1;
                    self.fresh_items.push(item);
                }
                op::EMPTY_DICT => {
                    // A new frame, appended alone (a dict is never a key).
                    let item = self.new_dict()?;
                    if self.byte()? != op::APPEND {
                        return None;
                    }
                    self.p += 1;
                    self.fresh_items.push(item);
                }
                _ => break,
            }
        }
        let items = (first, self.fresh_items.len());
        // The body is known only when the list ended with it.
        let body = body.filter(|&(_, to)| to == self.p);
        Some(Ref::Fresh(self.make(Fresh::List { items, body, put })?))
    }

    /// A memo reference in something this entry makes: to an object stored
    /// before it, or to one it made (not to one still being made).
    #[inline(always)]
    fn part_ref(&mut self) -> Option<Part> {
        let index = self.get_index()?;
        if self.put_here(index) {
            return self.made_at(index);
        }
        self.memo.get(index).copied().filter(|&item| item != Item::UNSET).map(Part::Item)
    }

    /// The object this entry made and put in memo slot `index`.
    #[cold]
    fn made_at(&self, index: usize) -> Option<Part> {
        let made = self.fresh.iter().position(|f| matches!(f.put(), Put::At(slot) if slot == index))?;
        Some(Part::Made(made))
    }

    /// A frame's dict made here (`EMPTY_DICT` next): its put, then, unless
    /// it is empty, `MARK`, pairs of strs, ints, `None`s, bools and memo
    /// references, `SETITEMS`.
    fn new_dict(&mut self) -> Option<Part> {
        self.p += 1;
        let put = self.put()?;
        let first = self.fresh_pairs.len();
        self.frames()?;
        if self.byte()? == op::MARK {
            self.p += 1;
            loop {
                self.frames()?;
                if self.byte()? == op::SETITEMS {
                    self.p += 1;
                    break;
                }
                let key = self.scalar()?;
                self.frames()?;
                let value = self.scalar()?;
                self.fresh_pairs.push((key, value));
            }
        }
        let pairs = (first, self.fresh_pairs.len());
        Some(Part::Made(self.make(Fresh::Dict { pairs, put })?))
    }

    /// A key or value of a frame's dict: a str (perhaps new), an int of
    /// up to 61 bits, `None`, a bool, or a memo reference.
    fn scalar(&mut self) -> Option<Part> {
        let (item, next) = match self.byte()? {
            op::BINGET | op::LONG_BINGET => return self.part_ref(),
            op::SHORT_BINUNICODE | op::BINUNICODE => match self.str()?.0 {
                Ref::Fresh(made) => return Some(Part::Made(made)),
                _ => return None,
            },
            op::NONE => (Item::NONE, self.p + 1),
            op::NEWTRUE => (Item::bool(true), self.p + 1),
            op::NEWFALSE => (Item::bool(false), self.p + 1),
            _ => {
                let (bits, negative, next) = int_at(self.data, self.p)?;
                // Negative: two's complement; else at most i64::MAX.
                let n = if negative { bits as i64 } else { i64::try_from(bits).ok()? };
                (Item::small_int(n)?, next)
            }
        };
        self.p = next;
        Some(Part::Item(item))
    }

    /// The whole dict, from `EMPTY_DICT` through `SETITEMS`.
    fn dict(&mut self) -> Option<Scanned> {
        if self.byte()? != op::EMPTY_DICT {
            return None;
        }
        self.p += 1;
        let put = self.put()?;
        self.frames()?;
        if self.byte()? != op::MARK {
            return None;
        }
        self.p += 1;
        let (mut action, mut addr, mut device_free, mut size, mut stream, mut time_us) = (None, None, None, None, None, None);
        let mut refs = [Ref::None; 3];
        // The window and position in locals (kept in registers); `self.p`
        // is synced around the calls that read it.
        let d = self.data;
        let mut p = self.p;
        loop {
            let word = match *d.get(p)? {
                op::BINGET => match d.get(p + 1).and_then(|&i| self.key_words.get(usize::from(i))) {
                    Some(&Some(word)) => {
                        p += 2;
                        word
                    }
                    _ => {
                        self.p = p;
                        let word = self.word_ref()?;
                        p = self.p;
                        word
                    }
                },
                op::SETITEMS => {
                    p += 1;
                    break;
                }
                op::SHORT_BINUNICODE | op::BINUNICODE => {
                    // A key first seen here (the trace's first entry's keys).
                    self.p = p;
                    let (_, word) = self.str()?;
                    p = self.p;
                    word?
                }
                code => {
                    self.p = p;
                    if code == op::FRAME {
                        self.frames()?;
                        p = self.p;
                        continue;
                    }
                    let word = self.word_ref()?;
                    p = self.p;
                    word
                }
            };
            if d.get(p) == Some(&op::FRAME) {
                // A frame boundary between the key and its value.
                self.p = p;
                self.frames()?;
                p = self.p;
            }
            match word {
                Word::Addr => addr = Some(int_field(d, &mut p, false)?),
                Word::DeviceFree => device_free = Some(int_field(d, &mut p, false)?),
                Word::Size => size = Some(int_field(d, &mut p, false)?),
                Word::Stream => stream = Some(int_field(d, &mut p, true)?),
                Word::TimeUs => time_us = Some(int_field(d, &mut p, true)?),
                _ => {
                    self.p = p;
                    match word {
                        Word::Action => action = Some(self.action()?),
                        Word::CompileContext => refs[1] = self.str()?.0,
                        Word::UserMetadata => refs[2] = self.str()?.0,
                        Word::Frames => refs[0] = self.list()?,
                        _ => return None,
                    }
                    p = self.p;
                }
            }
        }
        self.p = p;
        let action = action?;
        let addr = match (action, addr, device_free) {
            (TraceAction::Oom, None, Some(free)) => free,
            (TraceAction::Oom, _, _) | (_, _, Some(_)) => return None,
            (_, addr, None) => addr?,
        };
        Some(Scanned {
            end: self.p,
            put,
            entry: Entry { action, addr, size: size?, stream: stream? },
            time_us,
            refs,
        })
    }
}

impl Unpickler<'_> {
    /// Reads the dict whose `EMPTY_DICT` is at window index `start` into a
    /// row of `entry_rows` and pushes its item, if it is a trace entry of
    /// the usual form (see the module); false, having changed nothing, if not.
    ///
    /// Then the entries right after it, while they are of the usual form
    /// too (a device's trace is one after the other): the next opcode is
    /// read here rather than by the unpickler's loop.
    pub(super) fn entry(&mut self, start: usize) -> bool {
        if !self.one_entry(start) {
            return false;
        }
        loop {
            self.input.ensure(super::AHEAD);
            let next = self.input.pos;
            if self.input.data().get(next) != Some(&op::EMPTY_DICT) || !self.one_entry(next) {
                return true;
            }
        }
    }

    /// One entry, as [`entry`](Self::entry) says.
    #[inline(always)]
    fn one_entry(&mut self, start: usize) -> bool {
        // Ids are stored plus 1 in 32 bits.
        if self.tree.nodes.len() + MAX_FRESH >= u32::MAX as usize {
            return false;
        }
        if self.shaped_entry(start) || self.usual_entry(start) {
            return true;
        }
        self.fresh_items.clear();
        self.fresh_pairs.clear();
        self.fresh.clear();
        self.puts.clear();
        let data = self.input.data();
        let mut scan = Scan {
            data,
            p: start,
            beyond: self.input.remaining().saturating_sub(data.len() - self.input.pos),
            dense_memo: self.input.len(),
            memo: &self.memo,
            tree: &self.tree,
            key_words: &mut self.key_words,
            fresh_items: &mut self.fresh_items,
            fresh_pairs: &mut self.fresh_pairs,
            fresh: &mut self.fresh,
            known_lists: &self.known_lists,
            next_memo: self.memo_len,
            puts: &mut self.puts,
            lowest_put: usize::MAX,
        };
        let Some(found) = scan.dict() else { return false };
        // The objects the entry makes, each after those it holds.
        self.made.clear();
        for k in 0..self.fresh.len() {
            let made = &self.made;
            let item = |part: &Part| match *part {
                Part::Item(item) => item,
                Part::Made(j) => made[j],
            };
            let object = match self.fresh[k] {
                Fresh::Str { text: (a, b), .. } => {
                    let bytes = &self.input.data()[a..b];
                    match self.known_strs.get(bytes) {
                        Some(str) => str,
                        None => {
                            let str = self.tree.push_str(std::str::from_utf8(bytes).unwrap_or_default());
                            self.known_strs.remember(bytes, str);
                            str
                        }
                    }
                }
                Fresh::List { items: (a, b), body, .. } => {
                    let list = self.tree.push_seq(false, self.fresh_items[a..b].iter().map(item));
                    if let (Some((from, to)), Some(range)) = (body, self.tree.seq_range(list)) {
                        self.known_lists.remember(&self.input.data()[from..to], range);
                    }
                    list
                }
                Fresh::Like { items: (start, len), .. } => self.tree.push_list_range(start, len),
                Fresh::Dict { pairs: (a, b), .. } => {
                    self.tree.push_dict(self.fresh_pairs[a..b].iter().map(|(key, value)| (item(key), item(value))))
                }
            };
            self.made.push(object);
        }
        let ids = found.refs.map(|r| match r {
            Ref::None => 0,
            Ref::Node(id) => id as u32 + 1,
            Ref::Fresh(k) => self.made[k].node_id().unwrap_or_default() as u32 + 1,
        });
        // Memo puts after the entry's row is known (its dict's first).
        self.commit_row(found.put, found.entry, found.time_us, ids, found.end);
        for k in 0..self.fresh.len() {
            let (put, made) = (self.fresh[k].put(), self.made[k]);
            self.commit_put(put, made);
        }
        true
    }

    /// The usual entry read in one straight line, straight into its row:
    /// `EMPTY_DICT`, perhaps a `MEMOIZE` or `BINPUT` to a free slot, `MARK`,
    /// then `action` (a str already seen), `addr`, `size`, `stream`,
    /// perhaps `time_us` and `frames` (a list already seen), each key a
    /// `BINGET` of its str, and `SETITEMS`, no `FRAME` between. False,
    /// having changed nothing, for anything else (then [`Scan`] reads it).
    #[inline(always)]
    fn usual_entry(&mut self, start: usize) -> bool {
        let d = self.input.data();
        let words = &self.key_words[..];
        // Whether `[BINGET, index]` at `p` names `word`, moving past it.
        let key = |p: &mut usize, word: Word| match d.get(*p..*p + 2) {
            Some(&[op::BINGET, index]) if words.get(usize::from(index)) == Some(&Some(word)) => {
                *p += 2;
                true
            }
            _ => false,
        };
        // The memo slot the dict is put in (`usize::MAX`: none).
        let (put, slot, mut p) = match d.get(start..start + 3) {
            Some(&[op::EMPTY_DICT, op::MARK, _]) => (Put::None, usize::MAX, start + 2),
            Some(&[op::EMPTY_DICT, op::MEMOIZE, op::MARK]) => (Put::Memoize, self.memo_len, start + 3),
            Some(&[op::EMPTY_DICT, op::BINPUT, index]) if d.get(start + 3) == Some(&op::MARK) => {
                (Put::At(usize::from(index)), usize::from(index), start + 4)
            }
            _ => return false,
        };
        if (slot != usize::MAX && self.slot_taken(slot)) || !key(&mut p, Word::Action) {
            return false;
        }
        let action = match d.get(p..p + 2) {
            Some(&[op::BINGET, index]) => words.get(usize::from(index)).copied().flatten().and_then(Word::action),
            _ => None,
        };
        let Some(action) = action.filter(|&a| a != TraceAction::Oom) else { return false };
        p += 2;
        let Some(addr) = key(&mut p, Word::Addr).then(|| int_field(d, &mut p, false)).flatten() else { return false };
        let Some(size) = key(&mut p, Word::Size).then(|| int_field(d, &mut p, false)).flatten() else { return false };
        let Some(stream) = key(&mut p, Word::Stream).then(|| int_field(d, &mut p, true)).flatten() else { return false };
        let time_us = if key(&mut p, Word::TimeUs) {
            match int_field(d, &mut p, true) {
                Some(t) => Some(t),
                None => return false,
            }
        } else {
            None
        };
        let mut frames_index = None;
        if key(&mut p, Word::Frames) {
            let Some(&[op::BINGET, index]) = d.get(p..p + 2) else { return false };
            frames_index = Some(usize::from(index));
            p += 2;
        }
        if d.get(p) != Some(&op::SETITEMS) {
            return false;
        }
        let Some(frames) = self.stack_id(frames_index, slot) else { return false };
        self.commit_row(put, Entry { action, addr, size, stream }, time_us, [frames, 0, 0], p + 1);
        if self.shapes.on {
            self.learn_shape(start, p + 1, put);
        }
        true
    }

    /// Whether memo slot `slot` holds something already (or is past the
    /// dense memo): a usual entry's dict is put only in a free one.
    #[inline(always)]
    pub(super) fn slot_taken(&self, slot: usize) -> bool {
        slot >= self.input.len() || self.memo.get(slot).is_some_and(|&item| item != Item::UNSET)
    }

    /// The stack a usual entry names by memo index `index`, as the id its
    /// row stores (0: none): a list already seen, not the entry's own memo `slot`.
    #[inline(always)]
    pub(super) fn stack_id(&mut self, index: Option<usize>, slot: usize) -> Option<u32> {
        let Some(index) = index else { return Some(0) };
        let list = self.memo.get(index).copied().filter(|&item| index != slot && item != Item::UNSET)?;
        // The last entry's stack is usually this one's: a list then.
        if list != self.last_stack && !self.tree.is_seq(list) {
            return None;
        }
        let id = list.node_id()?;
        self.last_stack = list;
        // Ids are stored plus 1 in 32 bits (`one_entry` checked they fit).
        Some(id as u32 + 1)
    }

    /// Takes an entry that ends before `end` (its stack, compile context and
    /// user metadata `ids`, as rows store them): its dict's memo put, its
    /// row, its item on the stack.
    #[inline(always)]
    pub(super) fn commit_row(&mut self, put: Put, entry: Entry, time_us: Option<u64>, ids: [u32; 3], end: usize) {
        let item = Item::entry(self.rows.len());
        self.commit_put(put, item);
        let remaining = self.input.remaining();
        self.rows.push(&mut self.tree.entry_rows, entry, time_us, ids, remaining);
        self.stack.push(item);
        self.input.pos = end;
    }

    fn commit_put(&mut self, put: Put, item: Item) {
        match put {
            Put::None => {}
            Put::Memoize => self.put_item(self.memo_len, item),
            Put::At(index) => self.put_item(index, item),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::pickle::read::parse;
    use crate::{read_snapshot_bytes, write_json, write_pickle_protocol, SnapshotFile};
    use proptest::prelude::*;
    use std::sync::Arc;
    use vramkit_core::snapshot::{Frame, Frames, Snapshot, TraceAction, TraceEntry};

    /// Stacks of frames from a few files and functions (so that their strs
    /// come again, within a stack too), and entries naming them.
    fn snapshot() -> impl Strategy<Value = SnapshotFile> {
        let frame = (0usize..4, -1i64..3000, 0usize..30);
        let stacks = proptest::collection::vec(proptest::collection::vec(frame, 0..20), 1..5);
        let entry = (0usize..TraceAction::ALL.len(), proptest::option::weighted(0.8, 0usize..5), any::<u32>(), 0u64..1 << 40, any::<bool>());
        (stacks, proptest::collection::vec(entry, 1..40)).prop_map(|(stacks, entries)| {
            let stacks: Vec<Frames> = stacks
                .iter()
                .map(|frames| {
                    let frames = frames.iter().map(|&(file, line, name)| Frame { filename: format!("/src/m{file}.py"), line, name: format!("f{name}") });
                    Arc::from(frames.collect::<Vec<_>>())
                })
                .collect();
            let trace = entries
                .iter()
                .map(|&(action, stack, addr, size, timed)| {
                    let mut e = TraceEntry::new(TraceAction::ALL[action], 0x7f00_0000_0000 + u64::from(addr) * 512, size, 0);
                    e.frames = stack.map(|k| stacks[k % stacks.len()].clone());
                    e.time_us = timed.then_some(1_700_000_000_000_000 + u64::from(addr));
                    e
                })
                .collect();
            SnapshotFile::from_snapshot(Snapshot { segments: Vec::new(), device_traces: vec![trace] })
        })
    }

    proptest! {
        /// Entries with new keys and new stacks (new frames' dicts, their
        /// strs new or put earlier in the same entry) go straight into
        /// rows, every one, and read as the JSON does.
        #[test]
        fn entries_with_new_frames_read_into_rows(file in snapshot()) {
            let mut json = Vec::new();
            write_json(&file, &mut json).expect("writes");
            let expected = read_snapshot_bytes(&json).expect("reads").snapshot;
            let rows = expected.device_traces[0].len();
            for protocol in [2, 4] {
                let mut pickle = Vec::new();
                write_pickle_protocol(&file, protocol, &mut pickle).expect("writes");
                let parsed = parse(&pickle).expect("parses");
                prop_assert_eq!(parsed.tree.entry_rows.len(), rows, "protocol {}", protocol);
                prop_assert_eq!(&read_snapshot_bytes(&pickle).expect("reads").snapshot, &expected, "protocol {}", protocol);
            }
        }
    }

    /// A `FRAME` (CPython's framing every 64 KiB lands anywhere) between an
    /// entry's keys and their values: the entry is still a row, read right.
    #[test]
    fn a_frame_between_a_key_and_its_value_keeps_the_entry_a_row() {
        use super::super::known::tests::{document_end, document_start, str_op};
        use crate::pickle::op;
        let frame = [op::FRAME, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut d = document_start();
        // The first entry brings the keys: 6 the dict, then key, value, ...
        d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK]);
        str_op(&mut d, "action"); // 7
        d.extend(frame);
        str_op(&mut d, "alloc"); // 8
        for (key, value) in [("addr", 4096), ("size", 512), ("stream", 0)] {
            str_op(&mut d, key); // 9, 10, 11
            d.extend(frame);
            d.push(op::BININT2);
            d.extend(u16::to_le_bytes(value));
        }
        d.push(op::SETITEMS);
        for addr in [8192u16, 12288] {
            d.extend([op::EMPTY_DICT, op::MEMOIZE, op::MARK, op::BINGET, 7]);
            d.extend(frame);
            d.extend([op::BINGET, 8]);
            for (key, value) in [(9, addr), (10, 512), (11, 0)] {
                d.extend([op::BINGET, key]);
                d.extend(frame);
                d.push(op::BININT2);
                d.extend(u16::to_le_bytes(value));
            }
            d.push(op::SETITEMS);
        }
        document_end(&mut d);
        assert_eq!(parse(&d).expect("parses").tree.entry_rows.len(), 3, "every entry a row");
        let trace = &read_snapshot_bytes(&d).expect("reads").snapshot.device_traces[0];
        let addrs: Vec<u64> = trace.iter().map(|e| e.addr).collect();
        assert_eq!(addrs, [4096, 8192, 12288]);
        assert!(trace.iter().all(|e| e.action == TraceAction::Alloc && e.size == 512 && e.stream == 0));
    }
}

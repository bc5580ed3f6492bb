//! An unpickler for plain data, protocols 0-5.
//!
//! It understands the opcodes real snapshots use and those the
//! memory_viz viewer accepts, plus the cheap protocol-0 text forms of ints,
//! floats and memo access. Anything that would import or call (`GLOBAL`,
//! `REDUCE`, `BUILD`, ...) is refused, as are bytes, sets and out-of-band
//! buffers. Every length is checked against the bytes that remain before
//! anything is allocated for it, and the stack never underflows below the
//! innermost MARK (as in CPython), so no input can make it panic or blow up.

mod entry;
mod known;
mod rows;
mod shape;

use super::input::Input;
use super::op;
use crate::value::Value;
use crate::error::TraceError;
use crate::fx::FxHashMap;
use crate::tree::{Item, Node, Store, Tree};
use std::ops::Range;
use std::path::PathBuf;

/// Most MARKs that may be open at once.
const MAX_OPEN_MARKS: usize = 1000;
/// Widest integer (in bytes) `LONG1`/`LONG4` may carry.
const MAX_LONG_BYTES: usize = 16;
/// Bytes made available before each opcode (fewer only at the end of the
/// input): every fixed-size argument, and most trace entries whole.
const AHEAD: usize = 64 << 10;

/// A parsed pickle, still in arena form.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) tree: Tree,
    pub(crate) root: Item,
    /// The `PROTO` argument; `None` for protocol 0/1 pickles, which have none.
    pub(crate) protocol: Option<u8>,
}

/// Reads one pickle into an owned [`Value`]. Shared objects stay shared.
pub fn read_value(data: &[u8]) -> Result<Value, TraceError> {
    let parsed = parse(data)?;
    parsed.tree.freeze(parsed.root).map_err(|_| {
        TraceError::pickle(
            0,
            format!("expected at most {} levels of nesting, found more (or a cycle)", crate::tree::MAX_DEPTH),
        )
    })
}

/// The protocol a pickle declares (its `PROTO` opcode), without reading the rest.
pub fn pickle_protocol(data: &[u8]) -> Option<u8> {
    match data {
        [op::PROTO, version, ..] => Some(*version),
        _ => None,
    }
}

pub(crate) fn parse(data: &[u8]) -> Result<Parsed, TraceError> {
    parse_input(Input::bytes(data))
}

/// Parses a pickle read from `input`; an error reading it is
/// [`TraceError::Io`] with an empty path, for the caller to name.
pub(crate) fn parse_input(input: Input<'_>) -> Result<Parsed, TraceError> {
    Unpickler::new(input).run()
}

/// [`parse`], every trace entry read without shapes (`shape.rs`), and the
/// entries read with them.
#[cfg(test)]
pub(crate) fn parse_shapes(data: &[u8], shapes: bool) -> (Result<Parsed, TraceError>, usize) {
    let mut unpickler = Unpickler::new(Input::bytes(data));
    unpickler.shapes.on = shapes;
    let hits = std::rc::Rc::clone(&unpickler.shapes.hits);
    let parsed = unpickler.run();
    let hits = hits.get();
    (parsed, hits)
}

pub(super) struct Unpickler<'a> {
    pub(super) input: Input<'a>,
    pub(super) tree: Tree,
    pub(super) stack: Vec<Item>,
    /// Stack heights at each open MARK; nothing pops below the last one.
    marks: Vec<usize>,
    /// Memo slots below `data.len()`; larger indices go to `memo_sparse`, so
    /// a huge `LONG_BINPUT` index never sizes a vector.
    pub(super) memo: Vec<Item>,
    memo_sparse: FxHashMap<usize, Item>,
    /// Occupied memo slots (what `MEMOIZE` uses as the next index, as CPython).
    pub(super) memo_len: usize,
    protocol: Option<u8>,
    /// Per memo index, the [`Word`](crate::words::Word) the str it holds
    /// spells, once classified (`None`: not yet); for the trace entries'
    /// keys and actions (`entry.rs`).
    pub(super) key_words: Vec<Option<crate::words::Word>>,
    /// Scratch space for a trace entry's new objects, their items and memo
    /// puts (`entry.rs`).
    fresh_items: Vec<entry::Part>,
    fresh_pairs: Vec<(entry::Part, entry::Part)>,
    fresh: Vec<entry::Fresh>,
    /// The items of the objects in `fresh` once made.
    made: Vec<Item>,
    pub(super) puts: Vec<usize>,
    /// How trace entries reach `tree.entry_rows` (`rows.rs`).
    rows: rows::Rows,
    /// The list the last usual trace entry had for its stack (`entry.rs`).
    last_stack: Item,
    /// The layouts of the last usual trace entries (`shape.rs`).
    shapes: shape::Shapes,
    /// The bodies of trace entries' stacks read so far, and the last short
    /// strs they made (`known.rs`).
    known_lists: known::KnownLists,
    known_strs: known::KnownStrs,
}

impl<'a> Unpickler<'a> {
    /// An unpickler at the start of `input`.
    fn new(input: Input<'a>) -> Unpickler<'a> {
        let len = input.len();
        Unpickler {
            input,
            tree: Tree::with_capacity_for(len),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::with_capacity(len / 64),
            memo_sparse: FxHashMap::default(),
            memo_len: 0,
            protocol: None,
            key_words: Vec::new(),
            fresh_items: Vec::new(),
            fresh_pairs: Vec::new(),
            fresh: Vec::new(),
            made: Vec::new(),
            puts: Vec::new(),
            rows: rows::Rows::for_input(len),
            last_stack: Item::UNSET,
            shapes: shape::Shapes::default(),
            known_lists: known::KnownLists::default(),
            known_strs: known::KnownStrs::default(),
        }
    }

    fn run(mut self) -> Result<Parsed, TraceError> {
        loop {
            self.input.ensure(AHEAD);
            let at = self.input.offset();
            let Some(&code) = self.input.data().get(self.input.pos) else {
                return Err(self.short(TraceError::pickle(at, "expected an opcode, found the end of the input (no STOP)")));
            };
            self.input.pos += 1;
            match code {
                op::PROTO => {
                    let version = self.u8(at, code)?;
                    if version > 5 {
                        return Err(TraceError::pickle(
                            at,
                            format!("expected protocol 0 to 5, found protocol {version}"),
                        ));
                    }
                    self.protocol = Some(version);
                }
                op::FRAME => {
                    let len = self.u64(at, code)?;
                    let remaining = self.input.remaining();
                    if len > remaining as u64 {
                        return Err(TraceError::pickle(
                            at,
                            format!("FRAME: expected at most {remaining} bytes (what remains), found a frame of {len} bytes"),
                        ));
                    }
                }
                op::STOP => {
                    let root = self.pop(at, code)?;
                    self.rows.settle(&mut self.tree.entry_rows);
                    return Ok(Parsed { tree: self.tree, root, protocol: self.protocol });
                }
                op::MARK => {
                    if self.marks.len() >= MAX_OPEN_MARKS {
                        return Err(TraceError::pickle(
                            at,
                            format!(
                                "MARK: expected at most {MAX_OPEN_MARKS} open MARKs, found more (nesting too deep)"
                            ),
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                op::POP => {
                    if self.stack.len() > self.fence() {
                        self.stack.pop();
                    } else if self.marks.pop().is_none() {
                        return Err(self.underflow(at, code));
                    }
                }
                op::POP_MARK => {
                    let mark = self.mark(at, code)?;
                    self.stack.truncate(mark);
                }
                op::DUP => {
                    let top = self.top(at, code)?;
                    self.stack.push(top);
                }
                op::EMPTY_DICT => {
                    // Most dicts of a long snapshot are trace entries: read
                    // them straight into columns where their shape allows.
                    if !self.entry(self.input.pos - 1) {
                        self.push_node(Node::Dict(Store::EMPTY));
                    }
                }
                op::EMPTY_LIST => self.push_node(Node::List(Store::EMPTY)),
                op::EMPTY_TUPLE => self.push_node(Node::Tuple(Store::EMPTY)),
                op::DICT => {
                    let mark = self.mark(at, code)?;
                    self.check_pairs(mark, at, code)?;
                    let item = self.tree.push_dict(Pairs(self.stack.drain(mark..)));
                    self.stack.push(item);
                }
                op::LIST => {
                    let mark = self.mark(at, code)?;
                    let item = self.tree.push_seq(false, self.stack.drain(mark..));
                    self.stack.push(item);
                }
                op::TUPLE => {
                    let mark = self.mark(at, code)?;
                    let item = self.tree.push_seq(true, self.stack.drain(mark..));
                    self.stack.push(item);
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1 + 1);
                    if self.stack.len() < self.fence() + n {
                        return Err(self.underflow(at, code));
                    }
                    let from = self.stack.len() - n;
                    let item = self.tree.push_seq(true, self.stack.drain(from..));
                    self.stack.push(item);
                }
                op::SETITEM => {
                    let value = self.pop(at, code)?;
                    let key = self.pop(at, code)?;
                    let target = self.top(at, code)?;
                    self.extend_dict(target, std::iter::once((key, value)), at, code)?;
                }
                op::SETITEMS => {
                    let mark = self.mark(at, code)?;
                    self.check_pairs(mark, at, code)?;
                    if mark <= self.fence() {
                        return Err(self.underflow(at, code));
                    }
                    let target = self.stack[mark - 1];
                    let added = match target.node_id() {
                        Some(id) => self.tree.extend_dict(id, Pairs(self.stack.drain(mark..))),
                        None => false,
                    };
                    if !added {
                        return Err(self.wrong_target(target, "a dict", at, code));
                    }
                }
                op::APPEND => {
                    let value = self.pop(at, code)?;
                    let target = self.top(at, code)?;
                    self.append(target, value, at, code)?;
                }
                op::APPENDS => {
                    let mark = self.mark(at, code)?;
                    if mark <= self.fence() {
                        return Err(self.underflow(at, code));
                    }
                    let target = self.stack[mark - 1];
                    let added = match target.node_id() {
                        Some(id) => self.tree.extend_list(id, &self.stack[mark..]),
                        None => false,
                    };
                    self.stack.truncate(mark);
                    if !added {
                        return Err(self.wrong_target(target, "a list", at, code));
                    }
                }
                op::NONE => self.stack.push(Item::NONE),
                op::NEWTRUE => self.stack.push(Item::bool(true)),
                op::NEWFALSE => self.stack.push(Item::bool(false)),
                op::BININT => {
                    let n = i32::from_le_bytes(self.fixed(at, code)?);
                    self.push_int(i64::from(n));
                }
                op::BININT1 => {
                    let n = self.u8(at, code)?;
                    self.push_int(i64::from(n));
                }
                op::BININT2 => {
                    let n = u16::from_le_bytes(self.fixed(at, code)?);
                    self.push_int(i64::from(n));
                }
                op::LONG1 => {
                    let len = usize::from(self.u8(at, code)?);
                    self.long(len, at, code)?;
                }
                op::LONG4 => {
                    let len = i32::from_le_bytes(self.fixed(at, code)?);
                    let Ok(len) = usize::try_from(len) else {
                        return Err(TraceError::pickle(
                            at,
                            format!("LONG4: expected a length of 0 or more, found {len}"),
                        ));
                    };
                    self.long(len, at, code)?;
                }
                op::BINFLOAT => {
                    let x = f64::from_be_bytes(self.fixed(at, code)?);
                    let item = self.tree.float(x);
                    self.stack.push(item);
                }
                op::SHORT_BINUNICODE => {
                    let len = usize::from(self.u8(at, code)?);
                    self.unicode(len, at, code)?;
                }
                op::BINUNICODE => {
                    let len = self.u32(at, code)? as usize;
                    self.unicode(len, at, code)?;
                }
                op::BINUNICODE8 => {
                    let len = self.u64(at, code)?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    self.unicode(len, at, code)?;
                }
                op::BINPUT => {
                    let index = usize::from(self.u8(at, code)?);
                    self.put(index, at, code)?;
                }
                op::LONG_BINPUT => {
                    let index = self.u32(at, code)? as usize;
                    self.put(index, at, code)?;
                }
                op::MEMOIZE => self.put(self.memo_len, at, code)?,
                op::BINGET | op::LONG_BINGET => self.get_run(code, at)?,
                op::INT => {
                    let line = self.line(at, code)?;
                    let item = match line.as_str() {
                        "00" => Item::bool(false),
                        "01" => Item::bool(true),
                        _ => self.int_text(&line, at, code)?,
                    };
                    self.stack.push(item);
                }
                op::LONG => {
                    let line = self.line(at, code)?;
                    let digits = line.strip_suffix('L').unwrap_or(&line);
                    let item = self.int_text(digits, at, code)?;
                    self.stack.push(item);
                }
                op::FLOAT => {
                    let line = self.line(at, code)?;
                    let x: f64 = line.parse().map_err(|_| {
                        TraceError::pickle(at, format!("FLOAT: expected a decimal number, found {line:?}"))
                    })?;
                    let item = self.tree.float(x);
                    self.stack.push(item);
                }
                op::PUT => {
                    let index = self.index_text(at, code)?;
                    self.put(index, at, code)?;
                }
                op::GET => {
                    let index = self.index_text(at, code)?;
                    self.get(index, at, code)?;
                }
                _ => {
                    return Err(TraceError::RefusedOpcode {
                        path: None,
                        offset: at as u64,
                        opcode: code,
                        name: op::name(code),
                    });
                }
            }
        }
    }

    /// Stack height below which nothing may be popped (the innermost MARK).
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn underflow(&self, at: usize, code: u8) -> TraceError {
        TraceError::pickle(
            at,
            format!("{}: expected a value on the stack, found none (stack underflow)", op::name(code)),
        )
    }

    fn pop(&mut self, at: usize, code: u8) -> Result<Item, TraceError> {
        if self.stack.len() > self.fence() {
            if let Some(item) = self.stack.pop() {
                return Ok(item);
            }
        }
        Err(self.underflow(at, code))
    }

    fn top(&self, at: usize, code: u8) -> Result<Item, TraceError> {
        match self.stack.last() {
            Some(&item) if self.stack.len() > self.fence() => Ok(item),
            _ => Err(self.underflow(at, code)),
        }
    }

    /// Closes the innermost MARK, returning the stack height it recorded.
    fn mark(&mut self, at: usize, code: u8) -> Result<usize, TraceError> {
        self.marks
            .pop()
            .ok_or_else(|| TraceError::pickle(at, format!("{}: expected an open MARK, found none", op::name(code))))
    }

    fn check_pairs(&self, mark: usize, at: usize, code: u8) -> Result<(), TraceError> {
        let count = self.stack.len() - mark;
        if count % 2 != 0 {
            return Err(TraceError::pickle(
                at,
                format!(
                    "{}: expected key/value pairs after the MARK, found an odd number of items ({count})",
                    op::name(code)
                ),
            ));
        }
        Ok(())
    }

    fn wrong_target(&mut self, target: Item, expected: &str, at: usize, code: u8) -> TraceError {
        // A trace entry is described from its row.
        self.rows.settle(&mut self.tree.entry_rows);
        TraceError::pickle(
            at,
            format!("{}: expected {expected} on the stack, found {}", op::name(code), self.tree.describe(target)),
        )
    }

    fn extend_dict(
        &mut self,
        target: Item,
        pairs: impl Iterator<Item = (Item, Item)>,
        at: usize,
        code: u8,
    ) -> Result<(), TraceError> {
        match target.node_id() {
            Some(id) if self.tree.extend_dict(id, pairs) => Ok(()),
            _ => Err(self.wrong_target(target, "a dict", at, code)),
        }
    }

    fn append(&mut self, target: Item, item: Item, at: usize, code: u8) -> Result<(), TraceError> {
        match target.node_id() {
            Some(id) if self.tree.extend_list(id, &[item]) => Ok(()),
            _ => Err(self.wrong_target(target, "a list", at, code)),
        }
    }

    fn push_int(&mut self, n: i64) {
        let item = self.tree.int(i128::from(n));
        self.stack.push(item);
    }

    fn push_node(&mut self, node: Node) {
        let item = self.tree.push(node);
        self.stack.push(item);
    }

    /// An error for input that ends early: what the reader said, if it failed.
    fn short(&mut self, error: TraceError) -> TraceError {
        match self.input.error.take() {
            Some(source) => TraceError::Io { path: PathBuf::new(), source },
            None => error,
        }
    }

    /// The window range of the next `len` bytes, after checking that they exist.
    #[inline]
    fn take(&mut self, len: usize, at: usize, code: u8) -> Result<Range<usize>, TraceError> {
        if !self.input.ensure(len) {
            let remaining = self.input.data().len() - self.input.pos;
            return Err(self.short(TraceError::pickle(
                at,
                format!(
                    "{}: expected {len} more bytes, found {remaining} (input truncated or length corrupt)",
                    op::name(code)
                ),
            )));
        }
        let start = self.input.pos;
        self.input.pos += len;
        Ok(start..start + len)
    }

    /// The next `N` bytes.
    #[inline]
    fn fixed<const N: usize>(&mut self, at: usize, code: u8) -> Result<[u8; N], TraceError> {
        let range = self.take(N, at, code)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.input.data()[range]);
        Ok(out)
    }

    #[inline]
    fn u8(&mut self, at: usize, code: u8) -> Result<u8, TraceError> {
        Ok(self.fixed::<1>(at, code)?[0])
    }

    #[inline]
    fn u32(&mut self, at: usize, code: u8) -> Result<u32, TraceError> {
        Ok(u32::from_le_bytes(self.fixed(at, code)?))
    }

    fn u64(&mut self, at: usize, code: u8) -> Result<u64, TraceError> {
        Ok(u64::from_le_bytes(self.fixed(at, code)?))
    }

    /// A little-endian two's-complement integer of `len` bytes.
    fn long(&mut self, len: usize, at: usize, code: u8) -> Result<(), TraceError> {
        if len > MAX_LONG_BYTES {
            // Check the bytes exist first so a truncated file says so.
            self.take(len, at, code)?;
            return Err(TraceError::pickle(
                at,
                format!(
                    "{}: expected an integer of at most {MAX_LONG_BYTES} bytes, found one of {len} bytes",
                    op::name(code)
                ),
            ));
        }
        let range = self.take(len, at, code)?;
        let bytes = &self.input.data()[range];
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut raw = if negative { [0xff; MAX_LONG_BYTES] } else { [0; MAX_LONG_BYTES] };
        raw[..len].copy_from_slice(bytes);
        let n = i128::from_le_bytes(raw);
        let item = self.int_item(n);
        self.stack.push(item);
        Ok(())
    }

    fn int_item(&mut self, n: i128) -> Item {
        self.tree.int(n)
    }

    fn unicode(&mut self, len: usize, at: usize, code: u8) -> Result<(), TraceError> {
        let range = self.take(len, at, code)?;
        let text = std::str::from_utf8(&self.input.data()[range]).map_err(|e| {
            TraceError::pickle(
                at,
                format!(
                    "{}: expected UTF-8 text, found an invalid byte at position {} of the string",
                    op::name(code),
                    e.valid_up_to()
                ),
            )
        })?;
        let item = self.tree.push_str(text);
        self.stack.push(item);
        Ok(())
    }

    fn put(&mut self, index: usize, at: usize, code: u8) -> Result<(), TraceError> {
        let item = self.top(at, code)?;
        self.put_item(index, item);
        Ok(())
    }

    /// Stores `item` in memo slot `index`.
    pub(super) fn put_item(&mut self, index: usize, item: Item) {
        if let Some(word) = self.key_words.get_mut(index) {
            if word.take().is_some() {
                // The shapes' keys are read from the memo slots they had.
                self.shapes.forget();
            }
        }
        let fresh = if index == self.memo.len() && index < self.input.len() {
            self.memo.push(item);
            true
        } else if index < self.input.len() {
            if index >= self.memo.len() {
                self.memo.resize(index + 1, Item::UNSET);
            }
            std::mem::replace(&mut self.memo[index], item) == Item::UNSET
        } else {
            self.memo_sparse.insert(index, item).is_none()
        };
        if fresh {
            self.memo_len += 1;
        } else {
            // A slot holds something else now: the same references may not
            // name the same items.
            self.known_lists.forget();
        }
    }

    /// A run of `BINGET`/`LONG_BINGET` (a stack's frames, typically), in a
    /// tight loop: cheaper than going through the opcode dispatch each time.
    /// It goes on while the window holds the next one whole.
    fn get_run(&mut self, mut code: u8, mut at: usize) -> Result<(), TraceError> {
        loop {
            let (data, pos) = (self.input.data(), self.input.pos);
            let (index, next) = if code == op::BINGET {
                let Some(&index) = data.get(pos) else { return self.u8(at, code).map(|_| ()) };
                (usize::from(index), pos + 1)
            } else {
                let Some(&[a, b, c, d]) = data.get(pos..pos + 4) else { return self.u32(at, code).map(|_| ()) };
                (u32::from_le_bytes([a, b, c, d]) as usize, pos + 4)
            };
            self.input.pos = next;
            match self.memo.get(index) {
                Some(&item) if item != Item::UNSET => self.stack.push(item),
                _ => self.get(index, at, code)?,
            }
            let (data, pos) = (self.input.data(), self.input.pos);
            match data.get(pos) {
                Some(&next @ (op::BINGET | op::LONG_BINGET)) if data.len() - pos > 4 => {
                    at = self.input.offset();
                    self.input.pos += 1;
                    code = next;
                }
                _ => return Ok(()),
            }
        }
    }

    #[inline]
    fn get(&mut self, index: usize, at: usize, code: u8) -> Result<(), TraceError> {
        let found = match self.memo.get(index) {
            Some(&item) => (item != Item::UNSET).then_some(item),
            None => self.memo_sparse.get(&index).copied(),
        };
        match found {
            Some(item) => {
                self.stack.push(item);
                Ok(())
            }
            None => Err(TraceError::pickle(
                at,
                format!("{}: expected a memo index that was stored, found {index} (never stored)", op::name(code)),
            )),
        }
    }

    /// A protocol-0 argument: the text up to the next newline (at most 64 bytes).
    fn line(&mut self, at: usize, code: u8) -> Result<String, TraceError> {
        self.input.ensure(65);
        let (data, pos) = (self.input.data(), self.input.pos);
        let window = &data[pos..data.len().min(pos + 65)];
        let Some(end) = window.iter().position(|&b| b == b'\n') else {
            let error = TraceError::pickle(
                at,
                format!("{}: expected a newline-terminated argument of at most 64 bytes, found none", op::name(code)),
            );
            return Err(self.short(error));
        };
        let text = std::str::from_utf8(&window[..end])
            .map(str::to_owned)
            .map_err(|_| TraceError::pickle(at, format!("{}: expected ASCII text, found other bytes", op::name(code))));
        self.input.pos += end + 1;
        text
    }

    fn int_text(&mut self, text: &str, at: usize, code: u8) -> Result<Item, TraceError> {
        let n: i128 = text.parse().map_err(|_| {
            TraceError::pickle(
                at,
                format!("{}: expected a decimal integer within 128 bits, found {text:?}", op::name(code)),
            )
        })?;
        Ok(self.int_item(n))
    }

    fn index_text(&mut self, at: usize, code: u8) -> Result<usize, TraceError> {
        let line = self.line(at, code)?;
        line.parse()
            .map_err(|_| TraceError::pickle(at, format!("{}: expected a memo index, found {line:?}", op::name(code))))
    }
}

/// Key/value pairs from a flat run of stack items (the count was checked even).
struct Pairs<I>(I);

impl<I: Iterator<Item = Item>> Iterator for Pairs<I> {
    type Item = (Item, Item);

    fn next(&mut self) -> Option<(Item, Item)> {
        let key = self.0.next()?;
        let value = self.0.next()?;
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (low, high) = self.0.size_hint();
        (low / 2, high.map(|h| h / 2))
    }
}

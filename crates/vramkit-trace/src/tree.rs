//! The parsed document both readers produce and the schema decoder reads.
//!
//! An arena: containers, strings, floats and wide ints are nodes in one
//! `Vec`, and an [`Item`] (8 bytes) is either a small scalar or a node
//! index. A pickle memo reference is just a copy of an `Item`, so an object
//! shared 100k times is one node, and containers can still be filled after
//! they were memoized (as pickles do: `EMPTY_LIST`, `MEMOIZE`, then
//! `APPENDS`). The items of most containers live back to back in two shared
//! buffers rather than in a `Vec` each, which keeps parsing cache-friendly.
//! Nothing here recurses except [`Tree::freeze`], which is depth-limited (a
//! pickle can build cycles).
//!
//! Trace entries, millions of them, are no nodes: the pickle reader puts
//! each straight into a row of [`Tree::entry_rows`] (columns), and the item
//! that stands for the entry's dict names its row.

use crate::entries::Entries;
use crate::value::Value;
use crate::words::Word;
use std::collections::HashMap;
use std::sync::Arc;
use vramkit_core::snapshot::TraceAction;

/// Index of a node in [`Tree::nodes`].
pub(crate) type NodeId = usize;

/// Deepest nesting [`Tree::freeze`] follows.
pub(crate) const MAX_DEPTH: usize = 200;

const TAG_BITS: u32 = 3;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const TAG_NONE: u64 = 0;
const TAG_BOOL: u64 = 1;
const TAG_INT: u64 = 2;
const TAG_NODE: u64 = 3;
const TAG_ENTRY: u64 = 4;
const TAG_UNSET: u64 = 7;

/// A scalar, a reference to a node, or a trace entry's dict (a row of
/// [`Tree::entry_rows`]), packed in 8 bytes: a 3-bit tag and a payload
/// (ints of up to 61 bits inline; wider ints and floats are nodes).
/// Equality is identity: nodes and rows compare by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Item(u64);

/// What an [`Item`] holds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    None,
    Bool(bool),
    Int(i64),
    Node(NodeId),
    /// A trace entry's dict, read into row `n` of [`Tree::entry_rows`].
    Entry(usize),
}

impl Item {
    pub(crate) const NONE: Item = Item(TAG_NONE);
    /// Marks an empty memo slot; never on the stack or in a container.
    pub(crate) const UNSET: Item = Item(TAG_UNSET);

    pub(crate) const fn bool(b: bool) -> Item {
        Item(((b as u64) << TAG_BITS) | TAG_BOOL)
    }

    /// An int stored inline, if it fits in 61 bits.
    pub(crate) fn small_int(n: i64) -> Option<Item> {
        let packed = n.wrapping_shl(TAG_BITS);
        (packed >> TAG_BITS == n).then_some(Item(packed as u64 | TAG_INT))
    }

    pub(crate) const fn node(id: NodeId) -> Item {
        Item(((id as u64) << TAG_BITS) | TAG_NODE)
    }

    pub(crate) const fn entry(row: usize) -> Item {
        Item(((row as u64) << TAG_BITS) | TAG_ENTRY)
    }

    pub(crate) fn kind(self) -> Kind {
        match self.0 & TAG_MASK {
            TAG_BOOL => Kind::Bool(self.0 >> TAG_BITS != 0),
            TAG_INT => Kind::Int((self.0 as i64) >> TAG_BITS),
            TAG_NODE => Kind::Node((self.0 >> TAG_BITS) as NodeId),
            TAG_ENTRY => Kind::Entry((self.0 >> TAG_BITS) as usize),
            _ => Kind::None,
        }
    }

    pub(crate) fn node_id(self) -> Option<NodeId> {
        match self.kind() {
            Kind::Node(id) => Some(id),
            _ => None,
        }
    }
}

/// The items of a list or tuple, or the pairs of a dict: a range of one of
/// the tree's shared buffers, or a vector of its own once it was extended
/// after other containers were filled.
#[derive(Debug)]
pub(crate) enum Store<T> {
    Range { start: usize, len: usize },
    Owned(Vec<T>),
}

impl<T> Store<T> {
    pub(crate) const EMPTY: Store<T> = Store::Range { start: 0, len: 0 };

    fn get<'a>(&'a self, buffer: &'a [T]) -> &'a [T] {
        match self {
            Store::Range { start, len } => buffer.get(*start..*start + *len).unwrap_or_default(),
            Store::Owned(items) => items,
        }
    }

    fn len(&self) -> usize {
        match self {
            Store::Range { len, .. } => *len,
            Store::Owned(items) => items.len(),
        }
    }
}

/// Appends `new` to `store`, keeping it a range of `buffer` when it is
/// empty or already ends the buffer.
fn extend_store<T: Copy>(store: &mut Store<T>, buffer: &mut Vec<T>, new: impl Iterator<Item = T>) {
    match store {
        Store::Range { start, len } if *len == 0 || *start + *len == buffer.len() => {
            if *len == 0 {
                *start = buffer.len();
            }
            buffer.extend(new);
            *len = buffer.len() - *start;
        }
        Store::Range { start, len } => {
            let mut owned = buffer[*start..*start + *len].to_vec();
            owned.extend(new);
            *store = Store::Owned(owned);
        }
        Store::Owned(items) => items.extend(new),
    }
}

/// A value that needs storage of its own.
#[derive(Debug)]
pub(crate) enum Node {
    /// Only for ints that do not fit an [`Item`].
    Int(i128),
    Float(f64),
    /// A range of [`Tree::text`].
    Str {
        start: usize,
        len: usize,
    },
    List(Store<Item>),
    /// A list ending in trace entries, rows `start..start + len` of
    /// [`Tree::entry_rows`], as the pickle reader appended them (a device's
    /// trace): the range instead of one item each, after the items `head`
    /// (the first entries, which took the generic path).
    Rows {
        head: Store<Item>,
        start: usize,
        len: usize,
    },
    Tuple(Store<Item>),
    Dict(Store<(Item, Item)>),
}

/// A whole document.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub(crate) nodes: Vec<Node>,
    /// The text of every str node, back to back.
    text: String,
    /// Items of lists and tuples stored as ranges.
    items: Vec<Item>,
    /// Pairs of dicts stored as ranges.
    pairs: Vec<(Item, Item)>,
    /// Trace entries read straight into columns (see [`Item::entry`]). Their
    /// stack, compile context and user metadata are node ids plus 1 (0:
    /// none), of a list and of strs, until the decoder resolves them.
    pub(crate) entry_rows: Entries,
}

impl Tree {
    /// An empty tree with room for what a pickle of `input_bytes` usually
    /// holds (a guess from real snapshots; the buffers still grow as needed).
    pub(crate) fn with_capacity_for(input_bytes: usize) -> Tree {
        Tree {
            nodes: Vec::with_capacity(input_bytes / 48),
            text: String::with_capacity(input_bytes / 4),
            items: Vec::with_capacity(input_bytes / 4),
            pairs: Vec::with_capacity(input_bytes / 16),
            entry_rows: Entries::default(),
        }
    }

    pub(crate) fn push(&mut self, node: Node) -> Item {
        self.nodes.push(node);
        Item::node(self.nodes.len() - 1)
    }

    pub(crate) fn push_str(&mut self, s: &str) -> Item {
        let start = self.text.len();
        self.text.push_str(s);
        self.push(Node::Str { start, len: s.len() })
    }

    pub(crate) fn int(&mut self, n: i128) -> Item {
        match i64::try_from(n).ok().and_then(Item::small_int) {
            Some(item) => item,
            None => self.push(Node::Int(n)),
        }
    }

    pub(crate) fn float(&mut self, x: f64) -> Item {
        self.push(Node::Float(x))
    }

    /// A new list or tuple holding `items`.
    pub(crate) fn push_seq(&mut self, tuple: bool, items: impl Iterator<Item = Item>) -> Item {
        let start = self.items.len();
        self.items.extend(items);
        let store = Store::Range { start, len: self.items.len() - start };
        self.push(if tuple { Node::Tuple(store) } else { Node::List(store) })
    }

    /// Items stored for lists and tuples.
    #[cfg(test)]
    pub(crate) fn items_len(&self) -> usize {
        self.items.len()
    }

    /// The range of the items buffer a list stored as a range holds.
    pub(crate) fn seq_range(&self, list: Item) -> Option<(usize, usize)> {
        match self.node(list)? {
            &Node::List(Store::Range { start, len }) => Some((start, len)),
            _ => None,
        }
    }

    /// A new list of the items `start..start + len` of the buffer, which
    /// another list holds (or held): items are only ever appended to the
    /// buffer, so they are what they were, and a list extended later gets
    /// a range or vector of its own.
    pub(crate) fn push_list_range(&mut self, start: usize, len: usize) -> Item {
        self.push(Node::List(Store::Range { start, len }))
    }

    /// A new dict holding `pairs`.
    pub(crate) fn push_dict(&mut self, pairs: impl Iterator<Item = (Item, Item)>) -> Item {
        let start = self.pairs.len();
        self.pairs.extend(pairs);
        self.push(Node::Dict(Store::Range { start, len: self.pairs.len() - start }))
    }

    /// Appends to list `id`; false if it is not a list. Entry rows that
    /// follow on from the list's own (or start an empty list) extend its
    /// range ([`Node::Rows`]); anything else makes it a list of items.
    pub(crate) fn extend_list(&mut self, id: NodeId, new: &[Item]) -> bool {
        let follows = |next: usize| new.iter().enumerate().all(|(k, &item)| item == Item::entry(next + k));
        let first_row = match new.first().map(|i| i.kind()) {
            Some(Kind::Entry(row)) if follows(row) => Some(row),
            _ => None,
        };
        let Some(node) = self.nodes.get_mut(id) else { return false };
        match node {
            Node::List(store) => match first_row {
                Some(start) => *node = Node::Rows { head: std::mem::replace(store, Store::EMPTY), start, len: new.len() },
                None => extend_store(store, &mut self.items, new.iter().copied()),
            },
            Node::Rows { start, len, .. } if follows(*start + *len) => *len += new.len(),
            Node::Rows { head, start, len } => {
                // A vector of its own is taken, not copied (so that a list
                // that goes back and forth costs nothing more each time).
                let mut items = match std::mem::replace(head, Store::EMPTY) {
                    Store::Owned(items) => items,
                    range => range.get(&self.items).to_vec(),
                };
                items.extend((*start..*start + *len).map(Item::entry));
                items.extend_from_slice(new);
                *node = Node::List(Store::Owned(items));
            }
            _ => return false,
        }
        true
    }

    /// The items and then the rows a [`Node::Rows`] list holds.
    pub(crate) fn as_rows(&self, item: Item) -> Option<(&[Item], std::ops::Range<usize>)> {
        match self.node(item) {
            Some(Node::Rows { head, start, len }) => Some((head.get(&self.items), *start..*start + *len)),
            _ => None,
        }
    }

    /// Adds pairs to dict `id`; false if it is not a dict.
    pub(crate) fn extend_dict(&mut self, id: NodeId, new: impl Iterator<Item = (Item, Item)>) -> bool {
        match self.nodes.get_mut(id) {
            Some(Node::Dict(store)) => {
                extend_store(store, &mut self.pairs, new);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn node(&self, item: Item) -> Option<&Node> {
        item.node_id().and_then(|id| self.nodes.get(id))
    }

    fn text(&self, start: usize, len: usize) -> &str {
        self.text.get(start..start + len).unwrap_or_default()
    }

    pub(crate) fn is_str(&self, item: Item) -> bool {
        matches!(self.node(item), Some(Node::Str { .. }))
    }

    /// A list or tuple (what [`as_seq`](Self::as_seq) reads), without its items.
    pub(crate) fn is_seq(&self, item: Item) -> bool {
        matches!(self.node(item), Some(Node::List(_) | Node::Tuple(_)))
    }

    pub(crate) fn as_str(&self, item: Item) -> Option<&str> {
        match self.node(item) {
            Some(&Node::Str { start, len }) => Some(self.text(start, len)),
            _ => None,
        }
    }

    pub(crate) fn as_dict(&self, item: Item) -> Option<&[(Item, Item)]> {
        match self.node(item) {
            Some(Node::Dict(store)) => Some(store.get(&self.pairs)),
            _ => None,
        }
    }

    /// A list's items (a tuple's too: JSON has no tuples).
    pub(crate) fn as_seq(&self, item: Item) -> Option<&[Item]> {
        match self.node(item) {
            Some(Node::List(store) | Node::Tuple(store)) => Some(store.get(&self.items)),
            _ => None,
        }
    }

    pub(crate) fn as_i128(&self, item: Item) -> Option<i128> {
        match item.kind() {
            Kind::Int(n) => Some(i128::from(n)),
            Kind::Node(_) => match self.node(item) {
                Some(Node::Int(n)) => Some(*n),
                _ => None,
            },
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self, item: Item) -> Option<f64> {
        match self.node(item) {
            Some(Node::Float(x)) => Some(*x),
            _ => None,
        }
    }

    /// A short description for error messages: the type and a glimpse.
    pub(crate) fn describe(&self, item: Item) -> String {
        match item.kind() {
            Kind::Entry(row) => format!("a dict of {} keys (a trace entry)", self.entry_pairs(row).len()),
            Kind::None => "None".to_owned(),
            Kind::Bool(b) => format!("a bool ({})", if b { "True" } else { "False" }),
            Kind::Int(n) => format!("an int ({n})"),
            Kind::Node(_) => match self.node(item) {
                Some(Node::Int(n)) => format!("an int ({n})"),
                Some(Node::Float(x)) => format!("a float ({x:?})"),
                Some(&Node::Str { start, len }) => {
                    let s = self.text(start, len);
                    let glimpse: String = s.chars().take(40).collect();
                    let more = if glimpse.len() < s.len() { "..." } else { "" };
                    format!("a str ({glimpse:?}{more})")
                }
                Some(Node::List(store)) => format!("a list of {} items", store.len()),
                Some(Node::Rows { head, len, .. }) => format!("a list of {} items", head.len() + len),
                Some(Node::Tuple(store)) => format!("a tuple of {} items", store.len()),
                Some(Node::Dict(store)) => format!("a dict of {} keys", store.len()),
                None => "a dangling reference".to_owned(),
            },
        }
    }

    /// An owned copy of `item`. Shared nodes stay shared (one `Arc`).
    /// Fails on nesting deeper than [`MAX_DEPTH`], which includes cycles.
    pub(crate) fn freeze(&self, item: Item) -> Result<Value, TooDeep> {
        let mut done = HashMap::new();
        self.freeze_in(item, 0, &mut done)
    }

    fn freeze_in(&self, item: Item, depth: usize, done: &mut HashMap<NodeId, Value>) -> Result<Value, TooDeep> {
        let id = match item.kind() {
            Kind::None => return Ok(Value::None),
            Kind::Bool(b) => return Ok(Value::Bool(b)),
            Kind::Int(n) => return Ok(Value::Int(n)),
            Kind::Entry(row) => {
                let mut pairs = Vec::new();
                for (key, value) in self.entry_pairs(row) {
                    let value = match value {
                        EntryValue::Word(w) => Value::str(w.name()),
                        EntryValue::Int(n) => Value::int(n),
                        EntryValue::Item(item) => self.freeze_in(item, depth + 1, done)?,
                    };
                    pairs.push((Value::str(key.name()), value));
                }
                return Ok(Value::dict(pairs));
            }
            Kind::Node(id) => id,
        };
        if let Some(value) = done.get(&id) {
            return Ok(value.clone());
        }
        if depth >= MAX_DEPTH {
            return Err(TooDeep);
        }
        let value = match self.nodes.get(id) {
            None => Value::None,
            Some(Node::Int(n)) => Value::int(*n),
            Some(Node::Float(x)) => Value::Float(*x),
            Some(&Node::Str { start, len }) => Value::Str(Arc::from(self.text(start, len))),
            Some(Node::List(store)) => Value::List(self.freeze_all(store.get(&self.items), depth, done)?),
            Some(Node::Rows { head, start, len }) => {
                let items: Vec<Item> = head.get(&self.items).iter().copied().chain((*start..*start + *len).map(Item::entry)).collect();
                Value::List(self.freeze_all(&items, depth, done)?)
            }
            Some(Node::Tuple(store)) => Value::Tuple(self.freeze_all(store.get(&self.items), depth, done)?),
            Some(Node::Dict(store)) => {
                let pairs = store.get(&self.pairs);
                let mut out = Vec::with_capacity(pairs.len());
                for &(k, v) in pairs {
                    out.push((self.freeze_in(k, depth + 1, done)?, self.freeze_in(v, depth + 1, done)?));
                }
                Value::Dict(Arc::from(out))
            }
        };
        done.insert(id, value.clone());
        Ok(value)
    }

    fn freeze_all(
        &self,
        items: &[Item],
        depth: usize,
        done: &mut HashMap<NodeId, Value>,
    ) -> Result<Arc<[Value]>, TooDeep> {
        items.iter().map(|&i| self.freeze_in(i, depth + 1, done)).collect()
    }
}

/// A value of a trace entry's dict, rebuilt from its row.
enum EntryValue {
    Word(Word),
    Int(i128),
    Item(Item),
}

impl Tree {
    /// The pairs of the dict of entry row `row`, rebuilt: keys in the
    /// writers' order (the file's order is not kept), 64-bit values in
    /// the spelling PyTorch writes.
    fn entry_pairs(&self, row: usize) -> Vec<(Word, EntryValue)> {
        let rows = &self.entry_rows;
        let e = rows.get(row);
        let action = match e.action {
            TraceAction::Alloc => Word::Alloc,
            TraceAction::FreeRequested => Word::FreeRequested,
            TraceAction::FreeCompleted => Word::FreeCompleted,
            TraceAction::SegmentAlloc => Word::SegmentAlloc,
            TraceAction::SegmentFree => Word::SegmentFree,
            TraceAction::SegmentMap => Word::SegmentMap,
            TraceAction::SegmentUnmap => Word::SegmentUnmap,
            TraceAction::Snapshot => Word::Snapshot,
            TraceAction::Oom => Word::Oom,
            TraceAction::UserDefined => Word::UserDefined,
        };
        let addr_key = if e.action == TraceAction::Oom { Word::DeviceFree } else { Word::Addr };
        let mut pairs = vec![
            (Word::Action, EntryValue::Word(action)),
            (addr_key, EntryValue::Int(i128::from(e.addr))),
            (Word::Size, EntryValue::Int(i128::from(e.size))),
            (Word::Stream, EntryValue::Int(i128::from(e.stream as i64))),
        ];
        if let Some(t) = rows.time_us(row) {
            pairs.push((Word::TimeUs, EntryValue::Int(i128::from(t as i64))));
        }
        let [frames, context, metadata] = rows.raw_ids(row);
        let node = |id: u32| EntryValue::Item(Item::node(id as usize - 1));
        for (key, id) in [(Word::CompileContext, context), (Word::UserMetadata, metadata), (Word::Frames, frames)] {
            if id != 0 {
                pairs.push((key, node(id)));
            }
        }
        pairs
    }
}

/// [`Tree::freeze`] met nesting deeper than [`MAX_DEPTH`] (or a cycle).
#[derive(Debug)]
pub(crate) struct TooDeep;

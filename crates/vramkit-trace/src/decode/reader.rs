//! [`Reader`]: typed access to a [`Tree`] for the schema walk, with the
//! per-file caches (schema words, decoded stacks) and the keys seen per level.

use super::schema_err::SchemaErr;
use crate::value::Value;
use crate::fx::FxHashMap;
use crate::tree::{Item, Kind, NodeId, Tree, MAX_DEPTH};
use crate::words::Word;
use std::collections::BTreeSet;
use vramkit_core::snapshot::{Frame, Frames};

/// Bit masks of the known keys seen at one level, plus the unknown ones.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) mask: u32,
    pub(super) unknown: BTreeSet<String>,
}

impl Seen {
    pub(super) fn into_set(self, names: &[&str]) -> BTreeSet<String> {
        let mut set = self.unknown;
        for (bit, name) in names.iter().enumerate() {
            if self.mask & (1 << bit) != 0 {
                set.insert((*name).to_owned());
            }
        }
        set
    }
}

/// A list's items as a map key: hashes the length and a few items only
/// (stacks are long), compares all of them.
#[derive(PartialEq, Eq)]
pub(super) struct ItemsKey<'t>(pub(super) &'t [Item]);

impl std::hash::Hash for ItemsKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let items = self.0;
        state.write_usize(items.len());
        for &i in &[0, 1, items.len() / 2, items.len().wrapping_sub(2), items.len().wrapping_sub(1)] {
            if let Some(item) = items.get(i) {
                item.hash(state);
            }
        }
    }
}

/// Typed access to a [`Tree`], with the per-file caches.
pub(super) struct Reader<'t> {
    pub(super) tree: &'t Tree,
    /// Per node, 0 until decoded, then: for a frames list, 1 + its index in
    /// `decoded_frames`; for a frame dict, 1 + its index in `decoded_frame`;
    /// for a str, its [`Word::code`].
    /// Indexed by node, so no hashing on the hot path.
    node_slot: Vec<u32>,
    /// Frames lists decoded so far.
    pub(super) decoded_frames: Vec<Frames>,
    /// Frames decoded so far.
    pub(super) decoded_frame: Vec<Frame>,
    /// Frames by the frame objects they hold (node references only).
    pub(super) frames_by_items: FxHashMap<ItemsKey<'t>, u32>,
    /// Frames by where their items lie in the tree's item buffer (lists
    /// the pickle reader made to share their items): no items hashed.
    pub(super) frames_by_range: FxHashMap<(usize, usize), u32>,
    /// Keys seen at each level.
    pub(super) top: Seen,
    pub(super) segment: Seen,
    pub(super) block: Seen,
    pub(super) entry: Seen,
}

impl<'t> Reader<'t> {
    pub(super) fn new(tree: &'t Tree) -> Reader<'t> {
        Reader {
            tree,
            node_slot: Vec::new(),
            decoded_frames: Vec::new(),
            decoded_frame: Vec::new(),
            frames_by_items: FxHashMap::default(),
            frames_by_range: FxHashMap::default(),
            top: Seen::default(),
            segment: Seen::default(),
            block: Seen::default(),
            entry: Seen::default(),
        }
    }

    pub(super) fn wrong(&self, expected: &str, item: Item) -> SchemaErr {
        SchemaErr::new(expected, self.tree.describe(item))
    }

    pub(super) fn dict(&self, item: Item) -> Result<&'t [(Item, Item)], SchemaErr> {
        self.tree.as_dict(item).ok_or_else(|| self.wrong("a dict", item))
    }

    pub(super) fn seq(&self, item: Item) -> Result<&'t [Item], SchemaErr> {
        self.tree.as_seq(item).ok_or_else(|| self.wrong("a list", item))
    }

    pub(super) fn str(&self, item: Item) -> Result<&'t str, SchemaErr> {
        self.tree.as_str(item).ok_or_else(|| self.wrong("a str", item))
    }

    /// A dict key that must be a string.
    pub(super) fn key_name(&self, item: Item) -> Result<&'t str, SchemaErr> {
        self.tree.as_str(item).ok_or_else(|| self.wrong("a str key", item))
    }

    /// A string as a schema word; each string node is classified once.
    pub(super) fn word(&mut self, item: Item) -> Result<Word, SchemaErr> {
        if !self.tree.is_str(item) {
            return Err(self.wrong("a str", item));
        }
        let id = item.node_id();
        if let Some(&mut code) = id.and_then(|id| self.slot(id)) {
            if code > 0 {
                return Ok(Word::from_code(code));
            }
        }
        let word = Word::classify(self.str(item)?);
        if let Some(slot) = id.and_then(|id| self.slot(id)) {
            *slot = word.code();
        }
        Ok(word)
    }

    pub(super) fn u64(&self, item: Item) -> Result<u64, SchemaErr> {
        match item.kind() {
            Kind::Int(n) => u64::try_from(n).map_err(|_| self.wrong("a non-negative int below 2^64", item)),
            _ => self
                .tree
                .as_i128(item)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| self.wrong("a non-negative int below 2^64", item)),
        }
    }

    pub(super) fn i64(&self, item: Item) -> Result<i64, SchemaErr> {
        self.tree
            .as_i128(item)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| self.wrong("an int from -2^63 to 2^63-1", item))
    }

    /// A 64-bit value PyTorch writes signed or unsigned, as its 64 bits
    /// (two's complement): any int from -2^63 to 2^64-1. PyTorch casts
    /// stream handles to `int64_t` (negative where the handle's top bit is
    /// set), writes `time_us` as a signed `time_t`, pool ids unsigned from
    /// Python and signed from C++, and a frame's line as CPython's `int`
    /// cast to `uint64_t` (so "no line", -1, arrives as 2^64-1). Both
    /// spellings of one value read the same.
    pub(super) fn bits64(&self, item: Item) -> Result<u64, SchemaErr> {
        self.tree
            .as_i128(item)
            .and_then(|n| u64::try_from(n).ok().or_else(|| i64::try_from(n).ok().map(|signed| signed as u64)))
            .ok_or_else(|| self.wrong("an int from -2^63 to 2^64-1", item))
    }

    /// A finite float; an int is accepted too (JSON writes `0` for `0.0`
    /// sometimes). NaN and the infinities are refused: no setting PyTorch
    /// records is one, and JSON could not carry it (written as `null`, it
    /// would not read back).
    pub(super) fn f64(&self, item: Item) -> Result<f64, SchemaErr> {
        match item.kind() {
            Kind::Int(n) => Ok(n as f64),
            _ => self.tree.as_f64(item).filter(|x| x.is_finite()).ok_or_else(|| self.wrong("a finite float", item)),
        }
    }

    pub(super) fn bool(&self, item: Item) -> Result<bool, SchemaErr> {
        match item.kind() {
            Kind::Bool(b) => Ok(b),
            _ => Err(self.wrong("a bool", item)),
        }
    }

    /// An owned copy, for values kept generically.
    pub(super) fn value(&self, item: Item) -> Result<Value, SchemaErr> {
        self.tree.freeze(item).map_err(|_| {
            SchemaErr::new(
                format!("at most {MAX_DEPTH} levels of nesting"),
                "deeper nesting (or an object that contains itself)",
            )
        })
    }

    /// The slot of node `id` in [`Reader::node_slot`], growing the table
    /// to the tree's node count on first use.
    pub(super) fn slot(&mut self, id: NodeId) -> Option<&mut u32> {
        if self.node_slot.is_empty() {
            self.node_slot = vec![0; self.tree.nodes.len()];
        }
        self.node_slot.get_mut(id)
    }
}

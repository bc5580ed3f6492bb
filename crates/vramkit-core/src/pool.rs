//! Free-block pools (PyTorch's `BlockPool`).
//!
//! A pool holds the free, mapped blocks of one kind (small or large) of one
//! owner (the default pools or a private pool), ordered by
//! (stream, size, segment age, address). Best fit is the first entry at or
//! after (stream, size): the smallest free block on that stream that is big
//! enough; among equals the one in the oldest segment, then the lowest
//! address. Segment age is PyTorch's registration counter (torch 2.13 and
//! later, `BlockComparatorSizeCounterAddress`); for older releases every
//! block's counter is 0, which leaves address order.
//!
//! Blocks never move between streams, so the order is kept as one ordered
//! map per stream, keyed by [`FreeKey`].

use crate::block::{Block, BlockId};
use crate::device::StreamId;
use crate::rounding::PoolKind;
use crate::snapshot::MempoolId;
use std::collections::BTreeMap;

/// Where a free block sorts within its stream: size, then the counter of
/// the segment it lies in (older first), then address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FreeKey {
    pub size: u64,
    pub counter: u32,
    pub addr: u64,
}

impl FreeKey {
    /// Where `block` sorts in its pool's free set (on its stream).
    #[inline]
    pub fn of(block: &Block) -> FreeKey {
        FreeKey { size: block.size, counter: block.registration_counter, addr: block.addr }
    }

    /// The first possible key of `size`: before every block of that size.
    #[inline]
    fn first_of(size: u64) -> FreeKey {
        FreeKey { size, counter: 0, addr: 0 }
    }
}

/// One free block as the pool orders it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeEntry {
    pub stream: StreamId,
    pub size: u64,
    pub addr: u64,
    pub counter: u32,
    pub id: BlockId,
    /// Where the entry was in its stream's vector when found (`NOWHERE`
    /// in a tree, or when not known): a hint that saves the search when
    /// the entry is taken out or rewritten, checked before it is trusted.
    pub index: u32,
}

/// The index hint of an entry whose place is not known.
pub(crate) const NOWHERE: u32 = u32::MAX;

impl FreeEntry {
    #[inline]
    pub fn key(&self) -> FreeKey {
        FreeKey { size: self.size, counter: self.counter, addr: self.addr }
    }
}

#[inline]
fn entry(stream: StreamId, key: FreeKey, id: BlockId) -> FreeEntry {
    FreeEntry { stream, size: key.size, addr: key.addr, counter: key.counter, id, index: NOWHERE }
}

impl FreeKey {
    /// `self < k` in (size, counter, address) order, without a branch: a
    /// search's comparisons go either way at random, and a mispredicted
    /// branch at each costs more than computing all three.
    #[inline(always)]
    fn lt(self, k: FreeKey) -> bool {
        (self.size < k.size) | ((self.size == k.size) & ((self.counter < k.counter) | ((self.counter == k.counter) & (self.addr < k.addr))))
    }
}

/// The first index of `v` at which `below` turns false (`v.len()` if it
/// never does), for a `below` that holds on a prefix of `v`: what
/// `partition_point` gives, searched in four-way steps. A step reads
/// three entries that depend only on the step before, so their loads
/// overlap, and the processor, predicting the step's outcome, starts the
/// next step's loads before they arrive: on a search whose every step
/// waits for its load, a replay ran 6% faster than with
/// `partition_point`'s branch-free halving (and 10% faster than with
/// halving by branches), for 10% more instructions.
#[inline(always)]
fn partition(v: &[Slot], below: impl Fn(&Slot) -> bool) -> usize {
    // The answer lies in [base, base + len]: every entry before `base`
    // is below, every entry from `base + len` on is not.
    let (mut base, mut len) = (0, v.len());
    while len >= 4 {
        let q = len / 4;
        // How many probes are below: they come first (a prefix).
        let n = usize::from(below(&v[base + q])) + usize::from(below(&v[base + 2 * q])) + usize::from(below(&v[base + 3 * q]));
        // None: the answer is at most the first probe. Some: it is just
        // after the last one below, at most at the next probe (or the end).
        (base, len) = match n {
            0 => (base, q),
            3 => (base + 3 * q + 1, len - 3 * q - 1),
            n => (base + n * q + 1, q - 1),
        };
    }
    // At most three left, read at once.
    let rest = &v[base..base + len];
    let at = |i: usize| rest.get(i).is_some_and(&below);
    base + usize::from(at(0)) + usize::from(at(1)) + usize::from(at(2))
}

/// The index of the first entry of `v` of at least `size` bytes (`v.len()`
/// if none): where best fit's candidates start, and where a key's search
/// by size ends.
#[inline(always)]
fn first_of_size(v: &[Slot], size: u64) -> usize {
    partition(v, |e| e.size < size)
}

/// The index of the first entry of `v` whose key is not below `k` (`v.len()` if none).
#[inline(always)]
fn first_not_below(v: &[Slot], k: FreeKey) -> usize {
    partition(v, |e| e.key().lt(k))
}

/// The index of the first entry of `v` whose key is above `k`.
#[inline(always)]
fn first_above(v: &[Slot], k: FreeKey) -> usize {
    partition(v, |e| !k.lt(e.key()))
}

/// The index of `k` in a sorted vector, if it is there (else where it
/// would go). The search is by size alone (a load and a compare a step,
/// where a whole key takes three of each, chained). Only if the first
/// entry of that size is another one does a second search, by whole keys,
/// go on from there.
#[inline(always)]
fn search(v: &[Slot], k: FreeKey) -> Result<usize, usize> {
    let at = first_of_size(v, k.size);
    match v.get(at) {
        Some(e) if e.key() == k => Ok(at),
        Some(e) if e.size == k.size => {
            let at = at + first_not_below(&v[at..], k);
            match v.get(at) {
                Some(e) if e.key() == k => Ok(at),
                _ => Err(at),
            }
        }
        _ => Err(at),
    }
}

/// The index of `k` in a sorted vector, trying `hint` first, then the
/// places before and after it: a parked free's merge, done between a
/// search and the use of what it found, moves one entry from below the
/// found one to above it, and a block's place when it was put in
/// ([`FreeBlocks::placed`]) is one off after one entry came in, went out
/// or moved past it below.
#[inline(always)]
fn index_of(v: &[Slot], k: FreeKey, hint: u32) -> Option<usize> {
    let hint = hint as usize;
    let is = |i: usize| v.get(i).is_some_and(|e| e.key() == k);
    if is(hint) {
        Some(hint)
    } else if hint.checked_sub(1).is_some_and(is) {
        Some(hint - 1)
    } else if hint.checked_add(1).is_some_and(is) {
        Some(hint + 1)
    } else {
        search(v, k).ok()
    }
}

/// One entry of a sorted vector: a key and its block in 24 bytes (a
/// `(FreeKey, BlockId)` pair takes 32), so that a vector's moves and
/// searches touch fewer cache lines.
#[derive(Clone, Copy, Debug)]
struct Slot {
    size: u64,
    addr: u64,
    counter: u32,
    id: BlockId,
}

impl Slot {
    #[inline(always)]
    fn new(k: FreeKey, id: BlockId) -> Slot {
        Slot { size: k.size, addr: k.addr, counter: k.counter, id }
    }

    #[inline(always)]
    fn key(&self) -> FreeKey {
        FreeKey { size: self.size, counter: self.counter, addr: self.addr }
    }

    #[inline(always)]
    fn pair(&self) -> (FreeKey, BlockId) {
        (self.key(), self.id)
    }
}

/// An ordered map from keys to blocks: a sorted `Vec` while small (the
/// common case: up to a few hundred free blocks per stream, where moving
/// entries beats a tree), a `BTreeMap` once it grows. Same order either way.
#[derive(Clone, Debug)]
enum Ordered {
    Small(Vec<Slot>),
    Large(BTreeMap<FreeKey, BlockId>),
}

/// Entries at which a small map becomes a tree, and a tree becomes small
/// again. The synthetic benchmark trace keeps 32 to 63 free blocks at 99%
/// of inserts, now and then up to 127: at 64 its set crossed over once and
/// stayed a tree, which cost 10% of a replay's instructions. The
/// unit test below uses small bounds so its few hundred operations cross
/// them both ways.
const GROW_AT: usize = if cfg!(test) { 64 } else { 256 };
const SHRINK_AT: usize = if cfg!(test) { 16 } else { 64 };

impl Default for Ordered {
    fn default() -> Self {
        Ordered::Small(Vec::new())
    }
}

impl Ordered {
    /// Inserts `(k, id)`: its index in a vector (`NOWHERE` in a tree), or
    /// `None` if `k` was already there.
    #[inline]
    fn insert(&mut self, k: FreeKey, id: BlockId) -> Option<u32> {
        match self {
            Ordered::Small(v) => match search(v, k) {
                Ok(_) => None,
                Err(at) => {
                    v.insert(at, Slot::new(k, id));
                    if v.len() > GROW_AT {
                        *self = Ordered::Large(v.drain(..).map(|e| e.pair()).collect());
                        return Some(NOWHERE);
                    }
                    Some(at as u32)
                }
            },
            // As the vector does, an entry already there is kept.
            Ordered::Large(m) => match m.entry(k) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(id);
                    Some(NOWHERE)
                }
                std::collections::btree_map::Entry::Occupied(_) => None,
            },
        }
    }

    #[inline]
    fn remove(&mut self, k: FreeKey, hint: u32) -> bool {
        match self {
            Ordered::Small(v) => match index_of(v, k, hint) {
                Some(at) => {
                    v.remove(at);
                    true
                }
                None => false,
            },
            Ordered::Large(m) => {
                let removed = m.remove(&k).is_some();
                if m.len() < SHRINK_AT {
                    *self = Ordered::Small(std::mem::take(m).into_iter().map(|(k, id)| Slot::new(k, id)).collect());
                }
                removed
            }
        }
    }

    /// Replaces the entry at `old` by `(new, id)`: the new entry's index
    /// in a vector (`NOWHERE` in a tree), `None` if `old` was not there
    /// (or `new` was, in a tree). In a vector only the entries between the
    /// old place and the new one move (none when the key keeps its place),
    /// not the tail twice: a split makes a free block smaller, a merge
    /// larger, and either often moves it past a few others.
    #[inline(always)]
    fn rekey(&mut self, old: FreeKey, hint: u32, new: FreeKey, id: BlockId) -> Option<u32> {
        match self {
            Ordered::Small(v) => {
                let at = index_of(v, old, hint)?;
                let to = if (at == 0 || v[at - 1].key().lt(new)) && v.get(at + 1).is_none_or(|e| new.lt(e.key())) {
                    at
                } else if new.lt(old) {
                    let to = first_not_below(&v[..at], new);
                    v.copy_within(to..at, to + 1);
                    to
                } else {
                    let to = at + first_not_below(&v[at + 1..], new);
                    v.copy_within(at + 1..=to, at);
                    to
                };
                v[to] = Slot::new(new, id);
                Some(to as u32)
            }
            Ordered::Large(m) => (m.remove(&old).is_some() && m.insert(new, id).is_none()).then_some(NOWHERE),
        }
    }

    #[inline]
    fn get(&self, k: FreeKey) -> Option<BlockId> {
        match self {
            Ordered::Small(v) => search(v, k).ok().map(|at| v[at].id),
            Ordered::Large(m) => m.get(&k).copied(),
        }
    }

    /// The first entry of at least `size` bytes (the first with key >=
    /// `FreeKey::first_of(size)`, which only the size decides), and its
    /// index in a vector.
    #[inline(always)]
    fn at_or_after(&self, size: u64) -> Option<(FreeKey, BlockId, u32)> {
        match self {
            Ordered::Small(v) => {
                let at = first_of_size(v, size);
                v.get(at).map(|e| (e.key(), e.id, at as u32))
            }
            Ordered::Large(m) => m.range(FreeKey::first_of(size)..).next().map(|(&a, &b)| (a, b, NOWHERE)),
        }
    }

    /// The first entry with key > k (k found at index `hint`, or not), and
    /// its index in a vector.
    #[inline]
    fn after(&self, k: FreeKey, hint: u32) -> Option<(FreeKey, BlockId, u32)> {
        match self {
            Ordered::Small(v) => {
                let at = index_of(v, k, hint).map_or_else(|| first_above(v, k), |at| at + 1);
                v.get(at).map(|e| (e.key(), e.id, at as u32))
            }
            Ordered::Large(m) => {
                use std::ops::Bound::{Excluded, Unbounded};
                m.range((Excluded(k), Unbounded)).next().map(|(&a, &b)| (a, b, NOWHERE))
            }
        }
    }

    /// The keys just before and just after `k`, which is there.
    #[inline(always)]
    fn around(&self, k: FreeKey) -> Option<(Option<FreeKey>, Option<FreeKey>)> {
        match self {
            Ordered::Small(v) => {
                let at = search(v, k).ok()?;
                Some((at.checked_sub(1).map(|i| v[i].key()), v.get(at + 1).map(Slot::key)))
            }
            Ordered::Large(m) => Self::around_in_tree(m, k),
        }
    }

    #[inline(never)]
    fn around_in_tree(m: &BTreeMap<FreeKey, BlockId>, k: FreeKey) -> Option<(Option<FreeKey>, Option<FreeKey>)> {
        use std::ops::Bound::{Excluded, Unbounded};
        m.contains_key(&k).then(|| (m.range(..k).next_back().map(|e| *e.0), m.range((Excluded(k), Unbounded)).next().map(|e| *e.0)))
    }

    /// The entry with the largest key.
    fn last(&self) -> Option<FreeKey> {
        match self {
            Ordered::Small(v) => v.last().map(Slot::key),
            Ordered::Large(m) => m.last_key_value().map(|e| *e.0),
        }
    }

    /// The last entry with key < k.
    #[inline]
    fn before(&self, k: FreeKey) -> Option<(FreeKey, BlockId)> {
        match self {
            Ordered::Small(v) => first_not_below(v, k).checked_sub(1).map(|at| v[at].pair()),
            Ordered::Large(m) => m.range(..k).next_back().map(|(&a, &b)| (a, b)),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (FreeKey, BlockId)> + '_> {
        match self {
            Ordered::Small(v) => Box::new(v.iter().map(Slot::pair)),
            Ordered::Large(m) => Box::new(m.iter().map(|(&a, &b)| (a, b))),
        }
    }
}

/// The free set of one pool: per stream (sorted by stream handle), blocks by [`FreeKey`].
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeBlocks {
    streams: Vec<(StreamId, Ordered)>,
    len: usize,
    /// Changes so far (inserts, removals, rekeys): while it stays the same,
    /// so do the contents.
    generation: u64,
    /// Per block (by arena slot): the index its entry was put at in its
    /// stream's vector, the last time it went in or was rekeyed. A hint
    /// for the search that takes it out or rekeys it ([`FreeBlocks::placed`]).
    placed: Vec<u32>,
}

impl FreeBlocks {
    #[inline]
    fn stream(&self, stream: StreamId) -> Option<&Ordered> {
        if let Some((s, m)) = self.streams.first() {
            if *s == stream {
                return Some(m);
            }
        }
        self.streams.iter().find(|(s, _)| *s == stream).map(|(_, m)| m)
    }

    #[inline(always)]
    fn stream_mut(&mut self, stream: StreamId) -> &mut Ordered {
        // Most programs use one stream: its set is the first.
        if self.streams.first().is_some_and(|(s, _)| *s == stream) {
            return &mut self.streams[0].1;
        }
        match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(at) => &mut self.streams[at].1,
            None => self.add_stream(stream),
        }
    }

    #[inline(never)]
    fn add_stream(&mut self, stream: StreamId) -> &mut Ordered {
        let at = self.streams.partition_point(|(s, _)| *s < stream);
        self.streams.insert(at, (stream, Ordered::default()));
        &mut self.streams[at].1
    }

    /// Inserts a free block; false if it was already there.
    #[inline]
    pub fn insert(&mut self, stream: StreamId, key: FreeKey, id: BlockId) -> bool {
        let at = self.stream_mut(stream).insert(key, id);
        self.len += at.is_some() as usize;
        self.generation += 1;
        self.place(id, at)
    }

    /// Removes a free block (found at index `hint`, or `NOWHERE`); false
    /// if it was not there.
    #[inline]
    pub fn remove(&mut self, stream: StreamId, key: FreeKey, hint: u32) -> bool {
        let removed = self.stream_mut(stream).remove(key, hint);
        self.len -= removed as usize;
        self.generation += 1;
        removed
    }

    /// Replaces the free block at `old` (found at index `hint`, or
    /// `NOWHERE`) by the one at `new` on the same stream: a remove and an
    /// insert in one search, or none; false if `old` was not there.
    #[inline]
    pub fn rekey(&mut self, stream: StreamId, old: FreeKey, hint: u32, new: FreeKey, id: BlockId) -> bool {
        self.generation += 1;
        let to = self.stream_mut(stream).rekey(old, hint, new, id);
        self.place(id, to)
    }

    /// Notes where block `id` went (`at`, if it went in); whether it did.
    #[inline(always)]
    fn place(&mut self, id: BlockId, at: Option<u32>) -> bool {
        let Some(at) = at else { return false };
        match self.placed.get_mut(id.slot()) {
            Some(p) => *p = at,
            None => self.grow_placed(id, at),
        }
        true
    }

    #[inline(never)]
    fn grow_placed(&mut self, id: BlockId, at: u32) {
        self.placed.resize(id.slot() + 1, NOWHERE);
        self.placed[id.slot()] = at;
    }

    /// Where block `id`'s entry was put the last time it went in or was
    /// rekeyed (`NOWHERE` if never): the hint that takes it out or rekeys
    /// it without a search, where the block was not just found. The free
    /// a merge takes in was put in (or rekeyed) by an earlier split or
    /// merge, and the entries that came in, went out or moved past it
    /// since leave it at that place, or one off, three times in four on
    /// the synthetic training trace. Like every hint, checked before it is
    /// trusted.
    #[inline(always)]
    pub fn placed(&self, id: BlockId) -> u32 {
        self.placed.get(id.slot()).copied().unwrap_or(NOWHERE)
    }

    /// Whether exactly this block is in the set.
    pub fn contains(&self, stream: StreamId, key: FreeKey, id: BlockId) -> bool {
        self.stream(stream).and_then(|m| m.get(key)) == Some(id)
    }

    /// Number of free blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Changes so far; the contents are the same while it is.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The first free block on `stream` with size >= `size` (the oldest
    /// segment's, then the lowest address, among equals). Inlined, as
    /// `find_free_block` is, so that the entry is not returned through memory.
    #[inline(always)]
    pub fn lower_bound(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (k, id, index) = self.stream(stream)?.at_or_after(size)?;
        Some(FreeEntry { index, ..entry(stream, k, id) })
    }

    /// The free block on `stream` just before the first position of `size`:
    /// the largest one smaller than `size`.
    #[inline]
    pub fn before(&self, stream: StreamId, size: u64) -> Option<FreeEntry> {
        let (k, id) = self.stream(stream)?.before(FreeKey::first_of(size))?;
        Some(entry(stream, k, id))
    }

    /// The free block on the same stream just before `e`.
    #[inline]
    pub fn predecessor(&self, e: FreeEntry) -> Option<FreeEntry> {
        let (k, id) = self.stream(e.stream)?.before(e.key())?;
        Some(entry(e.stream, k, id))
    }

    /// The keys of the free blocks just before and just after the one at
    /// `key` on `stream`, if that one is there.
    #[inline]
    pub fn around(&self, stream: StreamId, key: FreeKey) -> Option<(Option<FreeKey>, Option<FreeKey>)> {
        self.stream(stream)?.around(key)
    }

    /// The free block on the same stream just after `e`.
    #[inline]
    pub fn successor(&self, e: FreeEntry) -> Option<FreeEntry> {
        let (k, id, index) = self.stream(e.stream)?.after(e.key(), e.index)?;
        Some(FreeEntry { index, ..entry(e.stream, k, id) })
    }

    /// The size of the largest free block (on any stream), 0 with none.
    pub fn largest(&self) -> u64 {
        self.streams.iter().filter_map(|(_, m)| m.last()).map(|k| k.size).max().unwrap_or(0)
    }

    /// Every free block in (stream, size, segment age, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeEntry> + '_ {
        self.streams.iter().flat_map(|(s, m)| m.iter().map(move |(k, id)| entry(*s, k, id)))
    }
}

/// One pool of free blocks.
#[derive(Clone, Debug)]
pub(crate) struct BlockPool {
    /// Free mapped blocks. A block is here iff it is not allocated and has
    /// no pending events or stream uses (a block `malloc` found stays here
    /// until `alloc_found_block` hands it, or the part it splits off, out).
    pub blocks: FreeBlocks,
    /// Unmapped blocks of expandable segments, by (stream, address).
    pub unmapped: BTreeMap<(StreamId, u64), BlockId>,
    /// Small or large.
    pub kind: PoolKind,
    /// `(0, 0)` for the default pools, else the private pool's id.
    pub owner: MempoolId,
    /// Calls of `get_free_block` on this pool while garbage collection is
    /// active; a block's age is this minus its `gc_count_base`.
    pub get_free_blocks_call_count: u64,
}

impl BlockPool {
    pub fn new(kind: PoolKind, owner: MempoolId) -> BlockPool {
        BlockPool { blocks: FreeBlocks::default(), unmapped: BTreeMap::new(), kind, owner, get_free_blocks_call_count: 0 }
    }

    #[inline]
    pub fn is_small(&self) -> bool {
        self.kind == PoolKind::Small
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, FreeKey),
        Remove(u8, usize),
        /// Gives the n-th block of a stream a new key: a split (smaller, higher
        /// address) or a merge (larger, same or lower address), or anything.
        Rekey(u8, usize, FreeKey),
    }

    fn key() -> impl Strategy<Value = FreeKey> {
        // Few sizes and counters, so ties on size (and counter) are common.
        (1u64..12, 0u32..3, 0u64..400).prop_map(|(size, counter, addr)| FreeKey { size: size << 9, counter, addr: addr << 9 })
    }

    /// Block `id`, just put in or rekeyed on `stream`, lies where
    /// `placed` says (in a vector; a tree has no places).
    fn placed_right(set: &FreeBlocks, stream: StreamId, id: BlockId) -> bool {
        match set.stream(stream) {
            Some(Ordered::Small(v)) => v.get(set.placed(id) as usize).is_some_and(|e| e.id == id),
            _ => set.placed(id) == NOWHERE,
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..2, key()).prop_map(|(s, k)| Op::Insert(s, k)),
            2 => (0u8..2, any::<usize>()).prop_map(|(s, n)| Op::Remove(s, n)),
            3 => (0u8..2, any::<usize>(), key()).prop_map(|(s, n, k)| Op::Rekey(s, n, k)),
        ]
    }

    proptest! {
        /// The searches' branch-free comparison is the keys' order, on
        /// keys that tie in size, counter or both, and on any keys.
        #[test]
        fn lt_is_the_key_order(a in key(), b in key(), c in any::<(u64, u32, u64)>(), d in any::<(u64, u32, u64)>()) {
            prop_assert_eq!(a.lt(b), a < b);
            prop_assert_eq!(a.lt(a), false);
            let (c, d) = (FreeKey { size: c.0, counter: c.1, addr: c.2 }, FreeKey { size: d.0, counter: d.1, addr: d.2 });
            prop_assert_eq!(c.lt(d), c < d);
        }

        /// The four-way search finds what `partition_point` does, on
        /// vectors of every length up to a few hundred, with many ties.
        #[test]
        fn partition_is_partition_point(mut sizes in proptest::collection::vec(0u64..40, 0..300), size in 0u64..42) {
            sizes.sort_unstable();
            let v: Vec<Slot> = sizes.iter().enumerate().map(|(i, &s)| Slot { size: s, addr: i as u64, counter: 0, id: BlockId::for_test(i as u32) }).collect();
            prop_assert_eq!(partition(&v, |e| e.size < size), v.partition_point(|e| e.size < size));
            prop_assert_eq!(partition(&v, |e| e.size <= size), v.partition_point(|e| e.size <= size));
        }

        /// `search` finds a key, or its place, as a binary search of whole
        /// keys does, and `index_of` finds it whatever the hint (right,
        /// one too high, wrong, out of range, `NOWHERE`), on sets where
        /// sizes and counters tie often.
        #[test]
        fn search_and_index_of_agree_with_a_binary_search(keys in proptest::collection::btree_set(key(), 0..120), probe in key(), hint in any::<u32>()) {
            let v: Vec<Slot> = keys.iter().enumerate().map(|(i, &k)| Slot::new(k, BlockId::for_test(i as u32))).collect();
            let sorted: Vec<FreeKey> = keys.iter().copied().collect();
            prop_assert_eq!(search(&v, probe), sorted.binary_search(&probe));
            for k in sorted.iter().copied().chain([probe]) {
                let at = sorted.binary_search(&k).ok();
                let right = at.map_or(0, |i| i as u32);
                for h in [hint, right, right + 1, right + 2, right.wrapping_sub(1), right.wrapping_sub(2), v.len() as u32, NOWHERE] {
                    prop_assert_eq!(index_of(&v, k, h), at);
                }
            }
        }

        /// The free set (sorted vectors, trees past 64 entries, keys
        /// rewritten in place by `rekey`) holds and finds exactly what an
        /// ordered map of (stream, key) does, and a block just put in or
        /// rekeyed is where `placed` says (in a vector).
        #[test]
        fn agrees_with_an_ordered_map(ops in proptest::collection::vec(op(), 1..600)) {
            let mut set = FreeBlocks::default();
            let mut model: BTreeMap<(StreamId, FreeKey), BlockId> = BTreeMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                let id = BlockId::for_test(n as u32);
                match op {
                    Op::Insert(s, k) => {
                        let s = StreamId(u64::from(s));
                        let new = !model.contains_key(&(s, k));
                        prop_assert_eq!(set.insert(s, k, id), new);
                        model.entry((s, k)).or_insert(id);
                        if new {
                            prop_assert!(placed_right(&set, s, id));
                        }
                    }
                    Op::Remove(s, _) | Op::Rekey(s, _, _) if !model.keys().any(|(t, _)| t.0 == u64::from(s)) => {}
                    Op::Remove(s, n) => {
                        let s = StreamId(u64::from(s));
                        let keys: Vec<FreeKey> = model.keys().filter(|(t, _)| *t == s).map(|(_, k)| *k).collect();
                        let k = keys[n % keys.len()];
                        // The hint of where it was put, stale or not, or any.
                        let hint = if n % 2 == 0 { set.placed(model[&(s, k)]) } else { n as u32 % 70 };
                        prop_assert!(set.remove(s, k, hint));
                        model.remove(&(s, k));
                    }
                    Op::Rekey(s, n, new) => {
                        let s = StreamId(u64::from(s));
                        let keys: Vec<FreeKey> = model.keys().filter(|(t, _)| *t == s).map(|(_, k)| *k).collect();
                        let old = keys[n % keys.len()];
                        if model.contains_key(&(s, new)) && new != old {
                            continue;
                        }
                        prop_assert!(set.rekey(s, old, n as u32 % 70, new, id));
                        model.remove(&(s, old));
                        model.insert((s, new), id);
                        prop_assert!(placed_right(&set, s, id));
                    }
                }
                prop_assert_eq!(set.len(), model.len());
                let listed: Vec<_> = set.iter().map(|e| ((e.stream, e.key()), e.id)).collect();
                let expected: Vec<_> = model.iter().map(|(&k, &id)| (k, id)).collect();
                prop_assert_eq!(&listed, &expected);
                for s in [StreamId(0), StreamId(1)] {
                    for size in (0..14u64).map(|z| z << 9) {
                        let first = model.range((s, FreeKey::first_of(size))..).next().filter(|((t, _), _)| *t == s);
                        prop_assert_eq!(set.lower_bound(s, size).map(|e| (e.key(), e.id)), first.map(|((_, k), id)| (*k, *id)));
                    }
                }
            }
        }
    }
}

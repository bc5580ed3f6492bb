//! [`Entries`]: one device's trace entries, stored by column.
//!
//! A trace holds millions of entries, and every analysis walks them in
//! order reading the same four fields (action, address, size, stream);
//! stacks, times and compile contexts are read for a few of them. So each
//! field is a column of its own, an optional field's column is empty when
//! no entry has it, and stacks and strings are held once each, in tables the
//! entries index (stacks repeat: one per allocation site). An entry costs
//! 9 bytes (action, address, size), one more where the trace uses several
//! streams, 4 for a recorded time (8 in a trace that spans more than 35
//! minutes; see `narrow.rs`) and 4 for each of stack, compile context and
//! user metadata where recorded; a [`TraceEntry`] takes 120.

use crate::narrow::{Addrs, Sizes, Streams, Times};
use std::collections::HashMap;
use vramkit_core::snapshot::{Frame, Frames, TraceAction, TraceEntry};

/// The four fields every entry has, by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// What happened.
    pub action: TraceAction,
    /// Address; for `oom`, the device's free bytes (PyTorch's `device_free`).
    pub addr: u64,
    /// Bytes (see [`TraceAction`] for which size each action records).
    pub size: u64,
    /// Stream handle.
    pub stream: u64,
}

/// One device's trace entries, oldest first, by column.
#[derive(Clone, Debug, Default)]
pub struct Entries {
    actions: Vec<TraceAction>,
    addrs: Addrs,
    sizes: Sizes,
    streams: Streams,
    /// `time_us` per entry; empty when no entry records one.
    times: Times,
    /// Entries that record no `time_us` although others do, ascending
    /// (their slot in `times` holds no time). Empty when `times` is.
    untimed: Vec<u32>,
    /// Per entry, 1 + the index of its stack in `stacks`, or 0 for none;
    /// empty when no entry has a stack.
    frames: Vec<u32>,
    /// Per entry, 1 + the index of its `compile_context` in `strings`, or 0;
    /// empty when no entry has one.
    compile_contexts: Vec<u32>,
    /// Per entry, 1 + the index of its `user_metadata` in `strings`, or 0;
    /// empty when no entry has one.
    user_metadata: Vec<u32>,
    /// Every distinct stack the entries have, each once.
    stacks: Vec<Frames>,
    /// Every distinct string of `compile_context` and `user_metadata`.
    strings: Vec<Box<str>>,
}

/// Whether two stacks are one: the same `Arc`, or equal frames.
fn same_stack(a: &[Frame], b: &[Frame]) -> bool {
    std::ptr::eq(a, b) || a == b
}

impl Entries {
    /// No entries.
    pub fn new() -> Entries {
        Entries::default()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// No entries at all.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Entry `i`'s four fields. Panics if `i` is out of range.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Entry {
        Entry { action: self.actions[i], addr: self.addrs.get(i), size: self.sizes.get(i), stream: self.streams.get(i) }
    }

    /// Every entry's four fields, oldest first.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_range(0..self.len())
    }

    /// The four fields of entries `range` (cut at the end), oldest first.
    pub fn iter_range(&self, range: std::ops::Range<usize>) -> Iter<'_> {
        let back = range.end.min(self.len());
        Iter { entries: self, front: range.start.min(back), back }
    }

    /// The actions column.
    pub fn actions(&self) -> &[TraceAction] {
        &self.actions
    }

    /// Entry `i`'s address (`device_free` for an `oom` entry). Panics if
    /// `i` is out of range.
    #[inline(always)]
    pub fn addr(&self, i: usize) -> u64 {
        self.addrs.get(i)
    }

    /// Entry `i`'s size. Panics if `i` is out of range.
    #[inline(always)]
    pub fn size(&self, i: usize) -> u64 {
        self.sizes.get(i)
    }

    /// Every entry's address, oldest first.
    #[inline]
    pub fn addrs(&self) -> impl ExactSizeIterator<Item = u64> + DoubleEndedIterator + Clone + '_ {
        self.addrs.iter()
    }

    /// Every entry's size, oldest first.
    #[inline]
    pub fn sizes(&self) -> impl ExactSizeIterator<Item = u64> + DoubleEndedIterator + Clone + '_ {
        self.sizes.iter()
    }

    /// Entry `i`'s stream handle. Panics if `i` is out of range.
    #[inline]
    pub fn stream(&self, i: usize) -> u64 {
        self.streams.get(i)
    }

    /// Entry `i`'s `time_us`, where recorded.
    pub fn time_us(&self, i: usize) -> Option<u64> {
        let t = self.times.get(i)?;
        (self.untimed.is_empty() || self.untimed.binary_search(&(i as u32)).is_err()).then_some(t)
    }

    /// Entry `i`'s stack, where recorded.
    pub fn frames(&self, i: usize) -> Option<&Frames> {
        let k = *self.frames.get(i)?;
        self.stacks.get((k as usize).checked_sub(1)?)
    }

    /// Entry `i`'s `compile_context`, where recorded.
    pub fn compile_context(&self, i: usize) -> Option<&str> {
        self.string(&self.compile_contexts, i)
    }

    /// Entry `i`'s `user_metadata`, where recorded.
    pub fn user_metadata(&self, i: usize) -> Option<&str> {
        self.string(&self.user_metadata, i)
    }

    fn string(&self, column: &[u32], i: usize) -> Option<&str> {
        let k = *column.get(i)?;
        self.strings.get((k as usize).checked_sub(1)?).map(|s| &**s)
    }

    /// Entry `i`'s stack, compile context and user metadata ids as stored
    /// (see [`push_raw`](Self::push_raw)).
    pub(crate) fn raw_ids(&self, i: usize) -> [u32; 3] {
        let id = |column: &[u32]| column.get(i).copied().unwrap_or(0);
        [id(&self.frames), id(&self.compile_contexts), id(&self.user_metadata)]
    }

    /// Column `k` of [`raw_ids`](Self::raw_ids) for entries `range` (empty
    /// where no entry of the column has an id).
    pub(crate) fn raw_id_column(&self, k: usize, range: std::ops::Range<usize>) -> &[u32] {
        let column = [&self.frames, &self.compile_contexts, &self.user_metadata][k];
        column.get(range.start.min(column.len())..range.end.min(column.len())).unwrap_or_default()
    }

    /// Whether some entry of `range` records a `time_us`.
    pub(crate) fn any_timed(&self, range: std::ops::Range<usize>) -> bool {
        let covered = range.start..range.end.min(self.times.len());
        let untimed = |end: usize| self.untimed.partition_point(|&u| (u as usize) < end);
        !covered.is_empty() && untimed(covered.end) - untimed(covered.start) < covered.len()
    }

    /// The distinct stacks the entries have (each once).
    pub fn stacks(&self) -> &[Frames] {
        &self.stacks
    }

    /// Entry `i` as the core model holds it.
    pub fn trace_entry(&self, i: usize) -> TraceEntry {
        let e = self.get(i);
        TraceEntry {
            action: e.action,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
            time_us: self.time_us(i),
            frames: self.frames(i).cloned(),
            compile_context: self.compile_context(i).map(str::to_owned),
            user_metadata: self.user_metadata(i).map(str::to_owned),
        }
    }

    /// Every entry as the core model holds it; entries that shared a stack still do.
    pub fn to_trace_entries(&self) -> Vec<TraceEntry> {
        (0..self.len()).map(|i| self.trace_entry(i)).collect()
    }

    /// Bytes the columns and tables take (stacks counted once each).
    pub fn heap_bytes(&self) -> usize {
        let frames: usize = self.stacks.iter().map(|s| s.iter().map(|f| 48 + f.filename.len() + f.name.len()).sum::<usize>()).sum();
        self.actions.capacity()
            + self.addrs.heap_bytes()
            + self.sizes.heap_bytes()
            + self.streams.heap_bytes()
            + self.times.heap_bytes()
            + 4 * (self.untimed.capacity() + self.frames.capacity() + self.compile_contexts.capacity() + self.user_metadata.capacity())
            + frames
            + self.strings.iter().map(|s| s.len() + 16).sum::<usize>()
    }
}

impl PartialEq for Entries {
    /// Equal entries, whatever order the tables hold stacks and strings in.
    fn eq(&self, other: &Entries) -> bool {
        let same_frames = |i: usize| match (self.frames(i), other.frames(i)) {
            (Some(a), Some(b)) => same_stack(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        self.actions == other.actions
            && self.addrs.iter().eq(other.addrs.iter())
            && self.sizes.iter().eq(other.sizes.iter())
            && self.streams.same(&other.streams)
            && (0..self.len()).all(|i| {
                self.time_us(i) == other.time_us(i)
                    && same_frames(i)
                    && self.compile_context(i) == other.compile_context(i)
                    && self.user_metadata(i) == other.user_metadata(i)
            })
    }
}

/// The entries of an [`Entries`], by value ([`Entries::iter`]).
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    entries: &'a Entries,
    /// The next entry from the front; `back` is one past the next from the back.
    front: usize,
    back: usize,
}

impl Iterator for Iter<'_> {
    type Item = Entry;

    #[inline(always)]
    fn next(&mut self) -> Option<Entry> {
        (self.front < self.back).then(|| {
            self.front += 1;
            self.entries.get(self.front - 1)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.back - self.front, Some(self.back - self.front))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    #[inline(always)]
    fn next_back(&mut self) -> Option<Entry> {
        (self.front < self.back).then(|| {
            self.back -= 1;
            self.entries.get(self.back)
        })
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Entries {
    type Item = Entry;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<TraceEntry> for Entries {
    fn from_iter<I: IntoIterator<Item = TraceEntry>>(entries: I) -> Entries {
        let mut builder = EntriesBuilder::default();
        for e in entries {
            builder.push_entry(&e);
        }
        builder.finish()
    }
}

impl From<&[TraceEntry]> for Entries {
    fn from(entries: &[TraceEntry]) -> Entries {
        let mut builder = EntriesBuilder::default();
        for e in entries {
            builder.push_entry(e);
        }
        builder.finish()
    }
}

/// Fills [`Entries`] one entry at a time, holding each stack and string once.
#[derive(Debug, Default)]
pub(crate) struct EntriesBuilder {
    entries: Entries,
    /// Stacks by the address of their frames (one `Arc` is one stack; an
    /// address of ours, so hashed fast).
    stack_ids: crate::fx::FxHashMap<*const Frame, u32>,
    string_ids: HashMap<Box<str>, u32>,
}

impl EntriesBuilder {
    /// The id of `stack` in the table (1-based), adding it the first time.
    pub(crate) fn stack_id(&mut self, stack: &Frames) -> u32 {
        let table = &mut self.entries.stacks;
        *self.stack_ids.entry(stack.as_ptr()).or_insert_with(|| {
            table.push(stack.clone());
            table.len() as u32
        })
    }

    /// The id of `text` in the string table (1-based), adding it the first time.
    pub(crate) fn string_id(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(text) {
            return id;
        }
        self.entries.strings.push(text.into());
        let id = self.entries.strings.len() as u32;
        self.string_ids.insert(text.into(), id);
        id
    }

    /// Appends one entry; `ids` are its stack, compile context and user
    /// metadata as ids of this builder's tables (0: not recorded).
    pub(crate) fn push(&mut self, e: Entry, time_us: Option<u64>, ids: [u32; 3]) {
        self.entries.push_raw(e, time_us, ids);
    }

    /// Appends a core model entry.
    pub(crate) fn push_entry(&mut self, e: &TraceEntry) {
        let ids = [
            e.frames.as_ref().map_or(0, |f| self.stack_id(f)),
            e.compile_context.as_deref().map_or(0, |s| self.string_id(s)),
            e.user_metadata.as_deref().map_or(0, |s| self.string_id(s)),
        ];
        self.push(Entry { action: e.action, addr: e.addr, size: e.size, stream: e.stream }, e.time_us, ids);
    }

    pub(crate) fn finish(self) -> Entries {
        self.entries
    }

    /// `rows` (filled by the pickle reader, no tables of their own) with
    /// this builder's tables, each stored id `k` (a node id plus 1) become
    /// `id_of[k - 1]` (0 staying 0), and this builder's entries put in at
    /// `positions` (see [`Entries::interleave`]).
    pub(crate) fn finish_rows(mut self, mut rows: Entries, id_of: &[u32], positions: &[usize]) -> Entries {
        debug_assert!(rows.stacks.is_empty() && rows.strings.is_empty());
        for column in [&mut rows.frames, &mut rows.compile_contexts, &mut rows.user_metadata] {
            for id in column.iter_mut().filter(|id| **id != 0) {
                *id = id_of[*id as usize - 1];
            }
        }
        rows.stacks = std::mem::take(&mut self.entries.stacks);
        rows.strings = std::mem::take(&mut self.entries.strings);
        rows.interleave(&self.entries, positions)
    }
}

/// Sets entry `i`'s time (entries `0..i` are in `times` already, or it is
/// empty while none of them has a time).
fn push_time(times: &mut Times, untimed: &mut Vec<u32>, i: usize, t: Option<u64>) {
    match t {
        Some(t) => {
            if times.len() < i {
                untimed.extend(times.len() as u32..i as u32);
                times.fill_to(i);
            }
            times.push(t);
        }
        None if !times.is_empty() => {
            untimed.push(i as u32);
            times.push_none();
        }
        None => {}
    }
}

/// Sets entry `i`'s id in an optional column (0: none; the column stays
/// empty until some entry has one).
#[inline(always)]
fn push_id(column: &mut Vec<u32>, i: usize, id: u32) {
    if id != 0 && column.len() < i {
        column.resize(i, 0);
    }
    if id != 0 || !column.is_empty() {
        column.push(id);
    }
}

impl Entries {
    /// Room for `additional` more entries in the columns entries so far fill.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.actions.reserve(additional);
        self.addrs.reserve(additional);
        self.sizes.reserve(additional);
        self.streams.reserve(additional);
        if !self.times.is_empty() {
            self.times.reserve(additional);
        }
        for column in [&mut self.frames, &mut self.compile_contexts, &mut self.user_metadata] {
            if !column.is_empty() {
                column.reserve(additional);
            }
        }
    }

    /// Entries `range`, moved out when that is all of them, else copied
    /// (this value keeps its own).
    pub(crate) fn take_range(&mut self, range: std::ops::Range<usize>) -> Entries {
        if range == (0..self.len()) {
            return std::mem::take(self);
        }
        let mut out = Entries::default();
        for i in range {
            out.push_raw(self.get(i), self.time_us(i), self.raw_ids(i));
        }
        out
    }

    /// These entries with `others` put in at `positions` (ascending indices
    /// of the result, one per entry of `others`), in place: the columns
    /// grow by `others.len()` and entries move back past each insertion.
    /// The ids of both must refer to the same tables, this value's.
    pub(crate) fn interleave(mut self, others: &Entries, positions: &[usize]) -> Entries {
        debug_assert_eq!(others.len(), positions.len());
        if others.is_empty() {
            return self;
        }
        let rows = self.len();
        if !self.times.is_empty() || !others.times.is_empty() {
            // Where each untimed entry lands.
            let mine: Vec<u32> = if self.times.is_empty() { (0..rows as u32).collect() } else { std::mem::take(&mut self.untimed) };
            let mut j = 0;
            let moved = mine.into_iter().map(|u| {
                while j < positions.len() && positions[j] <= u as usize + j {
                    j += 1;
                }
                u + j as u32
            });
            let theirs = (0..others.len()).filter(|&k| others.time_us(k).is_none()).map(|k| positions[k] as u32);
            let mut untimed: Vec<u32> = moved.chain(theirs).collect();
            untimed.sort_unstable();
            self.untimed = untimed;
        }
        merge(&mut self.actions, &others.actions, positions, rows, TraceAction::Alloc);
        self.addrs.interleave(&others.addrs, positions, rows);
        self.sizes.interleave(&others.sizes, positions, rows);
        self.streams.interleave(&others.streams, positions, rows);
        self.times.interleave(&others.times, positions, rows);
        merge(&mut self.frames, &others.frames, positions, rows, 0);
        merge(&mut self.compile_contexts, &others.compile_contexts, positions, rows, 0);
        merge(&mut self.user_metadata, &others.user_metadata, positions, rows, 0);
        self
    }

    /// Appends one entry whose optional fields are `time_us` and the three
    /// `ids` (stack, compile context, user metadata; 0: not recorded), which
    /// refer to this value's tables, or, while the pickle reader fills the
    /// columns, to its own nodes until the decoder resolves them.
    #[inline(always)]
    pub(crate) fn push_raw(&mut self, e: Entry, time_us: Option<u64>, ids: [u32; 3]) {
        let i = self.actions.len();
        self.actions.push(e.action);
        self.addrs.push(e.addr);
        self.sizes.push(e.size);
        self.streams.push(e.stream);
        match time_us {
            // Every entry so far has a time, or none has: nothing to mark.
            Some(t) if self.times.len() == i => self.times.push(t),
            None if self.times.is_empty() => {}
            _ => push_time(&mut self.times, &mut self.untimed, i, time_us),
        }
        push_id(&mut self.frames, i, ids[0]);
        push_id(&mut self.compile_contexts, i, ids[1]);
        push_id(&mut self.user_metadata, i, ids[2]);
    }
}

/// One entry as [`Entries::push_raw`] takes it (the pickle reader hands
/// them over in batches).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawEntry {
    pub entry: Entry,
    pub time_us: Option<u64>,
    pub ids: [u32; 3],
}

impl Entries {
    /// [`push_raw`](Self::push_raw) of each of `batch`, a column at a
    /// time: an optional column that every entry so far and in the batch
    /// has, or none has, takes the batch in one go; else entry by entry.
    pub(crate) fn push_batch(&mut self, batch: &[RawEntry]) {
        let first = self.actions.len();
        self.actions.extend(batch.iter().map(|r| r.entry.action));
        self.addrs.extend(batch.iter().map(|r| r.entry.addr));
        self.sizes.extend(batch.iter().map(|r| r.entry.size));
        for r in batch {
            self.streams.push(r.entry.stream);
        }
        if self.times.len() == first && batch.iter().all(|r| r.time_us.is_some()) {
            for r in batch {
                self.times.push(r.time_us.unwrap_or_default());
            }
        } else if !(self.times.is_empty() && batch.iter().all(|r| r.time_us.is_none())) {
            for (i, r) in (first..).zip(batch) {
                push_time(&mut self.times, &mut self.untimed, i, r.time_us);
            }
        }
        for (k, column) in [&mut self.frames, &mut self.compile_contexts, &mut self.user_metadata].into_iter().enumerate() {
            if column.len() == first && batch.iter().all(|r| r.ids[k] != 0) {
                column.extend(batch.iter().map(|r| r.ids[k]));
            } else if !(column.is_empty() && batch.iter().all(|r| r.ids[k] == 0)) {
                for (i, r) in (first..).zip(batch) {
                    push_id(column, i, r.ids[k]);
                }
            }
        }
    }
}

/// Puts `others[k]` in at `positions[k]` into `column`, which holds the
/// values of `rows` entries (none at all when the column is empty, as an
/// optional column is; likewise `others`; `fill` stands for those): moves
/// each run of entries back past the insertions before it, from the last
/// run on.
fn merge<T: Copy>(column: &mut Vec<T>, others: &[T], positions: &[usize], rows: usize, fill: T) {
    if column.is_empty() && others.is_empty() {
        return;
    }
    column.resize(rows, fill);
    column.resize(rows + positions.len(), fill);
    let mut end = column.len();
    let mut r = rows;
    for (k, &p) in positions.iter().enumerate().rev() {
        let count = end - (p + 1);
        column.copy_within(r - count..r, p + 1);
        r -= count;
        column[p] = others.get(k).copied().unwrap_or(fill);
        end = p;
    }
    debug_assert_eq!(end, r);
}

//! Four columns of [`Entries`](crate::Entries) kept narrow. A trace holds
//! millions of entries, so each byte an entry takes is megabytes, and the
//! first touch of each fresh page of a column costs the kernel about as
//! much as the reader spends on the entries that fill it:
//! - [`Streams`]: a program uses one stream or a few, so an entry keeps the
//!   index of its handle among those seen (a byte), and nothing at all
//!   while every entry is on the first one; past 256 handles, the handles.
//! - [`Times`]: `time_us` is microseconds since the epoch and one trace's
//!   entries lie within minutes of each other, so an entry keeps its offset
//!   from the first time (four bytes, ±35 minutes); once one does not fit,
//!   the times.
//! - [`Addrs`] and [`Sizes`] ([`Words`]): PyTorch's blocks start on
//!   multiples of 512 within a TiB of each other, and almost every size is
//!   below 4 GiB, so an entry keeps four bytes of each; the few values that
//!   do not fit (an `oom` entry's free bytes, a size of 4 GiB or more) are
//!   kept beside the column.
//!
//! All read back exactly what was pushed.

/// Handles a byte can index.
const MAX_FEW: usize = 256;

/// The `rows + positions.len()` entries of an interleaving, in order:
/// the others' entry `k` (`theirs(k)`) at `positions[k]`, this column's
/// entries (`mine(j)`) between.
fn interleaved<'a, T>(
    rows: usize,
    positions: &'a [usize],
    mine: impl Fn(usize) -> T + 'a,
    theirs: impl Fn(usize) -> T + 'a,
) -> impl Iterator<Item = T> + 'a {
    let mut next = positions.iter().zip(0..).peekable();
    let mut j = 0;
    (0..rows + positions.len()).map(move |at| match next.next_if(|&(&p, _)| p == at) {
        Some((_, k)) => theirs(k),
        None => {
            j += 1;
            mine(j - 1)
        }
    })
}

/// The stream handle of each entry.
#[derive(Clone, Debug, Default)]
pub(crate) struct Streams {
    len: usize,
    /// The handle of every entry so far, while they are all on one.
    only: Option<u64>,
    /// Each handle once, in the order first seen (at most 256 while `wide` is empty).
    handles: Vec<u64>,
    /// Per entry, its handle's index; empty while `only` stands for them all, or `wide` does.
    of: Vec<u8>,
    /// Per entry, its handle, once more than 256 were seen; else empty.
    wide: Vec<u64>,
}

impl Streams {
    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entry `i`'s handle. Panics if `i` is out of range.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> u64 {
        match self.only {
            Some(handle) => {
                assert!(i < self.len, "entry {i} of {}", self.len);
                handle
            }
            None if self.wide.is_empty() => self.handles[usize::from(self.of[i])],
            None => self.wide[i],
        }
    }

    /// Appends an entry on `handle`.
    #[inline(always)]
    pub(crate) fn push(&mut self, handle: u64) {
        if self.only == Some(handle) {
            self.len += 1;
        } else {
            self.push_other(handle);
        }
    }

    /// [`push`](Self::push) where the entries so far are not all on `handle`.
    fn push_other(&mut self, handle: u64) {
        if self.len == 0 {
            self.only = Some(handle);
            self.handles.push(handle);
            self.len = 1;
            return;
        }
        if !self.wide.is_empty() {
            self.wide.push(handle);
            self.len += 1;
            return;
        }
        let k = match self.handles.iter().position(|&h| h == handle) {
            Some(k) => k,
            None if self.handles.len() < MAX_FEW => {
                self.handles.push(handle);
                self.handles.len() - 1
            }
            None => {
                let mut wide: Vec<u64> = (0..self.len).map(|i| self.get(i)).collect();
                wide.push(handle);
                (self.wide, self.of, self.only) = (wide, Vec::new(), None);
                self.len += 1;
                return;
            }
        };
        if self.only.take().is_some() {
            self.of = vec![0; self.len];
        }
        self.of.push(k as u8);
        self.len += 1;
    }

    /// Room for `additional` more entries, where entries take room.
    pub(crate) fn reserve(&mut self, additional: usize) {
        if !self.of.is_empty() {
            self.of.reserve(additional);
        }
        if !self.wide.is_empty() {
            self.wide.reserve(additional);
        }
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        8 * (self.handles.capacity() + self.wide.capacity()) + self.of.capacity()
    }

    /// Whether both hold the same handles, entry by entry.
    pub(crate) fn same(&self, other: &Streams) -> bool {
        self.len() == other.len() && (0..self.len()).all(|i| self.get(i) == other.get(i))
    }

    /// These `rows` entries with `others` put in at `positions` (see
    /// `Entries::interleave`).
    pub(crate) fn interleave(&mut self, others: &Streams, positions: &[usize], rows: usize) {
        debug_assert_eq!((self.len(), others.len()), (rows, positions.len()));
        // Entry by entry, in order: the handle table stays first seen first.
        let mut out = Streams::default();
        out.reserve(rows + positions.len());
        for value in interleaved(rows, positions, |j| self.get(j), |k| others.get(k)) {
            out.push(value);
        }
        *self = out;
    }
}

/// The `time_us` of each entry: the value pushed, or for a slot filled
/// with no time (`push_none`), any value (the caller knows those slots).
#[derive(Clone, Debug)]
pub(crate) enum Times {
    /// `base`: the first time pushed (`None`: none yet); `offsets`: per
    /// entry, its time minus `base` (0 for a slot with none).
    Narrow { base: Option<u64>, offsets: Vec<i32> },
    /// Per entry, its time.
    Wide(Vec<u64>),
}

impl Default for Times {
    fn default() -> Times {
        Times::Narrow { base: None, offsets: Vec::new() }
    }
}

impl Times {
    /// Slots.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        match self {
            Times::Narrow { offsets, .. } => offsets.len(),
            Times::Wide(all) => all.len(),
        }
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slot `i`'s time, if there is a slot `i`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<u64> {
        match self {
            Times::Narrow { base, offsets } => offsets.get(i).map(|&o| base.unwrap_or(0).wrapping_add(i64::from(o) as u64)),
            Times::Wide(all) => all.get(i).copied(),
        }
    }

    /// Appends a slot holding `t`.
    #[inline(always)]
    pub(crate) fn push(&mut self, t: u64) {
        if let Times::Narrow { base, offsets } = self {
            let from = *base.get_or_insert(t);
            if let Ok(o) = i32::try_from(t.wrapping_sub(from) as i64) {
                offsets.push(o);
                return;
            }
        }
        self.push_wide(t);
    }

    /// [`push`](Self::push) of a time too far from the first for an offset.
    #[cold]
    fn push_wide(&mut self, t: u64) {
        if let Times::Narrow { .. } = self {
            *self = Times::Wide((0..self.len()).map(|i| self.get(i).unwrap_or(0)).collect());
        }
        if let Times::Wide(all) = self {
            all.push(t);
        }
    }

    /// Appends a slot for an entry with no time.
    #[inline(always)]
    pub(crate) fn push_none(&mut self) {
        match self {
            Times::Narrow { offsets, .. } => offsets.push(0),
            Times::Wide(all) => all.push(0),
        }
    }

    /// Slots up to `len`, the new ones for entries with no time.
    pub(crate) fn fill_to(&mut self, len: usize) {
        match self {
            Times::Narrow { offsets, .. } => offsets.resize(len.max(offsets.len()), 0),
            Times::Wide(all) => all.resize(len.max(all.len()), 0),
        }
    }

    /// Room for `additional` more slots.
    pub(crate) fn reserve(&mut self, additional: usize) {
        match self {
            Times::Narrow { offsets, .. } => offsets.reserve(additional),
            Times::Wide(all) => all.reserve(additional),
        }
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Times::Narrow { offsets, .. } => 4 * offsets.capacity(),
            Times::Wide(all) => 8 * all.capacity(),
        }
    }

    /// These `rows` slots (or none) with `others`' slots (or none) put in
    /// at `positions` (see `Entries::interleave`); where one side has no
    /// slots, its entries get slots with no time.
    pub(crate) fn interleave(&mut self, others: &Times, positions: &[usize], rows: usize) {
        if self.is_empty() && others.is_empty() {
            return;
        }
        let mine = std::mem::take(self);
        for t in interleaved(rows, positions, |j| mine.get(j), |k| others.get(k)) {
            match t {
                Some(t) => self.push(t),
                None => self.push_none(),
            }
        }
    }
}

/// A [`Words`] entry whose value is kept beside the column (no value's
/// units are this many).
const ESCAPE: u32 = u32::MAX;

/// A column of 64-bit values most of which lie near each other on a grid
/// of `1 << SHIFT`. Each entry keeps `(value - base) >> SHIFT` in four bytes;
/// a value off the grid or out of reach keeps [`ESCAPE`] there and its value
/// in `escaped`, found by binary search. `base` is the first value less
/// `BELOW` (saturating), on the grid. Should more than a quarter of the
/// entries come to be kept beside the column (the first value was the odd
/// one out), the column is laid out once more around the value that tipped
/// it; after that, values that do not fit are kept beside it however many.
///
/// What is kept is a function of the values pushed, in order: two columns
/// of the same values are equal field by field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Words<const SHIFT: u32, const BELOW: u64> {
    base: u64,
    /// Whether `base` is chosen (at the first push).
    based: bool,
    /// Whether the column was laid out around a new base once.
    rebased: bool,
    /// Per entry, its units above `base`, or [`ESCAPE`].
    units: Vec<u32>,
    /// `(entry, value)` of each entry kept beside the column, ascending.
    escaped: Vec<(usize, u64)>,
}

/// Addresses: multiples of 512 within a TiB either side of the first.
pub(crate) type Addrs = Words<9, { 1 << 40 }>;
/// Sizes: any below 4 GiB.
pub(crate) type Sizes = Words<0, { u64::MAX }>;

impl<const SHIFT: u32, const BELOW: u64> Words<SHIFT, BELOW> {
    /// Entries.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.units.len()
    }

    /// Entry `i`'s value. Panics if `i` is out of range.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.decode(i, self.units[i])
    }

    #[inline(always)]
    fn decode(&self, i: usize, units: u32) -> u64 {
        if units != ESCAPE {
            self.base.wrapping_add(u64::from(units) << SHIFT)
        } else {
            self.escaped_value(i)
        }
    }

    #[cold]
    #[inline(never)]
    fn escaped_value(&self, i: usize) -> u64 {
        let at = self.escaped.binary_search_by_key(&i, |&(j, _)| j);
        debug_assert!(at.is_ok(), "entry {i} is kept beside the column");
        at.map_or(0, |k| self.escaped[k].1)
    }

    /// Every entry's value, in order.
    #[inline]
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = u64> + DoubleEndedIterator + Clone + '_ {
        self.units.iter().enumerate().map(|(i, &u)| self.decode(i, u))
    }

    /// Appends an entry holding `v`.
    #[inline(always)]
    pub(crate) fn push(&mut self, v: u64) {
        if !self.based {
            self.choose_base(v);
        }
        match Self::units_of(v, self.base) {
            Some(units) => self.units.push(units),
            None => self.push_escaped(v),
        }
    }

    /// [`push`](Self::push) of each of `values`, in one pass where all of
    /// them fit (as nearly all do), else one by one.
    #[inline]
    pub(crate) fn extend(&mut self, values: impl Iterator<Item = u64> + Clone) {
        let Some(first) = values.clone().next() else { return };
        if !self.based {
            self.choose_base(first);
        }
        let (start, base) = (self.units.len(), self.base);
        self.units.extend(values.clone().map(|v| Self::units_of(v, base).unwrap_or(ESCAPE)));
        if self.units[start..].contains(&ESCAPE) {
            self.units.truncate(start);
            values.for_each(|v| self.push(v));
        }
    }

    /// `v`'s units above `base`, if it is on the grid and within reach:
    /// rotated right, bits below the grid land on top, above any units.
    #[inline(always)]
    fn units_of(v: u64, base: u64) -> Option<u32> {
        let units = v.wrapping_sub(base).rotate_right(SHIFT);
        (units < u64::from(ESCAPE)).then_some(units as u32)
    }

    /// The base, from the first value: `first` less `BELOW`, on the grid.
    #[cold]
    fn choose_base(&mut self, first: u64) {
        self.based = true;
        self.base = first.saturating_sub(BELOW) >> SHIFT << SHIFT;
    }

    #[cold]
    #[inline(never)]
    fn push_escaped(&mut self, v: u64) {
        self.escaped.push((self.units.len(), v));
        self.units.push(ESCAPE);
        if !self.rebased && self.escaped.len() > self.units.len() / 4 + 64 {
            let values: Vec<u64> = self.iter().collect();
            let mut again = Words { rebased: true, ..Words::default() };
            again.choose_base(v);
            again.reserve(self.units.capacity());
            for value in values {
                again.push(value);
            }
            *self = again;
        }
    }

    /// Room for `additional` more entries.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.units.reserve(additional);
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        4 * self.units.capacity() + 16 * self.escaped.capacity()
    }

    /// These `rows` entries with `others` put in at `positions` (see
    /// `Entries::interleave`), pushed again in order.
    pub(crate) fn interleave(&mut self, others: &Self, positions: &[usize], rows: usize) {
        debug_assert_eq!((self.len(), others.len()), (rows, positions.len()));
        let mut out = Self::default();
        out.reserve(rows + positions.len());
        for value in interleaved(rows, positions, |j| self.get(j), |k| others.get(k)) {
            out.push(value);
        }
        *self = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Handles read back as pushed, whether a trace uses one stream,
        /// a few or more than a byte can index; so do interleaved ones.
        #[test]
        fn streams_read_back_as_pushed(
            picks in proptest::collection::vec(0usize..300, 700),
            spread in prop_oneof![Just(1usize), Just(3), Just(300)],
            // Per entry of the interleaved result: whether it is one of the others.
            order in proptest::collection::vec(proptest::bool::weighted(0.05), 0..700),
        ) {
            let handle = |j: usize, theirs: bool| 0x5500_0000_0000 + (picks[j] % spread) as u64 * 0x1000 + u64::from(theirs);
            let positions: Vec<usize> = (0..order.len()).filter(|&j| order[j]).collect();
            let (mut mine, mut others) = (Streams::default(), Streams::default());
            let mut want = Vec::new();
            for (j, &theirs) in order.iter().enumerate() {
                if theirs {
                    others.push(handle(j, true));
                } else {
                    mine.push(handle(j, false));
                    want.push(handle(j, false));
                }
            }
            prop_assert_eq!(mine.len(), want.len());
            prop_assert_eq!((0..mine.len()).map(|i| mine.get(i)).collect::<Vec<_>>(), want.clone());
            let distinct = want.iter().collect::<std::collections::BTreeSet<_>>().len();
            prop_assert_eq!(!mine.wide.is_empty(), distinct > MAX_FEW);
            if distinct <= 1 {
                prop_assert!(mine.of.is_empty() && mine.wide.is_empty(), "one stream keeps no column");
            }
            mine.interleave(&others, &positions, want.len());
            let expected: Vec<u64> = order.iter().enumerate().map(|(j, &theirs)| handle(j, theirs)).collect();
            prop_assert_eq!((0..mine.len()).map(|i| mine.get(i)).collect::<Vec<_>>(), expected);
        }

        /// Times read back as pushed, near each other or not, negative
        /// (as signed ints are kept) or not.
        #[test]
        fn times_read_back_as_pushed(
            start in prop_oneof![Just(0u64), Just(1_764_000_000_000_000u64), any::<u64>()],
            steps in proptest::collection::vec(prop_oneof![8 => -5_000i64..5_000_000, 1 => any::<i64>(), 1 => Just(i64::from(i32::MAX) + 1)], 0..300),
            none_at in proptest::collection::vec(any::<bool>(), 300),
        ) {
            let mut t = Times::default();
            let mut want = Vec::new();
            let mut now = start;
            for (k, &step) in steps.iter().enumerate() {
                now = now.wrapping_add(step as u64);
                if none_at[k] {
                    t.push_none();
                    want.push(None);
                } else {
                    t.push(now);
                    want.push(Some(now));
                }
            }
            prop_assert_eq!(t.len(), want.len());
            for (i, w) in want.iter().enumerate() {
                if let Some(w) = w {
                    prop_assert_eq!(t.get(i), Some(*w));
                }
            }
            prop_assert_eq!(t.get(want.len()), None);
        }
    }

    proptest! {
        /// Addresses and sizes read back as pushed: on the grid or off it,
        /// near the first value or a TiB and more away, the first one the
        /// odd one out or not; so do interleaved ones, and two columns of
        /// the same values are equal.
        #[test]
        fn words_read_back_as_pushed(
            first in prop_oneof![Just(0u64), Just(0x7f21_7a60_0000u64), Just(1_234_567_891u64), any::<u64>()],
            picks in proptest::collection::vec(
                prop_oneof![
                    8 => (0u64..1 << 22).prop_map(|k| 0x7f21_7a60_0000 + k * 512),
                    1 => (0u64..1 << 22).prop_map(|k| 0x7f21_7a60_0000 - k * 512),
                    1 => any::<u64>(),
                    1 => 0u64..1 << 33,
                    1 => Just(u64::MAX),
                ],
                0..700,
            ),
            order in proptest::collection::vec(proptest::bool::weighted(0.1), 0..700),
        ) {
            let values: Vec<u64> = std::iter::once(first).chain(picks).collect();
            let (mut addrs, mut sizes) = (Addrs::default(), Sizes::default());
            for &v in &values {
                addrs.push(v);
                sizes.push(v);
            }
            prop_assert_eq!(addrs.len(), values.len());
            // In batches, as the reader's column thread takes them: the same column.
            for batch in [1, 7, 4096] {
                let (mut a, mut b) = (Addrs::default(), Sizes::default());
                for chunk in values.chunks(batch) {
                    a.extend(chunk.iter().copied());
                    b.extend(chunk.iter().copied());
                }
                prop_assert_eq!(&a, &addrs);
                prop_assert_eq!(&b, &sizes);
            }
            prop_assert_eq!(addrs.iter().collect::<Vec<_>>(), values.clone());
            prop_assert_eq!(sizes.iter().collect::<Vec<_>>(), values.clone());
            prop_assert_eq!((0..values.len()).map(|i| addrs.get(i)).collect::<Vec<_>>(), values.clone());
            prop_assert_eq!(addrs.iter().rev().collect::<Vec<_>>(), values.iter().rev().copied().collect::<Vec<_>>());
            // Interleaved: `order[j]` says whether entry j of the result is one of the others.
            let positions: Vec<usize> = (0..order.len().min(values.len())).filter(|&j| order[j]).collect();
            let theirs: Vec<u64> = positions.iter().map(|&p| values[p] ^ 0x200).collect();
            let mine: Vec<u64> = (0..values.len()).filter(|j| !positions.contains(j)).map(|j| values[j]).collect();
            let (mut column, mut others) = (Addrs::default(), Addrs::default());
            mine.iter().for_each(|&v| column.push(v));
            theirs.iter().for_each(|&v| others.push(v));
            column.interleave(&others, &positions, mine.len());
            let expected: Vec<u64> = (0..values.len()).map(|j| if positions.contains(&j) { values[j] ^ 0x200 } else { values[j] }).collect();
            prop_assert_eq!(column.iter().collect::<Vec<_>>(), expected.clone());
            let mut direct = Addrs::default();
            expected.iter().for_each(|&v| direct.push(v));
            prop_assert_eq!(column, direct);
        }
    }

    /// PyTorch's addresses and sizes take four bytes each and nothing
    /// beside the column; an `oom` entry's free bytes and a 5 GiB size are
    /// kept beside it; a first value far from the rest is left behind once.
    #[test]
    fn words_keep_the_usual_values_in_four_bytes() {
        let block = |k: u64| 0x7f21_7a60_0000 + k * 512;
        let mut addrs = Addrs::default();
        let mut sizes = Sizes::default();
        for k in 0..10_000 {
            addrs.push(block(k * 7 % 5000));
            sizes.push(k * 1000 + 1);
        }
        assert!(addrs.escaped.is_empty() && sizes.escaped.is_empty());
        addrs.push(1_234_567_891);
        sizes.push(5 << 30);
        assert_eq!((addrs.escaped.len(), sizes.escaped.len()), (1, 1));
        assert_eq!((addrs.get(10_000), sizes.get(10_000), addrs.get(9_999)), (1_234_567_891, 5 << 30, block(9_999 * 7 % 5000)));

        // The first value is an `oom` entry's free bytes: every address after it is out of its reach.
        let mut odd = Addrs::default();
        odd.push(1_234_567_891);
        for k in 0..1000 {
            odd.push(block(k));
        }
        assert!(odd.rebased);
        assert_eq!(odd.escaped, [(0, 1_234_567_891)]);
        assert_eq!(odd.iter().skip(1).collect::<Vec<_>>(), (0..1000).map(block).collect::<Vec<_>>());
    }

    /// A trace within 35 minutes keeps four bytes per time; one that is not
    /// keeps eight, from the time that did not fit on.
    #[test]
    fn times_widen_only_when_an_offset_does_not_fit() {
        let mut t = Times::default();
        let base = 1_764_000_000_000_000u64;
        for k in 0..1000 {
            t.push(base + k * 1_000_000);
        }
        assert!(matches!(t, Times::Narrow { .. }));
        t.push(base + (1 << 31));
        assert!(matches!(t, Times::Wide(_)));
        assert_eq!(t.get(999), Some(base + 999_000_000));
        assert_eq!(t.get(1000), Some(base + (1 << 31)));
    }
}

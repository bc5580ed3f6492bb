//! Two columns of [`Entries`](crate::Entries) kept narrow. A trace holds
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
//!
//! Both read back exactly what was pushed.

/// Handles a byte can index.
const MAX_FEW: usize = 256;

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
        let mut next = positions.iter().zip(0..).peekable();
        let mut mine = 0;
        for at in 0..rows + positions.len() {
            match next.next_if(|&(&p, _)| p == at) {
                Some((_, k)) => out.push(others.get(k)),
                None => {
                    out.push(self.get(mine));
                    mine += 1;
                }
            }
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
        let mut next = positions.iter().zip(0..).peekable();
        let mut k = 0;
        for at in 0..rows + positions.len() {
            let t = match next.next_if(|&(&p, _)| p == at) {
                Some((_, j)) => others.get(j),
                None => {
                    k += 1;
                    mine.get(k - 1)
                }
            };
            match t {
                Some(t) => self.push(t),
                None => self.push_none(),
            }
        }
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

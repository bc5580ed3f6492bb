//! `AddrMap`: values by device address (the allocator's allocated and held
//! blocks; a front end's set of freed addresses; a replay's blocks and
//! segments by recorded address).
//!
//! Every `malloc` adds an address and every `free` looks one up and takes
//! it out, so this sits on the hot path. Open addressing with linear
//! probing over a power-of-two table kept at most a quarter full (half
//! full past [`SPARSE_SLOTS`] slots), Fibonacci
//! hashing of the address (a multiply and a shift; device addresses are
//! multiples of 512, which the high bits of the product do not mind), and
//! removal by shifting the entries after the hole back, so no tombstones
//! pile up. A lookup of a live address usually reads one slot.

/// Slots of a new map.
const INITIAL_SLOTS: usize = 16;
/// Up to this many slots a map is kept at most a quarter full, beyond it
/// half full. A probe then usually ends at its first slot: at half load
/// the probe loop's exit is a branch the processor mispredicts about once
/// a lookup (callgrind's branch simulation of a replay: 5% of its
/// mispredictions), and a map this small costs little memory however
/// sparse. The maps of whole traces' addresses, which may be large, stay
/// denser.
const SPARSE_SLOTS: usize = 1 << 14;

/// A map from device addresses to small `Copy` values, with a cheap hash.
///
/// ```
/// use vramkit_core::AddrMap;
///
/// let mut freed = AddrMap::default();
/// assert!(freed.insert(0x7f00_0000_0200, ()));
/// assert!(!freed.insert(0x7f00_0000_0200, ())); // already there: unchanged
/// assert!(freed.contains(0x7f00_0000_0200));
/// assert_eq!(freed.remove(0x7f00_0000_0200), Some(()));
/// assert!(freed.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct AddrMap<V> {
    /// `(address, value)` or empty (16 bytes for the allocator's block ids,
    /// which are never 0). The length is a power of two, at least twice
    /// `len`; an entry lies at its home slot or after it, with no empty
    /// slot in between (linear probing).
    slots: Vec<Option<(u64, V)>>,
    /// Live entries.
    len: usize,
    /// `64 - log2(slots.len())`: the product's top bits are the home slot.
    shift: u32,
}

impl<V: Copy> Default for AddrMap<V> {
    fn default() -> Self {
        AddrMap::with_slots(INITIAL_SLOTS)
    }
}

impl<V: Copy> AddrMap<V> {
    fn with_slots(n: usize) -> AddrMap<V> {
        debug_assert!(n.is_power_of_two() && n >= 2);
        AddrMap { slots: vec![None; n], len: 0, shift: 64 - n.trailing_zeros() }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, addr: u64) -> usize {
        (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `addr`, if any: for `at` and `remove_found`,
    /// while the map does not change.
    #[inline]
    pub(crate) fn find(&self, addr: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let (k, _) = self.slots[i]?;
            if k == addr {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `addr`.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<V> {
        Some(self.at(self.find(addr)?))
    }

    /// The value in a slot `find` gave.
    #[inline]
    pub(crate) fn at(&self, slot: usize) -> V {
        self.slots[slot].expect("a slot find gave").1
    }

    /// The value at `addr`, to change in place.
    #[inline]
    pub fn get_mut(&mut self, addr: u64) -> Option<&mut V> {
        let slot = self.find(addr)?;
        self.slots[slot].as_mut().map(|(_, v)| v)
    }

    /// Whether `addr` is in the map.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        self.find(addr).is_some()
    }

    /// Adds `addr` with `value`; false (and nothing changes) if `addr` is
    /// there already.
    #[inline]
    pub fn insert(&mut self, addr: u64, value: V) -> bool {
        let load = if self.slots.len() <= SPARSE_SLOTS { 4 } else { 2 };
        if load * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        while let Some((k, _)) = self.slots[i] {
            if k == addr {
                return false;
            }
            i = (i + 1) & mask;
        }
        self.slots[i] = Some((addr, value));
        self.len += 1;
        true
    }

    /// Takes `addr` out; its value, if it was there.
    #[inline]
    pub fn remove(&mut self, addr: u64) -> Option<V> {
        Some(self.remove_found(self.find(addr)?))
    }

    /// Takes out the entry in a slot `find` gave; its value.
    #[inline]
    pub(crate) fn remove_found(&mut self, mut hole: usize) -> V {
        let value = self.at(hole);
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some((k, _)) = self.slots[j] else { break };
            // An entry may move back into the hole unless its home lies
            // after the hole (cyclically), where the probe for it starts.
            let home = self.home(k);
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = None;
        self.len -= 1;
        value
    }

    /// Takes every entry out (the table keeps its size).
    pub fn clear(&mut self) {
        self.slots.fill(None);
        self.len = 0;
    }

    #[cold]
    fn grow(&mut self) {
        let old = std::mem::replace(self, AddrMap::with_slots(2 * self.slots.len()));
        for (addr, v) in old.iter() {
            self.insert(addr, v);
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.slots.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockId;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The map answers as a `HashMap` does, through growth and removal
        /// chains (addresses drawn from a narrow range so probes collide).
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec((0u8..3, 0u64..300), 1..2000)) {
            let mut map = AddrMap::default();
            let mut model = HashMap::new();
            for (n, (op, slot)) in ops.into_iter().enumerate() {
                let addr = slot << 9;
                let id = BlockId::for_test(n as u32);
                match op {
                    0 => {
                        prop_assert_eq!(map.insert(addr, id), !model.contains_key(&addr));
                        model.entry(addr).or_insert(id);
                    }
                    1 => prop_assert_eq!(map.remove(addr), model.remove(&addr)),
                    _ => {
                        // Changed in place, where it is there.
                        prop_assert_eq!(map.get_mut(addr).map(|v| std::mem::replace(v, id)), model.get_mut(&addr).map(|v| std::mem::replace(v, id)));
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                for (&a, &id) in &model {
                    prop_assert_eq!(map.get(a), Some(id));
                }
                prop_assert_eq!(map.get(addr ^ 512), model.get(&(addr ^ 512)).copied());
            }
            prop_assert_eq!(map.iter().count(), model.len());
        }
    }

    /// Past `SPARSE_SLOTS` the map grows at half load instead of a
    /// quarter, and keeps every entry across the change.
    #[test]
    fn a_large_map_is_denser_and_keeps_every_entry() {
        let mut map = AddrMap::default();
        let n = 3 * SPARSE_SLOTS as u64;
        for a in 0..n {
            assert!(map.insert((a * 7919) << 9, a));
        }
        // Half full at most, and more than a quarter: 49,152 entries in 131,072 slots.
        assert!(2 * map.len() <= map.slots.len() && 4 * map.len() > map.slots.len(), "{} in {}", map.len(), map.slots.len());
        for a in (0..n).step_by(2) {
            assert_eq!(map.remove((a * 7919) << 9), Some(a));
        }
        for a in 0..n {
            assert_eq!(map.get((a * 7919) << 9), (a % 2 == 1).then_some(a));
        }
    }
}

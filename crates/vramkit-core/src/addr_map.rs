//! `AddrMap`: blocks by device address (the allocated and held maps).
//!
//! Every `malloc` adds an address and every `free` looks one up and takes
//! it out, so this sits on the hot path. Open addressing with linear
//! probing over a power-of-two table kept at most half full, Fibonacci
//! hashing of the address (a multiply and a shift; device addresses are
//! multiples of 512, which the high bits of the product do not mind), and
//! removal by shifting the entries after the hole back, so no tombstones
//! pile up. A lookup of a live address usually reads one slot.

use crate::block::BlockId;

/// Slots of a new map.
const INITIAL_SLOTS: usize = 16;

/// A map from block addresses to blocks.
#[derive(Clone, Debug)]
pub(crate) struct AddrMap {
    /// `(address, block)` or empty (16 bytes either way: block ids are
    /// never 0). The length is a power of two, at least twice `len`; an
    /// entry lies at its home slot or after it, with no empty slot in
    /// between (linear probing).
    slots: Vec<Option<(u64, BlockId)>>,
    /// Live entries.
    len: usize,
    /// `64 - log2(slots.len())`: the product's top bits are the home slot.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        AddrMap::with_slots(INITIAL_SLOTS)
    }
}

impl AddrMap {
    fn with_slots(n: usize) -> AddrMap {
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

    /// The slot holding `addr`, if any.
    #[inline]
    fn find(&self, addr: u64) -> Option<usize> {
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

    /// The block at `addr`.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<BlockId> {
        self.slots[self.find(addr)?].map(|(_, id)| id)
    }

    /// Adds `addr`, which must not be in the map yet.
    #[inline]
    pub fn insert(&mut self, addr: u64, id: BlockId) {
        debug_assert!(self.find(addr).is_none(), "{addr:#x} inserted twice");
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        while self.slots[i].is_some() {
            i = (i + 1) & mask;
        }
        self.slots[i] = Some((addr, id));
        self.len += 1;
    }

    /// Takes `addr` out; its block, if it was there.
    #[inline]
    pub fn remove(&mut self, addr: u64) -> Option<BlockId> {
        let mut hole = self.find(addr)?;
        let (_, id) = self.slots[hole]?;
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
        Some(id)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, AddrMap::with_slots(2 * self.slots.len()));
        for (addr, id) in old.iter() {
            self.insert(addr, id);
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, BlockId)> + '_ {
        self.slots.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The map answers as a `HashMap` does, through growth and removal
        /// chains (addresses drawn from a narrow range so probes collide).
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..2000)) {
            let mut map = AddrMap::default();
            let mut model = HashMap::new();
            for (n, (insert, slot)) in ops.into_iter().enumerate() {
                let addr = slot << 9;
                if insert && !model.contains_key(&addr) {
                    map.insert(addr, BlockId::for_test(n as u32));
                    model.insert(addr, BlockId::for_test(n as u32));
                } else {
                    prop_assert_eq!(map.remove(addr), model.remove(&addr));
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
}

//! Which block each entry of a trace is about, as a small number.
//!
//! A replay keeps state per recorded block (the model's address for it,
//! the event it waits on, the bytes it asked for). Keyed by recorded
//! address, that is a hash map insert, lookup and removal per entry; so
//! the trace's blocks are numbered once, when it is prepared, and replays
//! index vectors instead. A block is one life of an address: it begins at
//! the first `alloc`, `free_requested` or `free_completed` that names the
//! address while no block of it is open, and ends at its `free_completed`.
//! An `alloc` at an address whose block is still open continues that
//! block, as a map keyed by address would. A block a free begins was live
//! when the window opened (or the trace is inconsistent there): it keeps
//! one number per address for the whole trace, as the start state's other
//! active blocks do. The number of a block an `alloc` began is handed out
//! again once the block ended, so numbers stay below the number of blocks
//! live at once plus those live at the start.
//!
//! The numbering also says where each held block's free completes: the
//! `free_completed` of a `free_requested` that is not directly followed by
//! it, and of a block the start state holds (see `drive`'s hold streams).

use vramkit_core::AddrMap;
use vramkit_core::TraceAction;
use vramkit_trace::Entries;

/// Marks an entry that concerns no block.
pub(crate) const NO_BLOCK: u32 = u32::MAX;

/// The block numbers of a trace's entries.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blocks {
    /// Per entry: its block, or [`NO_BLOCK`].
    of_entry: Vec<u32>,
    /// Numbers in use: every block is below this.
    count: u32,
    /// Blocks live when the window opens, by address: those a free begins,
    /// and the start state's other active blocks.
    at_start: AddrMap<u32>,
    /// Blocks still open after the last entry, by address.
    open_at_end: AddrMap<u32>,
    /// (`free_requested`, its `free_completed`) where they are not
    /// adjacent, by the first.
    completions: Vec<(u32, u32)>,
    /// Blocks live at the start whose first free is a `free_completed`
    /// (the start state holds them): that entry.
    completed_from_start: AddrMap<u32>,
}

impl Blocks {
    /// Numbers the blocks of `events`; the start state's other active
    /// blocks are numbered after them ([`Blocks::add_start`]), so this needs
    /// no start state.
    pub(crate) fn number(events: &Entries) -> Blocks {
        let mut open: AddrMap<u32> = AddrMap::default();
        let mut at_start: AddrMap<u32> = AddrMap::default();
        // Per number: it is a block `alloc` began, to be handed out again.
        let mut reusable: Vec<bool> = Vec::new();
        let mut unused: Vec<u32> = Vec::new();
        let mut of_entry = Vec::with_capacity(events.len());
        // Per number: the `free_requested` it waits on, if any.
        let mut requested: Vec<u32> = Vec::new();
        let mut completions = Vec::new();
        let mut completed_from_start: AddrMap<u32> = AddrMap::default();
        let fresh = |reusable: &mut Vec<bool>, again: bool| {
            reusable.push(again);
            reusable.len() as u32 - 1
        };
        // The block live at the start at `addr`, numbered the first time.
        let from_start = |at_start: &mut AddrMap<u32>, reusable: &mut Vec<bool>, addr: u64| {
            at_start.get(addr).unwrap_or_else(|| {
                let id = fresh(reusable, false);
                at_start.insert(addr, id);
                id
            })
        };
        // The two columns it reads, not whole entries.
        for (i, (&action, addr)) in events.actions().iter().zip(events.addrs()).enumerate() {
            let id = match action {
                TraceAction::Alloc => open.get(addr).unwrap_or_else(|| {
                    let id = unused.pop().unwrap_or_else(|| fresh(&mut reusable, true));
                    open.insert(addr, id);
                    id
                }),
                TraceAction::FreeRequested => open.get(addr).unwrap_or_else(|| {
                    let id = from_start(&mut at_start, &mut reusable, addr);
                    open.insert(addr, id);
                    id
                }),
                TraceAction::FreeCompleted => {
                    let id = open.remove(addr).unwrap_or_else(|| from_start(&mut at_start, &mut reusable, addr));
                    if reusable[id as usize] {
                        unused.push(id);
                    }
                    id
                }
                _ => NO_BLOCK,
            };
            of_entry.push(id);
            if id != NO_BLOCK {
                requested.resize(requested.len().max(reusable.len()), NO_BLOCK);
                let waits = &mut requested[id as usize];
                match action {
                    TraceAction::FreeRequested => *waits = i as u32,
                    TraceAction::FreeCompleted if *waits == NO_BLOCK => {
                        // The first one counts (a later insert changes nothing).
                        completed_from_start.insert(u64::from(id), i as u32);
                    }
                    TraceAction::FreeCompleted => {
                        if *waits as usize + 1 != i {
                            completions.push((*waits, i as u32));
                        }
                        *waits = NO_BLOCK;
                    }
                    _ => {}
                }
            }
        }
        completions.sort_unstable();
        Blocks { of_entry, count: reusable.len() as u32, at_start, open_at_end: open, completions, completed_from_start }
    }

    /// Numbers the start state's active blocks at `start_blocks` that no
    /// entry numbered.
    pub(crate) fn add_start(&mut self, start_blocks: impl Iterator<Item = u64>) {
        for addr in start_blocks {
            if self.at_start.insert(addr, self.count) {
                self.count += 1;
            }
        }
    }

    /// The block entry `i` concerns, or [`NO_BLOCK`].
    #[inline]
    pub(crate) fn of(&self, i: usize) -> u32 {
        self.of_entry[i]
    }

    /// The block of every entry ([`of`](Self::of) each), for a walk of the entries.
    pub(crate) fn column(&self) -> &[u32] {
        &self.of_entry
    }

    /// How many numbers are in use.
    pub(crate) fn count(&self) -> usize {
        self.count as usize
    }

    /// The block live at the start at `addr`, if there is one.
    pub(crate) fn at_start(&self, addr: u64) -> Option<u32> {
        self.at_start.get(addr)
    }

    /// Where the free that the `free_requested` at `i` began completes: the
    /// index of its `free_completed`, if the trace has one.
    pub(crate) fn completion_of(&self, i: usize, events: &Entries) -> Option<usize> {
        let next = i + 1;
        if events.actions().get(next) == Some(&TraceAction::FreeCompleted) && self.of_entry[next] == self.of_entry[i] {
            return Some(next);
        }
        let k = self.completions.binary_search_by_key(&(i as u32), |c| c.0).ok()?;
        Some(self.completions[k].1 as usize)
    }

    /// Where the free of `block`, held by the start state, completes.
    pub(crate) fn completion_from_start(&self, block: u32) -> Option<usize> {
        self.completed_from_start.get(u64::from(block)).map(|j| j as usize)
    }

    /// The block open at `addr` after the last entry, if there is one.
    pub(crate) fn open_at_end(&self, addr: u64) -> Option<u32> {
        self.open_at_end.get(addr)
    }
}

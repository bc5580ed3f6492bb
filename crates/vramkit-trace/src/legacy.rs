//! The PyTorch 2.0-era block `history`.
//!
//! In that layout a block has no `address` and no `frames`; instead it
//! carries `history`, the allocations made in it, oldest first, each
//! `{addr, real_size, frames}`. An inactive block that was merged from
//! several freed ones lists all their allocations. The reader derives the
//! current model from it (the latest entry is the live allocation of an
//! active block, see [`requested_size`] and [`frames`]) and keeps the lists,
//! so writing the file again keeps them. Reading and writing the lists are
//! the walkers' (`decode/legacy.rs`, `encode/legacy.rs`).

use vramkit_core::snapshot::{BlockState, Frames};

/// One allocation made in a block (an entry of a legacy `history` list).
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    /// Address handed out.
    pub addr: u64,
    /// Bytes requested (`real_size`).
    pub real_size: u64,
    /// Where it was allocated, if recorded.
    pub frames: Option<Frames>,
}

/// The `history` lists of a legacy file's blocks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LegacyHistory {
    /// `blocks[s][b]` is the history of `segments[s].blocks[b]`, oldest
    /// first. `blocks[s]` is empty when none of segment `s`'s blocks had one.
    pub blocks: Vec<Vec<Vec<HistoryEntry>>>,
}

impl LegacyHistory {
    /// The history of block `block` of segment `segment` (empty if none).
    pub fn of(&self, segment: usize, block: usize) -> &[HistoryEntry] {
        self.blocks.get(segment).and_then(|blocks| blocks.get(block)).map_or(&[], Vec::as_slice)
    }
}

/// A legacy block's requested bytes when the block has no `requested_size`:
/// the latest allocation's `real_size` if the block is active, else 0.
pub(crate) fn requested_size(state: BlockState, history: &[HistoryEntry]) -> u64 {
    match history.last() {
        Some(latest) if state.is_active() => latest.real_size,
        _ => 0,
    }
}

/// A legacy block's stack: the latest allocation's, if the block is active.
pub(crate) fn frames(state: BlockState, history: &[HistoryEntry]) -> Option<Frames> {
    match history.last() {
        Some(latest) if state.is_active() => latest.frames.clone(),
        _ => None,
    }
}

//! History recording: PyTorch's `_record_memory_history` ring buffer.
//!
//! When recording is on, every allocator event appends a [`TraceEntry`];
//! the oldest entries are dropped once `max_entries` is reached.

use crate::snapshot::{Frames, TraceAction, TraceEntry};
use std::collections::VecDeque;

/// How much stack context to keep (PyTorch's `context` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ContextLevel {
    /// No stacks.
    #[default]
    Never,
    /// Stacks of live blocks only.
    State,
    /// Stacks of allocations, on their trace entries too.
    Alloc,
    /// Stacks of allocations and frees.
    All,
}

/// What to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Keep trace entries (`enabled="all"`); false keeps only block stacks (`"state"`).
    pub record_trace: bool,
    /// Ring buffer capacity; at least 1.
    pub max_entries: usize,
    /// Which stacks to keep.
    pub context: ContextLevel,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { record_trace: true, max_entries: usize::MAX, context: ContextLevel::All }
    }
}

/// The ring buffer of trace entries.
#[derive(Clone, Debug)]
pub(crate) struct History {
    pub(crate) config: HistoryConfig,
    entries: VecDeque<TraceEntry>,
}

impl History {
    pub(crate) fn new(config: HistoryConfig) -> History {
        History { config, entries: VecDeque::new() }
    }

    /// Appends one entry, dropping the oldest when full.
    pub(crate) fn record(
        &mut self,
        action: TraceAction,
        addr: u64,
        size: u64,
        stream: u64,
        time_us: u64,
        frames: Option<Frames>,
    ) {
        if !self.config.record_trace {
            return;
        }
        let capacity = self.config.max_entries.max(1);
        while self.entries.len() >= capacity {
            self.entries.pop_front();
        }
        let mut entry = TraceEntry::new(action, addr, size, stream);
        entry.time_us = Some(time_us);
        entry.frames = frames;
        self.entries.push_back(entry);
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &TraceEntry> {
        self.entries.iter()
    }
}

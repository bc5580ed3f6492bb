//! [`Reading`]: how a trace reads where its entries alone are ambiguous.

use crate::pools::Overrides;

/// How a trace is read where its entries alone are ambiguous: which runs
/// of releases were the user's `empty_cache()` calls, which
/// `free_completed` entries a synchronisation emitted (PyTorch's
/// `synchronize_and_free_events`, in `empty_cache()` or the retry ladder's
/// `release_cached_blocks`), which blocks freed at once had in fact
/// waited on events (`record_stream`) until the next request's
/// synchronisation, and which segments belonged to private pools the
/// snapshot does not name. Judged once against a model under the recorded
/// settings (the pass `verify` makes, where the model is PyTorch), then
/// followed as is under any other settings: a user's `empty_cache()` call
/// stays a call whatever the settings, while a retry ladder's releases are
/// left to the model's own ladder, which runs only if its device refuses.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// Entries in the trace this reading is of.
    pub(crate) entries: usize,
    /// Entry indices of the release runs that were `empty_cache()` calls, ascending.
    pub(crate) calls: Vec<usize>,
    /// Per entry: a `free_completed` a synchronisation emitted.
    pub(crate) by_sync: Vec<bool>,
    /// Entry indices of `free_requested` entries, directly followed by their
    /// `free_completed`, whose block was held until a synchronisation; ascending.
    pub(crate) held_pairs: Vec<usize>,
    /// Segments routed to private pools the snapshot does not name (see `pools`).
    pub(crate) pools: Overrides,
}

impl Reading {
    /// Entries of the trace this reading is of.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// How many release runs were read as `empty_cache()` calls.
    pub fn empty_cache_calls(&self) -> usize {
        self.calls.len()
    }
}

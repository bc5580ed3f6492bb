//! Watching other `max_split_size_mb` values: would the allocator, with
//! `max_split_size_mb` unset, have decided anything otherwise under a
//! limit of `M` bytes?
//!
//! The limit enters the allocator's decisions only through a few tests,
//! each a yes or a no: best fit's two oversize rules (3.1), whether a
//! large block is split (3.3), whether a parked free's merged block may be
//! used (`parked.rs`, the same rules), and the retry ladder's release of
//! oversize blocks (5.2), which does nothing unlimited. Elsewhere the limit
//! only sorts blocks into the oversize statistics. So where every one of
//! those tests, as it came up, would have answered the same under `M`,
//! the allocator under `M` made the same calls in the same order: the same
//! blocks, segments, addresses and every statistic but the oversize
//! counts. Each test notes here the watched limits under which it would
//! have answered otherwise; a limit never noted is one the run so far
//! cannot tell from unset. `tune` replays a candidate once for itself and
//! the candidates that differ from it only in such a limit.
//!
//! Unlimited, the tests read: no block is oversize (3.1 takes the best fit
//! as it is), a large block splits when more than `LARGE_SPLIT_REMAINDER`
//! would remain, a merged block may be used, and the ladder frees nothing.
//! Only the allocator's own operations note; its what-if copies do not
//! watch.

use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many `max_split_size_mb` values are watched at once
/// ([`CachingAllocator::watch_max_split_sizes`](crate::CachingAllocator::watch_max_split_sizes)).
pub const MAX_WATCHED: usize = 64;

/// The limits watched and those some test would have answered otherwise under.
#[derive(Debug, Default)]
pub(crate) struct MaxSplitWatch {
    /// Limits in bytes (empty: not watching).
    limits: Box<[u64]>,
    /// Bit `i`: under `limits[i]` some test would have answered otherwise.
    /// Tests run in `&self` readers too, hence a cell; one that several
    /// threads read at once notes each bit with an atomic or.
    unalike: AtomicU64,
}

impl Clone for MaxSplitWatch {
    fn clone(&self) -> Self {
        MaxSplitWatch { limits: self.limits.clone(), unalike: AtomicU64::new(self.unalike.load(Ordering::Relaxed)) }
    }
}

impl MaxSplitWatch {
    /// Watches `limits` (at most [`MAX_WATCHED`]) from now on.
    pub(crate) fn new(limits: &[u64]) -> MaxSplitWatch {
        assert!(limits.len() <= MAX_WATCHED, "at most {MAX_WATCHED} max_split_size values are watched, not {}", limits.len());
        MaxSplitWatch { limits: limits.into(), unalike: AtomicU64::new(0) }
    }

    /// Watching anything?
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        !self.limits.is_empty()
    }

    /// The watched limits no test would have answered otherwise under.
    pub(crate) fn alike(&self) -> Vec<u64> {
        let unalike = self.unalike.load(Ordering::Relaxed);
        self.limits.iter().enumerate().filter(|&(i, _)| unalike & (1 << i) == 0).map(|(_, &m)| m).collect()
    }

    /// Notes the limits `otherwise` says a test would have answered otherwise under.
    #[inline]
    fn note(&self, otherwise: impl Fn(u64) -> bool) {
        let bits = self.limits.iter().enumerate().filter(|&(_, &m)| otherwise(m)).fold(0u64, |bits, (i, _)| bits | 1 << i);
        if bits & !self.unalike.load(Ordering::Relaxed) != 0 {
            self.unalike.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Every limit: a test that answers otherwise under any of them.
    pub(crate) fn note_all(&self) {
        self.note(|_| true);
    }

    /// 3.1: best fit found a block of `found` bytes for a request of
    /// `size`. Under `M` it would be refused when the request is not
    /// oversize and the block is, or when the request is oversize and the
    /// block exceeds it by `tolerance` or more.
    #[inline]
    pub(crate) fn note_found(&self, size: u64, found: u64, tolerance: u64) {
        if self.on() {
            self.note(|m| (size < m && found >= m) || (size >= m && found >= size.saturating_add(tolerance)));
        }
    }

    /// 3.3: a large block split for `size` bytes, leaving `remaining`, or
    /// not. Under `M` an oversize request is never split.
    #[inline]
    pub(crate) fn note_split(&self, size: u64, remaining: u64, large_split_remainder: u64) {
        if self.on() && remaining > large_split_remainder {
            self.note(|m| size >= m);
        }
    }

    /// A parked free's merged block of `merged` bytes for a request of
    /// `size`: always usable unlimited, under `M` as 3.1's rules say.
    #[inline]
    pub(crate) fn note_usable(&self, size: u64, merged: u64, tolerance: u64) {
        if self.on() {
            self.note(|m| if size < m { merged >= m } else { merged >= size.saturating_add(tolerance) });
        }
    }
}


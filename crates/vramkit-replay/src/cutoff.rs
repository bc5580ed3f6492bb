//! When a `tune` replay may stop: once it cannot rank among the rows shown.
//!
//! A candidate ranks by a key whose parts (failed allocations, peak
//! reserved, device calls, ...) only grow as its replay goes on, so its key
//! so far is at most its final key. Once `rows` finished candidates have
//! keys below a running candidate's key so far, at least `rows` candidates
//! rank before it whatever the rest of its replay does: it is not among
//! the first `rows`, and stopping it changes none of them. The recorded
//! settings' rows are shown whatever their rank, so a candidate stops only
//! once it also ranks after all of them: their ranks stay exact too. Which
//! candidates stop, and where, depends on which finished first; the rows
//! shown never do.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`; a thread that panicked holding it left nothing half done.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keys of the finished candidates, against the rows to show.
#[derive(Debug)]
pub(crate) struct Cutoff<K> {
    rows: usize,
    /// Finished keys, ascending, at most `rows` of them (the best).
    best: Mutex<Vec<K>>,
    /// How many rows are shown whatever their rank (the recorded settings').
    always: usize,
    /// Their keys, as they finish.
    always_keys: Mutex<Vec<K>>,
}

impl<K: Ord + Clone> Cutoff<K> {
    /// Keeps exact the first `rows` (at least 1) and `always` rows shown
    /// whatever their rank.
    pub(crate) fn new(rows: usize, always: usize) -> Cutoff<K> {
        Cutoff { rows: rows.max(1), best: Mutex::new(Vec::new()), always, always_keys: Mutex::new(Vec::new()) }
    }

    /// A row shown whatever its rank finished with `key` (which
    /// [`Cutoff::finished`] is told too).
    pub(crate) fn always_shown(&self, key: K) {
        lock(&self.always_keys).push(key);
    }

    /// A candidate finished with `key`.
    pub(crate) fn finished(&self, key: K) {
        let mut best = lock(&self.best);
        let at = best.partition_point(|k| *k < key);
        best.insert(at, key);
        best.truncate(self.rows);
    }

    /// `rows` finished candidates and every row shown anyway rank before
    /// any candidate whose key is at least `so_far`.
    pub(crate) fn passed(&self, so_far: &K) -> bool {
        let always = lock(&self.always_keys);
        let after_recorded = always.len() == self.always && always.iter().all(|k| k < so_far);
        drop(always);
        let best = lock(&self.best);
        after_recorded && best.len() == self.rows && best.last().is_some_and(|last| last < so_far)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_passed_once_rows_finished_keys_are_below_it() {
        let c = Cutoff::new(2, 1);
        c.always_shown(10);
        c.finished(10);
        assert!(!c.passed(&100), "one finished, two rows");
        c.finished(30);
        assert!(c.passed(&31));
        assert!(!c.passed(&30) && !c.passed(&20));
        c.finished(20);
        assert!(c.passed(&21), "the second best is now 20");
        assert!(!c.passed(&15));
    }

    #[test]
    fn a_key_is_passed_only_after_every_row_shown_anyway() {
        let c = Cutoff::new(1, 2);
        c.finished(5);
        assert!(!c.passed(&100), "the recorded rows have not finished");
        c.always_shown(10);
        c.finished(10);
        assert!(!c.passed(&100), "one of the two recorded rows has not finished");
        c.always_shown(50);
        c.finished(50);
        assert!(!c.passed(&21), "a recorded row ranks 3rd: the candidates before it run to the end");
        assert!(c.passed(&51));
    }
}

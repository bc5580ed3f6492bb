//! How the reader's trace entries reach the columns of
//! [`Tree::entry_rows`](crate::tree::Tree::entry_rows): pushed there
//! directly or, for a large input, through a second thread.
//!
//! A long trace's columns are hundreds of megabytes of fresh memory, and
//! the first touch of each page costs the kernel about as much as reading
//! the entries that fill it. So for a large input the reader writes each
//! entry into a small batch that stays in cache and hands full batches to a
//! thread that lays them into the columns (taking those page faults on the
//! other core) and hands the emptied batch back. The columns come out the
//! same either way: one thread pushes them in order.

use crate::entries::{Entries, Entry, RawEntry as Row};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Inputs from this size on fill their columns on a second thread.
const THREADED_FROM_BYTES: usize = 32 << 20;
/// Entries per batch.
const BATCH: usize = 4096;
/// Batches in flight (the reader fills one while the thread empties the others).
const IN_FLIGHT: usize = 3;
/// Entries take at least this many bytes of pickle: room reserved up front.
const MIN_ENTRY_BYTES: usize = 24;

/// The other thread's half: full batches in, empty ones back.
#[derive(Debug)]
struct Columns {
    full: SyncSender<Vec<Row>>,
    empty: Receiver<Vec<Row>>,
    batch: Vec<Row>,
    worker: JoinHandle<Entries>,
}

/// The way to the columns. While a thread fills them, the tree's columns
/// stay empty until [`settle`](Rows::settle).
#[derive(Debug)]
pub(super) struct Rows {
    len: usize,
    /// `None`: pushed into the tree's columns directly.
    columns: Option<Columns>,
    /// Length of the whole input (whether it is large).
    input_bytes: usize,
    /// Entries the rest of the input may hold, from the first entry on.
    room: usize,
}

impl Rows {
    /// The way for an input of `input_bytes`.
    pub(super) fn for_input(input_bytes: usize) -> Rows {
        Rows { len: 0, columns: None, input_bytes, room: 0 }
    }

    /// Entries so far.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Appends one entry to `rows`, the tree's columns (see
    /// [`Entries::push_raw`]); `remaining` is the input still to read, for
    /// the room the first entry reserves.
    #[inline(always)]
    pub(super) fn push(&mut self, rows: &mut Entries, entry: Entry, time_us: Option<u64>, ids: [u32; 3], remaining: usize) {
        if self.len == 0 {
            self.start(remaining);
        }
        self.len += 1;
        match &mut self.columns {
            Some(columns) => {
                columns.batch.push(Row { entry, time_us, ids });
                if columns.batch.len() == BATCH {
                    columns.send();
                }
            }
            None => {
                rows.push_raw(entry, time_us, ids);
                if self.len == 1 {
                    // After the first push: `reserve` sizes the columns entries fill.
                    rows.reserve(self.room);
                }
            }
        }
    }

    /// At the first entry: room for as many entries as the rest of the
    /// input may hold (memory reserved is not touched), on the thread that
    /// fills the columns, started here when the input is large.
    #[cold]
    fn start(&mut self, remaining: usize) {
        let room = remaining / MIN_ENTRY_BYTES;
        self.room = room;
        if self.input_bytes < THREADED_FROM_BYTES {
            return;
        }
        let (full, from_reader) = sync_channel::<Vec<Row>>(IN_FLIGHT);
        let (to_reader, empty) = sync_channel::<Vec<Row>>(IN_FLIGHT);
        for _ in 1..IN_FLIGHT {
            // Batches for the reader beyond the one it starts with.
            let _ = to_reader.send(Vec::with_capacity(BATCH));
        }
        let spawned = std::thread::Builder::new().name("vramkit-columns".into()).spawn(move || {
            let mut entries = Entries::default();
            let mut reserved = false;
            while let Ok(mut batch) = from_reader.recv() {
                let mut rows = &batch[..];
                if let (false, [first, rest @ ..]) = (reserved, rows) {
                    entries.push_raw(first.entry, first.time_us, first.ids);
                    // After the first push: `reserve` sizes the columns entries fill.
                    entries.reserve(room);
                    reserved = true;
                    rows = rest;
                }
                entries.push_batch(rows);
                batch.clear();
                // The reader may be gone (it stopped at an error): nothing to hand back.
                let _ = to_reader.send(batch);
            }
            entries
        });
        // No thread to be had: the columns are filled directly.
        if let Ok(worker) = spawned {
            self.columns = Some(Columns { full, empty, batch: Vec::with_capacity(BATCH), worker });
        }
    }

    /// Puts every entry so far into `rows`, the tree's columns (empty
    /// while a thread fills them), and pushes the rest there directly.
    pub(super) fn settle(&mut self, rows: &mut Entries) {
        let Some(mut columns) = self.columns.take() else { return };
        if !columns.batch.is_empty() {
            columns.send();
        }
        let Columns { full, worker, .. } = columns;
        drop(full);
        // The thread only pushes into vectors; should it have died anyway
        // (out of memory aborts the process first), its panic goes on here.
        *rows = worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    }
}

impl Columns {
    /// Hands the full batch over and takes an emptied one.
    fn send(&mut self) {
        let next = self.empty.recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, next);
        // The thread ends only when this side drops `full`; a failed send
        // means it died, which `finish` reports.
        let _ = self.full.send(full);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramkit_core::snapshot::TraceAction;

    /// Entry `i` of a made-up trace, its optional fields (times, stacks,
    /// compile contexts) as `pattern` says: 0, on some entries only, so the
    /// optional columns start late and have gaps; 1, on every entry; 2, on
    /// every entry from a batch boundary on (plus one) or from a later one;
    /// 3, on none.
    fn row(pattern: u8, i: u64) -> (Entry, Option<u64>, [u32; 3]) {
        let action = [TraceAction::Alloc, TraceAction::FreeRequested, TraceAction::FreeCompleted][(i % 3) as usize];
        let entry = Entry { action, addr: i * 512, size: i % 7 + 1, stream: i % 2 };
        let batch = BATCH as u64;
        let (time, ids) = match pattern {
            0 => ((i % 5 != 0 && i > 10).then_some(i * 3), [if i > 100 { (i % 4) as u32 } else { 0 }, if i % 1000 == 999 { 7 } else { 0 }, 0]),
            1 => (Some(i * 3), [(i % 4) as u32 + 1, 7, (i % 2) as u32 + 1]),
            2 => ((i > batch).then_some(i * 3), [if i >= 2 * batch { 5 } else { 0 }, 0, 0]),
            _ => (None, [0; 3]),
        };
        (entry, time, ids)
    }

    /// Every field of every entry of `a` and `b` alike.
    fn assert_same(a: &Entries, b: &Entries) {
        assert_eq!(a.len(), b.len());
        for i in 0..a.len() {
            assert_eq!((a.get(i), a.time_us(i), a.raw_ids(i)), (b.get(i), b.time_us(i), b.raw_ids(i)), "entry {i}");
        }
    }

    /// The columns a thread fills equal those filled directly, whether
    /// the thread is asked for them at the end or part way (an error's
    /// message describes an entry), the rest then pushed directly.
    #[test]
    fn a_thread_fills_the_columns_as_pushing_directly_does() {
        for pattern in 0..4 {
            a_thread_fills_the_columns_as_pushing_directly_does_for(pattern);
        }
    }

    fn a_thread_fills_the_columns_as_pushing_directly_does_for(pattern: u8) {
        let row = |i| row(pattern, i);
        let n = 3 * BATCH as u64 + 17;
        let mut direct = Entries::default();
        let mut direct_rows = Rows::for_input(0);
        for i in 0..n {
            let (e, t, ids) = row(i);
            direct_rows.push(&mut direct, e, t, ids, 1 << 20);
        }
        assert!(direct_rows.columns.is_none());
        for settle_at in [n, BATCH as u64, 5] {
            let mut threaded = Entries::default();
            let mut rows = Rows::for_input(THREADED_FROM_BYTES);
            for i in 0..n {
                if i == settle_at {
                    rows.settle(&mut threaded);
                    assert!(rows.columns.is_none());
                    assert_eq!(threaded.len(), i as usize);
                }
                let (e, t, ids) = row(i);
                rows.push(&mut threaded, e, t, ids, 1 << 20);
                if i == 0 {
                    assert!(rows.columns.is_some(), "a large input's columns are filled by a thread");
                }
            }
            assert_eq!(rows.len(), n as usize);
            rows.settle(&mut threaded);
            assert_same(&threaded, &direct);
        }
    }
}

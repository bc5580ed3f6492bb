//! A large file read on a second thread, a chunk ahead of the unpickler.
//!
//! Copying a file in from the page cache is kernel work on the reading
//! thread (about a tenth of a long trace's parse). Here another thread
//! does it: it reads each chunk into a buffer that keeps [`ROOM`] bytes
//! free in front, so the unpickler can put the few bytes it has not read
//! yet there and go on in the new buffer without copying the chunk, then
//! hands the old buffer back to be read into again (it stays in memory).

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Bytes free in front of each chunk's data.
pub(crate) const ROOM: usize = 256 << 10;
/// Chunks read ahead of the unpickler.
const AHEAD: usize = 2;

/// The unpickler's end: chunks in, spent buffers back.
pub(crate) struct ReadAhead {
    chunks: Receiver<std::io::Result<Vec<u8>>>,
    spent: SyncSender<Vec<u8>>,
}

impl ReadAhead {
    /// Starts reading `source` in chunks of `chunk` bytes; `source` back
    /// if no thread can be started.
    pub(crate) fn spawn<R: Read + Send + 'static>(source: R, chunk: usize) -> Result<ReadAhead, R> {
        let (send_chunk, chunks) = sync_channel(AHEAD);
        let (spent, take_spent) = sync_channel::<Vec<u8>>(AHEAD + 2);
        // Handed over through a slot so that it comes back if the thread does not start.
        let slot = Arc::new(Mutex::new(Some(source)));
        let theirs = Arc::clone(&slot);
        let started = std::thread::Builder::new().name("vramkit-read".into()).spawn(move || {
            let Some(mut source) = theirs.lock().ok().and_then(|mut s| s.take()) else { return };
            loop {
                let mut buf = take_spent.try_recv().unwrap_or_else(|_| Vec::with_capacity(ROOM + chunk));
                buf.clear();
                buf.resize(ROOM, 0);
                let read = (&mut source).take(chunk as u64).read_to_end(&mut buf);
                let last = !matches!(read, Ok(n) if n > 0);
                let sent = match read {
                    Ok(0) => Ok(()),
                    Ok(_) => send_chunk.send(Ok(buf)),
                    // What was read before the error counts, as `read_to_end` has it.
                    Err(e) if buf.len() > ROOM => send_chunk.send(Ok(buf)).and_then(|()| send_chunk.send(Err(e))),
                    Err(e) => send_chunk.send(Err(e)),
                };
                // Done at the end, at an error, or when the unpickler is gone.
                if last || sent.is_err() {
                    return;
                }
            }
        });
        match started {
            Ok(_) => Ok(ReadAhead { chunks, spent }),
            Err(_) => match slot.lock().ok().and_then(|mut s| s.take()) {
                Some(source) => Err(source),
                // Not reached: a thread that did not start took nothing.
                None => Ok(ReadAhead { chunks, spent }),
            },
        }
    }

    /// The next chunk: [`ROOM`] bytes of room, then at least one byte of
    /// data. `None` at the end of the input.
    pub(crate) fn next(&self) -> Option<std::io::Result<Vec<u8>>> {
        self.chunks.recv().ok()
    }

    /// A buffer to read into again.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        // The thread may be done (it then needs no buffers).
        let _ = self.spent.try_send(buf);
    }
}

//! A large file read on a second thread, a chunk ahead of the unpickler.
//!
//! Copying a file in from the page cache is kernel work on the reading
//! thread (about a tenth of a long trace's parse). Here another thread
//! does it: it reads each chunk into a buffer that keeps [`ROOM`] bytes
//! free in front, so the unpickler can put the few bytes it has not read
//! yet there and go on in the new buffer without copying the chunk, then
//! hands the old buffer back to be read into again (it stays in memory).
//!
//! Each chunk's data starts at an address aligned to [`ALIGN`]: the
//! kernel copies a file into a buffer 8 or 16 bytes past such an address
//! (where the allocator's large blocks begin) at a quarter of the speed
//! (AMD EPYC here: 179 MB in 87–92 ms against 21–25 ms).

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Bytes free in front of each chunk's data.
const ROOM: usize = 256 << 10;
/// Chunks read ahead of the unpickler.
const AHEAD: usize = 2;
/// A chunk's data starts at an address that is a multiple of this.
const ALIGN: usize = 64;

/// A chunk read: its data from `start` on, at least [`ROOM`] bytes of room before it.
pub(crate) struct Chunk {
    pub buf: Vec<u8>,
    pub start: usize,
}

/// The unpickler's end: chunks in, spent buffers back.
pub(crate) struct ReadAhead {
    chunks: Receiver<std::io::Result<Chunk>>,
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
                let mut buf = take_spent.try_recv().unwrap_or_else(|_| Vec::with_capacity(ROOM + ALIGN + chunk));
                buf.clear();
                let start = ROOM + (ALIGN - (buf.as_ptr() as usize + ROOM) % ALIGN) % ALIGN;
                buf.resize(start, 0);
                let read = (&mut source).take(chunk as u64).read_to_end(&mut buf);
                let last = !matches!(read, Ok(n) if n > 0);
                let sent = match read {
                    Ok(0) => Ok(()),
                    Ok(_) => send_chunk.send(Ok(Chunk { buf, start })),
                    // What was read before the error counts, as `read_to_end` has it.
                    Err(e) if buf.len() > start => send_chunk.send(Ok(Chunk { buf, start })).and_then(|()| send_chunk.send(Err(e))),
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

    /// The next chunk: at least [`ROOM`] bytes of room, then at least one
    /// byte of data. `None` at the end of the input.
    pub(crate) fn next(&self) -> Option<std::io::Result<Chunk>> {
        self.chunks.recv().ok()
    }

    /// A buffer to read into again.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        // The thread may be done (it then needs no buffers).
        let _ = self.spent.try_send(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk has its room, its data starts aligned, and the chunks
    /// hold the source's bytes in order, buffers given back or not.
    #[test]
    fn chunks_start_aligned_after_their_room_and_hold_the_source_in_order() {
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
        for give_back in [false, true] {
            let Ok(ahead) = ReadAhead::spawn(std::io::Cursor::new(bytes.clone()), 100_000) else { panic!("no thread") };
            let mut seen = Vec::new();
            while let Some(chunk) = ahead.next() {
                let Chunk { buf, start } = chunk.expect("a cursor does not fail");
                assert!(start >= ROOM, "room {start}");
                assert_eq!((buf.as_ptr() as usize + start) % ALIGN, 0, "data at {:#x} + {start}", buf.as_ptr() as usize);
                assert!(buf.len() > start, "a chunk holds data");
                seen.extend_from_slice(&buf[start..]);
                if give_back {
                    ahead.give_back(buf);
                }
            }
            assert!(seen == bytes, "given back: {give_back}");
        }
    }
}

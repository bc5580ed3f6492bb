//! The bytes a pickle is read from: a whole slice, or a window over a
//! reader, refilled as the parse moves on, so that a file of gigabytes is
//! never held whole (the reader keeps only what it builds).

use super::read_ahead::{Chunk, ReadAhead};
use std::borrow::Cow;
use std::io::Read;

/// Bytes read from a reader at a time.
const CHUNK: usize = 4 << 20;
/// Files from this size on are read on a second thread ([`ReadAhead`]).
const READ_AHEAD_FROM_BYTES: usize = 32 << 20;

/// A pickle's bytes, as the unpickler walks them.
pub(crate) struct Input<'a> {
    /// The input from offset `base` on: all of it, or the window read so far.
    data: Cow<'a, [u8]>,
    /// The next byte, as an index into `data`.
    pub(crate) pos: usize,
    /// The input offset of `data[0]`.
    base: usize,
    /// Length of the whole input.
    len: usize,
    /// Where more bytes come from; `None` once it is exhausted (or for a slice).
    source: Option<Box<dyn Read + 'a>>,
    /// Or a thread reading it (then `source` is `None`).
    ahead: Option<ReadAhead>,
    /// What the source said when it failed; the input ends there.
    pub(crate) error: Option<std::io::Error>,
}

impl<'a> Input<'a> {
    /// All of `bytes`.
    pub(crate) fn bytes(bytes: &'a [u8]) -> Input<'a> {
        Input { data: Cow::Borrowed(bytes), pos: 0, base: 0, len: bytes.len(), source: None, ahead: None, error: None }
    }

    /// `len` bytes: `head`, already read, then the rest of `source`.
    pub(crate) fn reader(head: Vec<u8>, source: impl Read + 'a, len: usize) -> Input<'a> {
        Input { data: Cow::Owned(head), pos: 0, base: 0, len, source: Some(Box::new(source)), ahead: None, error: None }
    }

    /// `len` bytes: `head`, already read, then the rest of `source`, read
    /// on a second thread when it is large.
    pub(crate) fn file(head: Vec<u8>, source: impl Read + Send + 'static, len: usize) -> Input<'a> {
        if len < READ_AHEAD_FROM_BYTES {
            return Input::reader(head, source, len);
        }
        Input::read_ahead(head, source, len, CHUNK)
    }

    /// [`file`](Self::file) read ahead in chunks of `chunk` bytes.
    fn read_ahead(head: Vec<u8>, source: impl Read + Send + 'static, len: usize, chunk: usize) -> Input<'a> {
        match ReadAhead::spawn(source, chunk) {
            Ok(ahead) => Input { data: Cow::Owned(head), pos: 0, base: 0, len, source: None, ahead: Some(ahead), error: None },
            // No thread to be had: read here.
            Err(source) => Input::reader(head, source, len),
        }
    }

    /// The bytes in the window (from `base`): index them with `pos`.
    #[inline]
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// The input offset of the next byte.
    #[inline]
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Length of the whole input.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the input after the next one's offset (what remains).
    pub(crate) fn remaining(&self) -> usize {
        self.len.saturating_sub(self.offset()).max(self.data.len() - self.pos)
    }

    /// Makes `n` bytes from `pos` on available in the window; false if the
    /// input ends (or its reader fails) first.
    #[inline]
    pub(crate) fn ensure(&mut self, n: usize) -> bool {
        self.data.len() - self.pos >= n || self.refill(n)
    }

    fn refill(&mut self, n: usize) -> bool {
        if self.ahead.is_some() {
            return self.refill_ahead(n);
        }
        let (Some(source), Cow::Owned(buf)) = (&mut self.source, &mut self.data) else { return false };
        // Drop what was read; keep the rest at the front.
        buf.drain(..self.pos);
        self.base += self.pos;
        self.pos = 0;
        let want = n.max(CHUNK);
        if buf.len() < want {
            // Read into the spare capacity as is (nothing zeroed first).
            let asked = (want - buf.len()) as u64;
            match source.by_ref().take(asked).read_to_end(buf) {
                Ok(read) if (read as u64) < asked => self.source = None,
                Ok(_) => {}
                Err(e) => {
                    self.error = Some(e);
                    self.source = None;
                }
            }
        }
        buf.len() >= n
    }

    /// [`refill`](Self::refill) from the thread reading ahead: the bytes not
    /// read yet go into the room in front of the next chunk, which becomes
    /// the window (a long run of bytes wanted at once is copied instead).
    fn refill_ahead(&mut self, n: usize) -> bool {
        while self.data.len() - self.pos < n {
            let Some(ahead) = &self.ahead else { return false };
            let Chunk { buf: mut chunk, start: room } = match ahead.next() {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    self.error = Some(e);
                    self.ahead = None;
                    return false;
                }
                None => {
                    self.ahead = None;
                    return false;
                }
            };
            let left = self.data.len() - self.pos;
            let offset = self.base + self.pos;
            // The room holds what is left, and `base` stays an offset (not before the input's start).
            if left <= room && room - left <= offset {
                let start = room - left;
                chunk[start..room].copy_from_slice(&self.data[self.pos..]);
                let spent = std::mem::replace(&mut self.data, Cow::Owned(chunk));
                self.base = offset - start;
                self.pos = start;
                if let Cow::Owned(spent) = spent {
                    ahead.give_back(spent);
                }
            } else {
                let Cow::Owned(buf) = &mut self.data else { return false };
                buf.drain(..self.pos);
                self.base += self.pos;
                self.pos = 0;
                buf.extend_from_slice(&chunk[room..]);
                ahead.give_back(chunk);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that fails after `ok` bytes.
    struct FailsAfter(std::io::Cursor<Vec<u8>>, u64);

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.position() >= self.1 {
                return Err(std::io::Error::other("disk gone"));
            }
            let n = buf.len().min((self.1 - self.0.position()) as usize);
            self.0.read(&mut buf[..n])
        }
    }

    /// Walks `input` as the unpickler does (windows of varying size, some
    /// larger than a chunk and than the room in front of one) and returns
    /// the bytes it saw.
    fn walk(mut input: Input<'_>, total: usize) -> Vec<u8> {
        let mut seen = Vec::new();
        let mut k = 0usize;
        while input.offset() < total {
            k += 1;
            let want = [1, 7, 300, 70_000, 3 << 20][k % 5].min(total - input.offset());
            if !input.ensure(want) {
                break;
            }
            assert!(input.remaining() >= want);
            let step = want.div_ceil(2).max(1);
            seen.extend_from_slice(&input.data()[input.pos..input.pos + step]);
            input.pos += step;
        }
        seen
    }

    /// Read ahead on a thread, the window holds the input's bytes at the
    /// offsets it says, as read here.
    #[test]
    fn reading_ahead_gives_the_bytes_reading_here_does() {
        let bytes: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let head = bytes[..1000].to_vec();
        let rest = std::io::Cursor::new(bytes[1000..].to_vec());
        let here = walk(Input::reader(head.clone(), rest.clone(), bytes.len()), bytes.len());
        for chunk in [100_000, 1 << 20, 4 << 20] {
            let ahead = walk(Input::read_ahead(head.clone(), rest.clone(), bytes.len(), chunk), bytes.len());
            assert_eq!(ahead.len(), here.len());
            assert!(ahead == here, "chunk {chunk}");
        }
        assert_eq!(here.len(), bytes.len());
    }

    /// A source that fails midway ends the input there, the error kept.
    #[test]
    fn a_failing_source_read_ahead_ends_the_input_with_its_error() {
        let bytes = vec![7u8; 3 << 20];
        let source = FailsAfter(std::io::Cursor::new(bytes.clone()), 1 << 20);
        let mut input = Input::read_ahead(Vec::new(), source, bytes.len(), 100_000);
        assert!(input.ensure(1 << 20));
        assert!(!input.ensure((1 << 20) + 1));
        assert_eq!(input.error.as_ref().map(|e| e.to_string()), Some("disk gone".to_owned()));
    }
}

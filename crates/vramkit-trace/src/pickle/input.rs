//! The bytes a pickle is read from: a whole slice, or a window over a
//! reader, refilled as the parse moves on, so that a file of gigabytes is
//! never held whole (the reader keeps only what it builds).

use std::borrow::Cow;
use std::io::Read;

/// Bytes read from a reader at a time.
const CHUNK: usize = 4 << 20;

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
    /// What the source said when it failed; the input ends there.
    pub(crate) error: Option<std::io::Error>,
}

impl<'a> Input<'a> {
    /// All of `bytes`.
    pub(crate) fn bytes(bytes: &'a [u8]) -> Input<'a> {
        Input { data: Cow::Borrowed(bytes), pos: 0, base: 0, len: bytes.len(), source: None, error: None }
    }

    /// `len` bytes: `head`, already read, then the rest of `source`.
    pub(crate) fn reader(head: Vec<u8>, source: impl Read + 'a, len: usize) -> Input<'a> {
        Input { data: Cow::Owned(head), pos: 0, base: 0, len, source: Some(Box::new(source)), error: None }
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
}

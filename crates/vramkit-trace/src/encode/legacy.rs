//! The 2.0-era block `history` lists.

use super::encoder::{int, Encoder};
use crate::value::Value;
use vramkit_core::snapshot::Frames;

impl Encoder {
    /// The `history` value of a block when writing the legacy layout, from
    /// `(addr, real_size, frames)` triples, oldest first.
    pub(super) fn history<'a>(&mut self, entries: impl IntoIterator<Item = (u64, u64, Option<&'a Frames>)>) -> Value {
        let items = entries
            .into_iter()
            .map(|(addr, real_size, frames)| {
                let mut pairs = vec![(self.key("addr"), int(addr)), (self.key("real_size"), int(real_size))];
                if let Some(frames) = frames {
                    let frames = self.frames(frames);
                    pairs.push((self.key("frames"), frames));
                }
                Value::dict(pairs)
            })
            .collect();
        Value::list(items)
    }
}

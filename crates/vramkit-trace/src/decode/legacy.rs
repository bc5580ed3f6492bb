//! The 2.0-era block `history` lists: `{addr, real_size, frames}` each.

use super::reader::Reader;
use super::schema_err::{AtKey, SchemaErr};
use crate::legacy::HistoryEntry;
use crate::tree::Item;
use crate::words::Word;

impl Reader<'_> {
    pub(super) fn history(&mut self, item: Item) -> Result<Vec<HistoryEntry>, SchemaErr> {
        let items = self.seq(item)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, &entry) in items.iter().enumerate() {
            out.push(self.history_entry(entry).at_index(i)?);
        }
        Ok(out)
    }

    fn history_entry(&mut self, item: Item) -> Result<HistoryEntry, SchemaErr> {
        let (mut addr, mut real_size, mut frames) = (None, None, None);
        for &(k, v) in self.dict(item)? {
            let word = self.word(k)?;
            let key = word.name();
            match word {
                Word::Addr => addr = Some(self.u64(v).at(key)?),
                Word::RealSize => real_size = Some(self.u64(v).at(key)?),
                Word::Frames => frames = Some(self.frames(v).at(key)?),
                _ => {}
            }
        }
        Ok(HistoryEntry {
            addr: addr.ok_or_else(|| SchemaErr::missing("addr"))?,
            real_size: real_size.ok_or_else(|| SchemaErr::missing("real_size"))?,
            frames,
        })
    }
}

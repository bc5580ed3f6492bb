//! Stacks: a frames list object is decoded once and handed out as one
//! `Arc`, and lists of the very same frame objects share one too.

use super::reader::{ItemsKey, Reader};
use super::schema_err::{AtKey, SchemaErr};
use crate::tree::Item;
use crate::words::Word;
use std::sync::Arc;
use vramkit_core::snapshot::{Frame, Frames};

impl<'t> Reader<'t> {
    /// A frames list; the same list object gives the same `Arc`.
    pub(super) fn frames(&mut self, item: Item) -> Result<Frames, SchemaErr> {
        // Check the kind first: the slot of a node means different things
        // for lists, dicts and strs.
        let (Some(id), Some(items)) = (item.node_id(), self.tree.as_seq(item)) else {
            return Err(self.wrong("a list of frames", item));
        };
        if let Some(&mut slot) = self.slot(id) {
            if let Some(frames) = (slot as usize).checked_sub(1).and_then(|i| self.decoded_frames.get(i)) {
                return Ok(frames.clone());
            }
        }
        // Distinct list objects often hold the very same frame objects
        // (PyTorch memoizes each frame dict); such lists share one `Arc`,
        // found by the items' place when the reader made them share it.
        let place = (items.as_ptr() as usize, items.len());
        let index = match self.frames_by_range.get(&place) {
            Some(&index) => index,
            None => {
                let index = match self.frames_by_items.get(&ItemsKey(items)) {
                    Some(&index) => index,
                    None => self.decode_frames(items)?,
                };
                self.frames_by_range.insert(place, index);
                index
            }
        };
        if let Some(slot) = self.slot(id) {
            *slot = index;
        }
        Ok(self.decoded_frames[index as usize - 1].clone())
    }

    /// Decodes the frames `items` name, kept under the frame objects they
    /// are when all are nodes; their index in `decoded_frames`, plus 1.
    fn decode_frames(&mut self, items: &'t [Item]) -> Result<u32, SchemaErr> {
        let mut out = Vec::with_capacity(items.len());
        for (i, &frame) in items.iter().enumerate() {
            out.push(self.frame(frame).at_index(i)?);
        }
        self.decoded_frames.push(Arc::from(out));
        let index = self.decoded_frames.len() as u32;
        if items.iter().all(|item| item.node_id().is_some()) {
            self.frames_by_items.insert(ItemsKey(items), index);
        }
        Ok(index)
    }

    /// One frame; a frame dict shared by many stacks is decoded once.
    fn frame(&mut self, item: Item) -> Result<Frame, SchemaErr> {
        let pairs = self.dict(item)?;
        let id = item.node_id();
        if let Some(&mut slot) = id.and_then(|id| self.slot(id)) {
            if let Some(frame) = (slot as usize).checked_sub(1).and_then(|i| self.decoded_frame.get(i)) {
                return Ok(frame.clone());
            }
        }
        let (mut filename, mut line, mut name) = (None, None, None);
        for &(k, v) in pairs {
            match self.word(k)? {
                Word::Filename => filename = Some(self.str(v).at("filename")?),
                // Kept signed, as the core stores it: 2^64-1 is -1, "no line".
                Word::Line => line = Some(self.bits64(v).at("line")? as i64),
                Word::Name => name = Some(self.str(v).at("name")?),
                _ => {}
            }
        }
        let frame = Frame {
            filename: filename.ok_or_else(|| SchemaErr::missing("filename"))?.to_owned(),
            line: line.ok_or_else(|| SchemaErr::missing("line"))?,
            name: name.ok_or_else(|| SchemaErr::missing("name"))?.to_owned(),
        };
        self.decoded_frame.push(frame.clone());
        let index = self.decoded_frame.len() as u32;
        if let Some(slot) = id.and_then(|id| self.slot(id)) {
            *slot = index;
        }
        Ok(frame)
    }
}

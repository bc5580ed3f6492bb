//! Stacks: each distinct `Frames` allocation becomes one list value and
//! equal frames one dict, so the pickle writer emits each once.

use super::encoder::Encoder;
use crate::value::Value;
use std::sync::Arc;
use vramkit_core::snapshot::{Frame, Frames};

impl Encoder {
    pub(super) fn frames(&mut self, frames: &Frames) -> Value {
        let id = Arc::as_ptr(frames) as *const Frame as usize;
        if let Some((_, value)) = self.frames.get(&id) {
            return value.clone();
        }
        let items = frames.iter().map(|frame| self.frame(frame)).collect();
        let value = Value::list(items);
        self.frames.insert(id, (frames.clone(), value.clone()));
        value
    }

    fn frame(&mut self, frame: &Frame) -> Value {
        if let Some(value) = self.frame_dicts.get(frame) {
            return value.clone();
        }
        let value = Value::dict(vec![
            (self.key("name"), Value::str(&frame.name)),
            (self.key("filename"), Value::str(&frame.filename)),
            (self.key("line"), Value::Int(frame.line)),
        ]);
        self.frame_dicts.insert(frame.clone(), value.clone());
        value
    }
}

//! Segments and their blocks; in the legacy layout blocks carry `history`.

use super::encoder::{int, int64, want, Encoder};
use crate::file::SnapshotFile;
use crate::value::Value;
use std::sync::Arc;
use vramkit_core::snapshot::{BlockInfo, SegmentInfo};

impl Encoder {
    pub(super) fn segment(
        &mut self,
        file: &SnapshotFile,
        index: usize,
        segment: &SegmentInfo,
        legacy_blocks: bool,
    ) -> Value {
        let keys = file.keys.as_ref().map(|k| &k.segment);
        let mut pairs =
            vec![(self.key("device"), Value::Int(segment.device)), (self.key("address"), int(segment.address))];
        pairs.push((self.key("total_size"), int(segment.total_size)));
        for (name, value) in [
            ("allocated_size", segment.allocated_size),
            ("active_size", segment.active_size),
            ("requested_size", segment.requested_size),
        ] {
            if want(keys, name) {
                pairs.push((self.key(name), int(value)));
            }
        }
        pairs.push((self.key("stream"), int64(segment.stream)));
        pairs.push((self.key("segment_type"), Value::str(segment.segment_type.as_str())));
        if want(keys, "segment_pool_id") || segment.segment_pool_id != (0, 0) {
            let (a, b) = segment.segment_pool_id;
            pairs.push((self.key("segment_pool_id"), Value::Tuple(Arc::from(vec![int(a), int(b)]))));
        }
        if want(keys, "is_expandable") || segment.is_expandable {
            pairs.push((self.key("is_expandable"), Value::Bool(segment.is_expandable)));
        }
        if let Some(frames) = &segment.frames {
            let frames = self.frames(frames);
            pairs.push((self.key("frames"), frames));
        }
        let blocks = segment
            .blocks
            .iter()
            .enumerate()
            .map(|(b, block)| self.block(file, index, b, block, legacy_blocks))
            .collect();
        pairs.push((self.key("blocks"), Value::list(blocks)));
        Value::dict(pairs)
    }

    fn block(
        &mut self,
        file: &SnapshotFile,
        segment: usize,
        index: usize,
        block: &BlockInfo,
        legacy_blocks: bool,
    ) -> Value {
        let keys = file.keys.as_ref().map(|k| &k.block);
        // In the legacy layout, `address` and `frames` were not keys of a
        // block; write them only if the source had them.
        let strict = |key: &str| keys.is_some_and(|set| set.contains(key));
        let mut pairs = Vec::with_capacity(6);
        if if legacy_blocks { strict("address") } else { want(keys, "address") } {
            pairs.push((self.key("address"), int(block.address)));
        }
        pairs.push((self.key("size"), int(block.size)));
        if want(keys, "requested_size") {
            pairs.push((self.key("requested_size"), int(block.requested_size)));
        }
        pairs.push((self.key("state"), Value::str(block.state.as_str())));
        if let Some(frames) = &block.frames {
            if if legacy_blocks { strict("frames") } else { want(keys, "frames") } {
                let frames = self.frames(frames);
                pairs.push((self.key("frames"), frames));
            }
        }
        if legacy_blocks {
            let history = match &file.legacy_history {
                Some(history) => {
                    self.history(history.of(segment, index).iter().map(|h| (h.addr, h.real_size, h.frames.as_ref())))
                }
                // A model with no recorded history: the live allocation is all we know.
                None => self.history(
                    block.state.is_active().then_some((block.address, block.requested_size, block.frames.as_ref())),
                ),
            };
            pairs.push((self.key("history"), history));
        }
        Value::dict(pairs)
    }
}

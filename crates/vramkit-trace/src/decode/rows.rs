//! Trace entries the pickle reader put straight into columns (rows of the
//! tree's `entry_rows`): checked and resolved here like any entry, and a
//! device trace that is nothing but consecutive rows keeps the reader's
//! columns (moved, not copied, when it is the only one).

use super::reader::Reader;
use super::schema_err::{AtKey, SchemaErr};
use crate::entries::{Entries, EntriesBuilder};
use crate::tree::{Item, Kind};
use std::ops::Range;
use vramkit_core::snapshot::TraceAction;

/// One device trace, decoded.
pub(crate) enum DecodedTrace {
    /// Built entry by entry.
    Built(Entries),
    /// The reader's rows `range`, to be taken out of the tree once the walk
    /// is over, with the entries decoded apart (`others`, which hold the
    /// tables every id refers to) put in at `positions`; `id_of` gives
    /// each node's id in those tables.
    Rows { range: Range<usize>, others: EntriesBuilder, positions: Vec<usize>, id_of: Vec<u32> },
}

impl DecodedTrace {
    /// The entries; rows are taken out of `rows` (the tree's).
    pub(crate) fn finish(self, rows: &mut Entries) -> Entries {
        match self {
            DecodedTrace::Built(entries) => entries,
            DecodedTrace::Rows { range, others, positions, id_of } => others.finish_rows(rows.take_range(range), &id_of, &positions),
        }
    }
}

/// Which of the entry keys (bits as in `ENTRY_KEYS`) a row's dict has.
fn row_keys(action: TraceAction, timed: bool, ids: [u32; 3]) -> u32 {
    let address = if action == TraceAction::Oom { 1 << 2 } else { 1 << 1 };
    let [frames, context, metadata] = ids;
    1 | address | 1 << 3 | 1 << 4 | u32::from(timed) << 5 | u32::from(context != 0) << 6 | u32::from(metadata != 0) << 7 | u32::from(frames != 0) << 8
}

impl Reader<'_> {
    /// The rows among `items`, if there are some and they are consecutive
    /// and in order (whatever else is between them).
    pub(super) fn row_run(&self, items: impl Iterator<Item = Item>) -> Option<Range<usize>> {
        let mut run: Option<Range<usize>> = None;
        for item in items {
            if let Kind::Entry(row) = item.kind() {
                match &mut run {
                    None => run = Some(row..row + 1),
                    Some(r) if r.end == row => r.end += 1,
                    Some(_) => return None,
                }
            }
        }
        run
    }

    /// A device trace whose rows are `rows`, consecutive: checks them (their
    /// stacks decode), decodes the other items as entries, and makes the
    /// tables all of them refer to. False from `others` means skipped.
    pub(super) fn rows(
        &mut self,
        items: impl Iterator<Item = Item>,
        rows: Range<usize>,
        mut other: impl FnMut(&mut Self, usize, Item, &mut EntriesBuilder) -> Result<bool, SchemaErr>,
    ) -> Result<DecodedTrace, SchemaErr> {
        let mut others = EntriesBuilder::default();
        let mut positions = Vec::new();
        let mut id_of = vec![0u32; self.tree.nodes.len()];
        let mut keys = 0;
        let mut kept = 0;
        let tree = self.tree;
        for (index, item) in items.enumerate() {
            let Kind::Entry(row) = item.kind() else {
                if other(self, index, item, &mut others)? {
                    positions.push(kept);
                    kept += 1;
                }
                continue;
            };
            let ids = tree.entry_rows.raw_ids(row);
            for (k, &id) in ids.iter().enumerate() {
                let node = (id as usize).wrapping_sub(1);
                if id != 0 && id_of[node] == 0 {
                    id_of[node] = self.table_id(k, node, &mut others).at_index(index)?;
                }
            }
            keys |= row_keys(tree.entry_rows.get(row).action, tree.entry_rows.time_us(row).is_some(), ids);
            kept += 1;
        }
        self.entry.mask |= keys;
        Ok(DecodedTrace::Rows { range: rows, others, positions, id_of })
    }

    /// Row `row`, appended to `out`.
    pub(super) fn row(&mut self, row: usize, out: &mut EntriesBuilder) -> Result<(), SchemaErr> {
        let rows = &self.tree.entry_rows;
        let (entry, time_us, mut ids) = (rows.get(row), rows.time_us(row), rows.raw_ids(row));
        self.entry.mask |= row_keys(entry.action, time_us.is_some(), ids);
        for (k, id) in ids.iter_mut().enumerate() {
            if *id != 0 {
                *id = self.table_id(k, *id as usize - 1, out)?;
            }
        }
        out.push(entry, time_us, ids);
        Ok(())
    }

    /// The id in `tables` of node `node`, the entry's stack (`k` 0),
    /// compile context (1) or user metadata (2).
    fn table_id(&mut self, k: usize, node: usize, tables: &mut EntriesBuilder) -> Result<u32, SchemaErr> {
        let item = Item::node(node);
        Ok(match k {
            0 => tables.stack_id(&self.frames(item).at("frames")?),
            1 => tables.string_id(self.str(item).at("compile_context")?),
            _ => tables.string_id(self.str(item).at("user_metadata")?),
        })
    }
}

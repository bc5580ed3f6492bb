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

/// Which of the entry keys (bits as in `ENTRY_KEYS`) rows have, from which
/// address keys they have (`addr`, `device_free`: `oom`), whether one has a
/// time, and which have a stack, compile context and user metadata.
fn entry_keys(addr: bool, device_free: bool, timed: bool, ids: [bool; 3]) -> u32 {
    let [frames, context, metadata] = ids.map(u32::from);
    1 | u32::from(addr) << 1
        | u32::from(device_free) << 2
        | 1 << 3
        | 1 << 4
        | u32::from(timed) << 5
        | context << 6
        | metadata << 7
        | frames << 8
}

/// Which of the entry keys a row's dict has.
fn row_keys(action: TraceAction, timed: bool, ids: [u32; 3]) -> u32 {
    let oom = action == TraceAction::Oom;
    entry_keys(!oom, oom, timed, ids.map(|id| id != 0))
}

/// Nodes the rows refer to, each as its id in the tables being built (0:
/// not resolved yet), indexed by node.
type IdOf = Vec<u32>;

impl Reader<'_> {
    /// The rows among the list items `head` then rows `tail`, if there are
    /// some and they are consecutive and in order (whatever else is between them).
    pub(super) fn row_run(&self, head: &[Item], tail: Range<usize>) -> Option<Range<usize>> {
        let in_head = head.iter().filter_map(|item| match item.kind() {
            Kind::Entry(row) => Some(row..row + 1),
            _ => None,
        });
        let mut run: Option<Range<usize>> = None;
        for rows in in_head.chain((!tail.is_empty()).then_some(tail)) {
            match &mut run {
                None => run = Some(rows),
                Some(r) if r.end == rows.start => r.end = rows.end,
                Some(_) => return None,
            }
        }
        run
    }

    /// A device trace of the items `head` then rows `tail`, whose rows are
    /// `rows`, consecutive: checks them (their stacks decode), decodes the
    /// other items as entries, and makes the tables all of them refer to.
    /// False from `others` means skipped.
    pub(super) fn rows(
        &mut self,
        head: &[Item],
        tail: Range<usize>,
        rows: Range<usize>,
        mut other: impl FnMut(&mut Self, usize, Item, &mut EntriesBuilder) -> Result<bool, SchemaErr>,
    ) -> Result<DecodedTrace, SchemaErr> {
        let mut others = EntriesBuilder::default();
        let mut positions = Vec::new();
        let mut id_of = vec![0u32; self.tree.nodes.len()];
        let mut keys = 0;
        let mut kept = 0;
        for (index, &item) in head.iter().enumerate() {
            let Kind::Entry(row) = item.kind() else {
                if other(self, index, item, &mut others)? {
                    positions.push(kept);
                    kept += 1;
                }
                continue;
            };
            keys |= self.resolve_row(row, &mut id_of, &mut others).at_index(index)?;
            kept += 1;
        }
        if !tail.is_empty() {
            keys |= self.resolve_rows(tail, head.len(), &mut id_of, &mut others)?;
        }
        self.entry.mask |= keys;
        Ok(DecodedTrace::Rows { range: rows, others, positions, id_of })
    }

    /// Resolves row `row`'s stack and strings in `tables` (each node once);
    /// the keys its dict has.
    fn resolve_row(&mut self, row: usize, id_of: &mut IdOf, tables: &mut EntriesBuilder) -> Result<u32, SchemaErr> {
        let rows = &self.tree.entry_rows;
        let ids = rows.raw_ids(row);
        let keys = row_keys(rows.get(row).action, rows.time_us(row).is_some(), ids);
        for (k, &id) in ids.iter().enumerate() {
            let node = (id as usize).wrapping_sub(1);
            if id != 0 && id_of[node] == 0 {
                id_of[node] = self.table_id(k, node, tables)?;
            }
        }
        Ok(keys)
    }

    /// [`resolve_row`](Self::resolve_row) for rows `tail`, which are list
    /// items from `first_index` on: a column at a time; should a node not
    /// decode, row by row again for the first error, as it would have come.
    fn resolve_rows(
        &mut self,
        tail: Range<usize>,
        first_index: usize,
        id_of: &mut IdOf,
        tables: &mut EntriesBuilder,
    ) -> Result<u32, SchemaErr> {
        let tree = self.tree;
        let rows = &tree.entry_rows;
        let mut present = [false; 3];
        for (k, any) in present.iter_mut().enumerate() {
            for &id in rows.raw_id_column(k, tail.clone()) {
                let node = (id as usize).wrapping_sub(1);
                if id == 0 || id_of[node] != 0 {
                    *any |= id != 0;
                    continue;
                }
                *any = true;
                match self.table_id(k, node, tables) {
                    Ok(table_id) => id_of[node] = table_id,
                    Err(_) => {
                        let mut keys = 0;
                        for (j, row) in tail.enumerate() {
                            keys |= self.resolve_row(row, id_of, tables).at_index(first_index + j)?;
                        }
                        return Ok(keys);
                    }
                }
            }
        }
        let actions = rows.actions().get(tail.clone()).unwrap_or_default();
        let ooms = actions.iter().filter(|&&a| a == TraceAction::Oom).count();
        Ok(entry_keys(ooms < actions.len(), ooms > 0, rows.any_timed(tail), present))
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

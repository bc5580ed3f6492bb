//! Settings that replay a trace alike: where two settings differ only in
//! what cannot change a single decision of the allocator on this trace,
//! their replays are the same, so `tune` runs one and reports it for both.
//! Only differences proven inert count, never ones that merely look small:
//! - `roundup_power2_divisions`: `malloc` rounds a request with it and
//!   nowhere else, so two tables that round every size the trace asks for
//!   (its `alloc` and `oom` entries) to the same bytes decide alike.
//! - `max_split_size_mb` without expandable segments, when no block can
//!   reach it: a block lies inside one segment, and every segment is one of
//!   the start state's or `get_allocation_size` of a rounded request. Below
//!   the limit every oversize test reads as it does unset, and the retry
//!   ladder's release of oversize blocks finds none and gives up, as it
//!   does unset. (Expandable segments grow, so their blocks have no such bound.)
//! - `max_split_size_mb` as a replay goes: a candidate that differs from
//!   another only in a limit the other leaves unset is judged by that
//!   one's replay, which watches the limit (vramkit-core's
//!   `max_split_watch`): where no test of the limit would have answered
//!   otherwise, the two replays are the same ([`watchers`]); else the
//!   candidate is replayed for itself.

use vramkit_core::rounding::{get_allocation_size, round_size, ROUNDUP_INTERVALS};
use vramkit_core::{AllocatorConfig, SegmentInfo, TraceAction};
use vramkit_trace::Entries;

/// What of a trace the inert settings are judged against.
#[derive(Clone, Debug)]
pub(crate) struct Requests {
    /// Every size `malloc` is asked for, once each, ascending.
    sizes: Vec<u64>,
    /// The largest segment of the start state.
    largest_start_segment: u64,
    /// The division tables met so far that round the sizes unlike every
    /// earlier one, each with the largest size it rounds them to.
    tables: Vec<([u64; ROUNDUP_INTERVALS], u64)>,
    /// Every table met so far, with its place in `tables`.
    met: Vec<([u64; ROUNDUP_INTERVALS], usize)>,
}

impl Requests {
    /// The requests of a trace's `events`, replayed from `start` (the
    /// segments at its first entry).
    pub(crate) fn of(events: &Entries, start: &[SegmentInfo]) -> Requests {
        let mut sizes: Vec<u64> = events
            .actions()
            .iter()
            .zip(events.sizes())
            .filter(|(a, _)| matches!(a, TraceAction::Alloc | TraceAction::Oom))
            .map(|(_, s)| s)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let largest_start_segment = start.iter().map(|s| s.total_size).max().unwrap_or(0);
        Requests { sizes, largest_start_segment, tables: Vec::new(), met: Vec::new() }
    }

    /// `config` with its settings that are inert on this trace put as an
    /// earlier setting had them (divisions) or unset (`max_split_size_mb`):
    /// two settings whose forms are equal replay this trace alike.
    pub(crate) fn form(&mut self, config: &AllocatorConfig) -> AllocatorConfig {
        let mut form = config.clone();
        let table = config.roundup_power2_divisions;
        // Most candidates share a few tables: one met before is judged once.
        let at = match self.met.iter().find(|(t, _)| *t == table) {
            Some(&(_, at)) => at,
            None => {
                let sizes = &self.sizes;
                let same = |other: &[u64; ROUNDUP_INTERVALS]| sizes.iter().all(|&s| round_size(s, other) == round_size(s, &table));
                let at = self.tables.iter().position(|(t, _)| same(t)).unwrap_or_else(|| {
                    let largest = sizes.iter().map(|&s| round_size(s, &table)).max().unwrap_or(0);
                    self.tables.push((table, largest));
                    self.tables.len() - 1
                });
                self.met.push((table, at));
                at
            }
        };
        let (earlier, largest_rounded) = self.tables[at];
        form.roundup_power2_divisions = earlier;
        if let Some(limit) = config.max_split_size_bytes.filter(|_| !config.expandable_segments) {
            // The largest request makes the largest segment: the size grows with the request.
            let largest_new = if self.sizes.is_empty() { 0 } else { get_allocation_size(largest_rounded, config.large_segment_size_bytes) };
            if largest_new.max(self.largest_start_segment) < limit {
                form.max_split_size_bytes = None;
            }
        }
        form
    }
}

/// Per candidate (`configs`, their `forms` from [`Requests::form`], each
/// candidate's first alike `source`), the candidate whose replay may stand
/// for its own: one with `max_split_size_mb` unset whose form is its form
/// with the limit unset, both the first of their forms. That replay
/// watches the limits of the candidates it may stand for
/// ([`watched_limits`]). `None` for the others and for those `exact`
/// says must be replayed for themselves.
pub(crate) fn watchers(configs: &[&AllocatorConfig], forms: &[AllocatorConfig], source: &[usize], exact: impl Fn(usize) -> bool) -> Vec<Option<usize>> {
    let mut watchers: Vec<Option<usize>> = vec![None; configs.len()];
    for c in (0..configs.len()).filter(|&c| source[c] == c && forms[c].max_split_size_bytes.is_some() && !exact(c)) {
        let unset = AllocatorConfig { max_split_size_bytes: None, ..forms[c].clone() };
        let watcher = (0..configs.len()).find(|&a| source[a] == a && configs[a].max_split_size_bytes.is_none() && forms[a] == unset);
        // Each limit is a bit of the watcher's model.
        if let Some(a) = watcher.filter(|&a| watchers.iter().filter(|&&w| w == Some(a)).count() < vramkit_core::MAX_WATCHED) {
            watchers[c] = Some(a);
        }
    }
    watchers
}

/// The `max_split_size_mb` values candidate `a`'s replay watches, for
/// the candidates it may stand for ([`watchers`]).
pub(crate) fn watched_limits(configs: &[&AllocatorConfig], watchers: &[Option<usize>], a: usize) -> Vec<u64> {
    (0..configs.len()).filter(|&c| watchers[c] == Some(a)).filter_map(|c| configs[c].max_split_size_bytes).collect()
}

/// Whether candidate `c` (one [`watchers`] names a watcher for) replays
/// alike with its watcher, whose replay ended alike under `alike`.
pub(crate) fn proven_alike(configs: &[&AllocatorConfig], c: usize, alike: &[u64]) -> bool {
    configs[c].max_split_size_bytes.is_some_and(|limit| alike.contains(&limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramkit_core::TraceEntry;

    const MIB: u64 = 1 << 20;

    /// The requests of a trace asking for `sizes`, from an empty start.
    fn requests(sizes: &[u64]) -> Requests {
        let events: Entries = sizes.iter().enumerate().map(|(i, &s)| TraceEntry::new(TraceAction::Alloc, (i as u64 + 1) << 32, s, 0)).collect();
        Requests::of(&events, &[])
    }

    fn parse(conf: &str) -> AllocatorConfig {
        AllocatorConfig::parse(conf).unwrap()
    }

    #[test]
    fn tables_alike_on_every_size_asked_for_share_a_form() {
        // Every request below 256 MiB: the list form rounding only above it is unset here.
        let mut r = requests(&[1000, 3 * MIB + 5, 100 * MIB + 1]);
        let unset = r.form(&parse(""));
        assert_eq!(r.form(&parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")), unset);
        assert_ne!(r.form(&parse("roundup_power2_divisions:4")), unset);
        // Powers of two are never rounded further.
        let mut r = requests(&[4096, 4 * MIB, 64 * MIB]);
        let unset = r.form(&parse(""));
        assert_eq!(r.form(&parse("roundup_power2_divisions:8")), unset);
    }

    #[test]
    fn a_split_limit_no_block_reaches_is_unset_without_expandable_segments() {
        // The largest segment: 100 MiB + 1 rounded to 2 MiB, 102 MiB.
        let mut r = requests(&[1000, 100 * MIB + 1]);
        let unset = r.form(&parse(""));
        assert_eq!(r.form(&parse("max_split_size_mb:128")), unset);
        assert_ne!(r.form(&parse("max_split_size_mb:64")), unset);
        // Rounding can carry a request past the limit: 100 MiB + 1 in 2 divisions is 128 MiB.
        assert_ne!(r.form(&parse("max_split_size_mb:128,roundup_power2_divisions:2")), r.form(&parse("roundup_power2_divisions:2")));
        // Expandable segments grow past any request.
        assert_ne!(r.form(&parse("max_split_size_mb:128,expandable_segments:True")), r.form(&parse("expandable_segments:True")));
    }
}

//! The search for the largest value that fits: grow until a run runs out of memory, then bisect.
//!
//! Memory is taken to grow with the value, so one value that fits and the next that does not end
//! the search. Growth doubles the value from `lo` for a range (1, 2, 4, ... or 8, 16, 32, ...);
//! from a value known to fit (the next search, under other settings) and through a list it takes
//! the next index, then 2, 4, ... further, as the gain is likely small.

use super::batch::Values;

/// One run of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub value: u64,
    pub fits: bool,
}

/// What a search found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The runs, in the order made.
    pub probes: Vec<Probe>,
    /// The largest value that fits (`None`: not even the first tried).
    pub largest_fit: Option<u64>,
    /// The next value, which does not fit (`None`: the largest of all fits).
    pub smallest_oom: Option<u64>,
}

/// Searches `values`; `known_fit` is a value already known to fit (the search starts above it).
/// `fits` runs the program at a value; its error ends the search.
pub fn search<E>(values: &Values, known_fit: Option<u64>, mut fits: impl FnMut(u64) -> Result<bool, E>) -> Result<Found, E> {
    let n = values.len();
    let known = known_fit.and_then(|v| values.index_of(v));
    let doubling = matches!(values, Values::Range { .. }) && known.is_none();
    let mut found = Found::default();
    let mut probe = |i: u64, found: &mut Found| -> Result<bool, E> {
        let value = values.at(i);
        let ok = fits(value)?;
        found.probes.push(Probe { value, fits: ok });
        Ok(ok)
    };
    let (mut fit, mut oom) = (known, None);
    let mut next = known.map_or(0, |i| i + 1);
    let mut step = 1;
    while next < n {
        if !probe(next, &mut found)? {
            oom = Some(next);
            break;
        }
        fit = Some(next);
        next = if doubling {
            values.index_of(values.at(next).saturating_mul(2).min(values.at(n - 1))).unwrap_or(n)
        } else {
            let stepped = next.saturating_add(step).min(n - 1);
            step = step.saturating_mul(2);
            stepped
        };
        if Some(next) == fit {
            break;
        }
    }
    while let (Some(lo), Some(hi)) = (fit, oom) {
        if hi - lo <= 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        if probe(mid, &mut found)? {
            fit = Some(mid);
        } else {
            oom = Some(mid);
        }
    }
    found.largest_fit = fit.map(|i| values.at(i));
    found.smallest_oom = oom.map(|i| values.at(i));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search against a program that fits up to `edge`, and the values it tried.
    fn against(values: &Values, known: Option<u64>, edge: u64) -> (Found, Vec<u64>) {
        let found = search(values, known, |v| Ok::<bool, ()>(v <= edge)).unwrap();
        let tried = found.probes.iter().map(|p| p.value).collect();
        (found, tried)
    }

    #[test]
    fn a_range_doubles_then_bisects_to_the_edge() {
        let range = Values::Range { lo: 1, hi: 512 };
        let (found, tried) = against(&range, None, 13);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(13), Some(14)));
        assert_eq!(tried, [1, 2, 4, 8, 16, 12, 14, 13]);
        let (found, tried) = against(&Values::Range { lo: 8, hi: 100 }, None, 70);
        assert_eq!(tried[..5], [8, 16, 32, 64, 100]);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(70), Some(71)));
    }

    #[test]
    fn the_ends_of_a_range() {
        let range = Values::Range { lo: 4, hi: 20 };
        let (found, tried) = against(&range, None, 3);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (None, Some(4), vec![4]));
        let (found, tried) = against(&range, None, 50);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(20), None, vec![4, 8, 16, 20]));
    }

    #[test]
    fn a_list_gallops_by_index_then_bisects() {
        let list = Values::List(vec![2, 4, 6, 8, 12, 16, 24, 32, 48]);
        let (found, tried) = against(&list, None, 20);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(16), Some(24)));
        assert_eq!(tried, [2, 4, 8, 32, 16, 24]);
    }

    #[test]
    fn a_known_fit_starts_the_search_just_above_it() {
        let range = Values::Range { lo: 1, hi: 512 };
        let (found, tried) = against(&range, Some(13), 17);
        assert_eq!(tried, [14, 15, 17, 21, 19, 18]);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(17), Some(18)));
        let (found, tried) = against(&range, Some(13), 13);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(13), Some(14), vec![14]));
        let (found, tried) = against(&range, Some(512), 600);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(512), None, vec![]));
    }

    #[test]
    fn a_failed_run_ends_the_search() {
        let range = Values::Range { lo: 1, hi: 64 };
        let err = search(&range, None, |v| if v < 8 { Ok(true) } else { Err(format!("failed at {v}")) });
        assert_eq!(err, Err("failed at 8".to_string()));
    }
}

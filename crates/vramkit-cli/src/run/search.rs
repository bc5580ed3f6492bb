//! The search for the largest value that fits: grow until a run runs out of memory, then bisect,
//! guided by the peaks measured.
//!
//! Memory is taken to grow with the value, so one value that fits and the next that does not end
//! the search. Growth doubles the value from `lo` for a range (1, 2, 4, ... or 8, 16, 32, ...) and
//! the index through a list (1st, 2nd, 4th, 8th, ...). Peak reserved grows about linearly with a
//! batch, so the line through the smallest and the largest value that fit predicts the edge: the bisection
//! tries the predicted value first (and, when the guess was close, its neighbour), for at most
//! [`GUIDED_STEPS`] steps, then halves. A search from a value known to fit (the next search,
//! under other settings) starts at the edge the given slope predicts, else just above it.

use super::batch::Values;

/// Bisection steps that may follow the prediction before plain halving takes over.
const GUIDED_STEPS: u32 = 3;

/// One run of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub value: u64,
    /// Peak reserved bytes when it fits; `None` when it ran out of memory.
    pub peak: Option<u64>,
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

impl Found {
    /// Peak reserved bytes per unit of the value, from the smallest and the largest value that
    /// fit (near the edge the cache's rounding makes neighbours' peaks differ by more than the
    /// batch adds, so close pairs mislead).
    pub fn slope(&self) -> Option<f64> {
        let mut fits: Vec<(u64, u64)> = self.probes.iter().filter_map(|p| Some((p.value, p.peak?))).collect();
        fits.sort_unstable();
        let (&(v1, p1), &(v2, p2)) = (fits.first()?, fits.last()?);
        (v2 > v1 && p2 > p1).then(|| (p2 - p1) as f64 / (v2 - v1) as f64)
    }
}

/// Where a search starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Start {
    /// From the smallest value.
    Fresh,
    /// Above `value`, known to fit with `peak` reserved bytes; `slope` as [`Found::slope`].
    Above { value: u64, peak: u64, slope: Option<f64> },
}

/// Searches `values` for the largest that fits in `capacity` bytes. `run` runs the program at a
/// value: its peak reserved bytes if it fits, `None` if it ran out; its error ends the search.
pub fn search<E>(values: &Values, capacity: u64, start: Start, mut run: impl FnMut(u64) -> Result<Option<u64>, E>) -> Result<Found, E> {
    let n = values.len();
    let mut found = Found::default();
    let (mut fit, mut oom) = (None, None);
    let mut given_slope = None;
    if let Start::Above { value, peak, slope } = start {
        fit = values.index_of(value);
        found.probes.push(Probe { value, peak: Some(peak) });
        given_slope = slope;
    }
    let mut probe = |i: u64, found: &mut Found| -> Result<bool, E> {
        let value = values.at(i);
        let peak = run(value)?;
        found.probes.push(Probe { value, peak });
        Ok(peak.is_some())
    };
    let predict = |found: &Found, lo: u64| -> Option<u64> {
        let slope = found.slope().or(given_slope)?;
        let peak = found.probes.iter().find(|p| p.value == values.at(lo))?.peak?;
        let value = values.at(lo) as f64 + capacity.saturating_sub(peak) as f64 / slope;
        Some(values.index_at_most(value.min(u64::MAX as f64) as u64))
    };

    // Growing, until a value runs out of memory or the largest fits.
    let mut step = 1;
    let mut next = match fit {
        None => Some(0),
        Some(i) => Some(predict(&found, i).map_or(i + 1, |p| p.max(i + 1)).min(n - 1)).filter(|_| i + 1 < n),
    };
    while let Some(i) = next {
        if !probe(i, &mut found)? {
            oom = Some(i);
            break;
        }
        fit = Some(i);
        let grown = match values {
            Values::Range { .. } if start == Start::Fresh => values.index_at_most(values.at(i).saturating_mul(2)),
            _ => {
                step *= 2;
                i.saturating_add(step / 2)
            }
        };
        // The last doubling may overshoot the edge the peaks predict: try the prediction then.
        let grown = predict(&found, i).map_or(grown, |p| grown.min(p.max(i + 1))).min(n - 1);
        next = (grown > i).then_some(grown);
    }

    // Bisection, guided while the prediction keeps falling inside the bracket.
    let mut guided = 0;
    while let (Some(lo), Some(hi)) = (fit, oom) {
        if hi - lo <= 1 {
            break;
        }
        let half = lo + (hi - lo) / 2;
        let guess = predict(&found, lo).map(|p| p.clamp(lo + 1, hi - 1));
        let mid = match guess {
            Some(g) if guided < GUIDED_STEPS => {
                guided += 1;
                g
            }
            _ => half,
        };
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

    const GIB: u64 = 1 << 30;

    /// A program reserving `base + per * value` bytes, on a card of `capacity`: the search's
    /// result and the values it ran.
    fn linear(values: &Values, start: Start, base: u64, per: u64, capacity: u64) -> (Found, Vec<u64>) {
        let found = search(values, capacity, start, |v| {
            let peak = base + per * v;
            Ok::<Option<u64>, ()>((peak <= capacity).then_some(peak))
        })
        .unwrap();
        let tried = found.probes.iter().filter(|p| Some(p.value) != start_value(start)).map(|p| p.value).collect();
        (found, tried)
    }

    fn start_value(start: Start) -> Option<u64> {
        match start {
            Start::Fresh => None,
            Start::Above { value, .. } => Some(value),
        }
    }

    #[test]
    fn a_range_doubles_then_the_prediction_finds_the_edge() {
        // 2 GiB + 1.2 GiB per sample on 79 GiB: the edge is 64.
        let range = Values::Range { lo: 1, hi: 512 };
        let (found, tried) = linear(&range, Start::Fresh, 2 * GIB, 6 * GIB / 5, 79 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(64), Some(65)));
        assert_eq!(tried, [1, 2, 4, 8, 16, 32, 64, 65]);
        let (found, tried) = linear(&Values::Range { lo: 8, hi: 100 }, Start::Fresh, GIB, GIB, 71 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(70), Some(71)));
        assert_eq!(tried, [8, 16, 32, 64, 70, 71]);
    }

    #[test]
    fn without_a_usable_prediction_it_bisects() {
        // Flat peaks say nothing about the edge, which the program sets at 13.
        let found = search(&Values::Range { lo: 1, hi: 512 }, 100, Start::Fresh, |v| Ok::<_, ()>((v <= 13).then_some(50))).unwrap();
        let tried: Vec<u64> = found.probes.iter().map(|p| p.value).collect();
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(13), Some(14)));
        assert_eq!(tried, [1, 2, 4, 8, 16, 12, 14, 13]);
    }

    #[test]
    fn a_wrong_prediction_costs_at_most_a_few_runs() {
        // Linear up to 40, then a cliff: the line predicts far beyond the real edge.
        let found = search(&Values::Range { lo: 1, hi: 1024 }, 1000, Start::Fresh, |v| Ok::<_, ()>((v <= 40).then_some(v))).unwrap();
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(40), Some(41)));
        assert!(found.probes.len() <= 7 + 10 + GUIDED_STEPS as usize, "{:?}", found.probes);
    }

    #[test]
    fn the_ends_of_a_range() {
        let range = Values::Range { lo: 4, hi: 20 };
        let (found, tried) = linear(&range, Start::Fresh, 10 * GIB, GIB, 12 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (None, Some(4), vec![4]));
        let (found, tried) = linear(&range, Start::Fresh, 0, GIB, 50 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(20), None, vec![4, 8, 16, 20]));
    }

    #[test]
    fn a_list_grows_by_index_then_bisects() {
        let list = Values::List(vec![2, 4, 6, 8, 12, 16, 24, 32, 48]);
        let (found, tried) = linear(&list, Start::Fresh, 0, GIB, 20 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom), (Some(16), Some(24)));
        assert_eq!(tried, [2, 4, 8, 16, 24]);
    }

    #[test]
    fn a_known_fit_and_slope_start_the_search_at_the_predicted_edge() {
        let range = Values::Range { lo: 1, hi: 512 };
        let above = Start::Above { value: 13, peak: 13 * GIB, slope: Some(GIB as f64) };
        let (found, tried) = linear(&range, above, 0, GIB, 17 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(17), Some(18), vec![17, 18]));
        let no_slope = Start::Above { value: 13, peak: 13 * GIB, slope: None };
        let (found, tried) = linear(&range, no_slope, 0, GIB, 13 * GIB);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(13), Some(14), vec![14]));
        let top = Start::Above { value: 512, peak: GIB, slope: None };
        let (found, tried) = linear(&range, top, 0, 1, 600);
        assert_eq!((found.largest_fit, found.smallest_oom, tried), (Some(512), None, vec![]));
    }

    #[test]
    fn a_failed_run_ends_the_search() {
        let range = Values::Range { lo: 1, hi: 64 };
        let err = search(&range, 100, Start::Fresh, |v| if v < 8 { Ok(Some(v)) } else { Err(format!("failed at {v}")) });
        assert_eq!(err, Err("failed at 8".to_string()));
    }
}

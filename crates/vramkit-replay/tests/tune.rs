//! `tune` with only the rows shown exact (`TuneOptions::shown`), and with
//! candidates that replay alike run once: the same rows, winner and lower
//! bound as every candidate replayed to the end, each on its own.

use vramkit_core::AllocatorConfig;
use vramkit_replay::synthetic::{record, Workload};
use vramkit_replay::{tune, DeviceTrace, Exact, Outcome, PreparedTrace, TuneInput, TuneOptions, TuneResult};

fn tuned(prepared: &PreparedTrace<'_>, exact: Exact) -> TuneResult {
    let input = TuneInput { label: "t".into(), prepared, capacity_bytes: None };
    let report = tune(std::slice::from_ref(&input), &TuneOptions { max_candidates: None, exact, timeline_points: 0 }, &|| ()).unwrap();
    report.results.into_iter().next().unwrap()
}

/// The rows `shown` shows, the recommendation and the lower bound are the full search's.
fn check_rows(prepared: &PreparedTrace<'_>, name: &str) -> usize {
    let full = tuned(prepared, Exact::All);
    assert!(full.candidates.iter().all(|o| o.stopped_at.is_none()), "{name}");
    let mut stopped = 0;
    for shown in [1, 3, 20] {
        let part = tuned(prepared, Exact::Rows(shown));
        assert_eq!(part.candidates.len(), full.candidates.len(), "{name} {shown}");
        assert_eq!(part.candidates[..shown.min(full.candidates.len())], full.candidates[..shown.min(full.candidates.len())], "{name} {shown}");
        assert_eq!(part.recorded, full.recorded, "{name} {shown}");
        assert_eq!((&part.recommended, &part.best), (&full.recommended, &full.best), "{name} {shown}");
        assert_eq!(part.lower_bound_bytes, full.lower_bound_bytes, "{name} {shown}");
        assert_eq!(part.table(shown), full.table(shown), "{name} {shown}");
        // Stopped candidates rank after every finished one, below their own final figures.
        for o in part.candidates.iter().filter(|o| o.stopped_at.is_some()) {
            let f = full.candidates.iter().find(|f| f.conf == o.conf).unwrap();
            assert!(o.rank > shown && f.rank > shown, "{name} {shown} {}", o.conf);
            assert!(o.peak_reserved_bytes <= f.peak_reserved_bytes && o.device_calls <= f.device_calls, "{name} {}", o.conf);
        }
        stopped += part.candidates.iter().filter(|o| o.stopped_at.is_some()).count();
    }
    // What doctor says: the best and the recorded settings' figures.
    let best = tuned(prepared, Exact::Best);
    assert_eq!((&best.recommended, &best.best), (&full.recommended, &full.best), "{name} best");
    let recorded_figures = |o: &Outcome| (o.conf.clone(), o.peak_reserved_bytes, o.device_calls, o.oom, o.lower_bound_bytes, o.stopped_at);
    assert_eq!(recorded_figures(&best.recorded), recorded_figures(&full.recorded), "{name} best");
    assert_eq!((best.lower_bound_bytes, best.saving_bytes, best.candidates.len()), (full.lower_bound_bytes, full.saving_bytes, full.candidates.len()), "{name} best");
    stopped
}

#[test]
fn the_rows_shown_are_the_full_searchs_on_the_shipped_trace() {
    crate::without_invariant_checks();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle");
    let file = vramkit_trace::read_trace_file(path).unwrap();
    let recorded = file.recorded_config(None);
    for trace in DeviceTrace::split_file(file).iter().filter(|t| t.has_allocations()) {
        let prepared = PreparedTrace::new(trace, recorded.clone(), None).unwrap();
        check_rows(&prepared, path);
    }
}

/// A synthetic trace of `events` entries, recorded under PyTorch's defaults.
fn synthetic(events: usize) -> DeviceTrace {
    crate::without_invariant_checks();
    DeviceTrace::split(&record(&Workload::new(events))).swap_remove(0)
}

#[test]
fn the_rows_shown_are_the_full_searchs_where_replays_stop() {
    let trace = synthetic(60_000);
    let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), None).unwrap();
    assert!(check_rows(&prepared, "synthetic") > 0, "some replay stops early");
}

#[test]
fn candidates_that_replay_alike_have_the_figures_of_their_own_replays() {
    let trace = synthetic(30_000);
    let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), None).unwrap();
    let full = tuned(&prepared, Exact::All);
    // The list form rounding only above 256 MiB rounds nothing this trace asks for.
    let alike = full.candidates.iter().filter(|o| o.conf.contains("roundup_power2_divisions:[256:1")).collect::<Vec<_>>();
    assert!(!alike.is_empty());
    for o in alike.into_iter().chain(full.candidates.iter().take(3)) {
        let m = prepared.model_replay(&AllocatorConfig::parse(&o.conf).unwrap(), None, 0).unwrap();
        assert_eq!(
            (o.peak_reserved_bytes, o.peak_allocated_bytes, o.device_mallocs, o.device_frees, o.lower_bound_bytes),
            (m.peak_reserved_bytes, m.peak_allocated_bytes, m.device_mallocs, m.device_frees, m.lower_bound_bytes),
            "{}",
            o.conf
        );
    }
}

#[test]
fn candidates_a_watching_replay_stands_for_have_the_figures_of_their_own_replays() {
    let trace = synthetic(30_000);
    let prepared = PreparedTrace::new(&trace, AllocatorConfig::pytorch_default(), None).unwrap();
    for exact in [Exact::All, Exact::Rows(20)] {
        let tuned = tuned(&prepared, exact);
        let limited: Vec<&Outcome> =
            tuned.candidates.iter().filter(|o| o.conf.contains("max_split_size_mb") && o.stopped_at.is_none()).collect();
        assert!(limited.len() >= 3, "{exact:?}");
        for o in limited {
            let m = prepared.model_replay(&AllocatorConfig::parse(&o.conf).unwrap(), None, 0).unwrap();
            assert_eq!(
                (o.peak_reserved_bytes, o.peak_allocated_bytes, o.device_mallocs, o.device_frees, o.oom_count, o.lower_bound_bytes),
                (m.peak_reserved_bytes, m.peak_allocated_bytes, m.device_mallocs, m.device_frees, m.oom_count, m.lower_bound_bytes),
                "{exact:?} {}",
                o.conf
            );
        }
    }
}

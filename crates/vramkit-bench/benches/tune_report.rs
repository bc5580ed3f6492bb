//! Wall times of `tune` and `report` (a timed binary: one run of the
//! report on millions of entries takes seconds, too long for criterion's
//! sampling).
//!
//! `cargo bench -p vramkit-bench --bench tune_report`
//!
//! - tune: 64 candidate settings on the largest shared trace
//!   (`cs336_bcrafton__memory_snapshot.pickle`, 6,486 entries) against a
//!   4 GiB capacity (so garbage-collection candidates are among them);
//!   median of 5 runs, rayon over every core.
//! - report: a synthetic trace of 5,000,000 entries (`VRAMKIT_BENCH_EVENTS`
//!   changes it) recorded from vramkit's own allocator: tune with every
//!   setting (`VRAMKIT_BENCH_REPORT_CANDIDATES` limits them) as `vramkit
//!   doctor` runs it (the best and the recorded settings exact), as
//!   `vramkit tune` runs it (the table's 20 rows exact) and as `vramkit
//!   report` runs it (the same, keeping the timelines of the replays that
//!   run to the end), the doctor, the page's replays the tune did not
//!   draw, and the HTML, each phase timed once.
//!
//! The CLI end to end on the same trace:
//! `cargo run --release -p vramkit-bench --example synthetic_trace -- 5000000 /tmp/synthetic.pickle`
//! then `vramkit report /tmp/synthetic.pickle -o report.html`.

use std::time::{Duration, Instant};
use vramkit_core::AllocatorConfig;
use vramkit_replay::doctor::diagnose;
use vramkit_replay::report::{build, ReportInput, TIMELINE_POINTS};
use vramkit_replay::synthetic::{record, Workload};
use vramkit_replay::tune::TABLE_ROWS;
use vramkit_replay::{tune, DeviceTrace, Exact, PreparedTrace, TuneInput, TuneOptions};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    let d = t.elapsed();
    println!("  {what:<62} {:>9.3} s", d.as_secs_f64());
    (out, d)
}

fn bench_tune() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/traces/pytorch_snapshots/cs336_bcrafton__memory_snapshot.pickle");
    let file = vramkit_trace::read_snapshot(path).expect("the shared trace");
    let recorded = file.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
    let trace = DeviceTrace::split(&file.snapshot).into_iter().next().expect("device 0");
    let prepared = PreparedTrace::new(&trace, recorded, None).expect("prepares");
    let input = TuneInput { label: "cs336_bcrafton".into(), prepared: &prepared, capacity_bytes: Some(4 << 30) };
    let options = TuneOptions { max_candidates: Some(64), exact: Exact::All, timeline_points: 0 };
    let count = vramkit_replay::tune::candidates(std::slice::from_ref(&input), &options).len();
    println!(
        "tune: {count} settings x {} entries (cs336_bcrafton, capacity 4 GiB), {} threads",
        trace.events.len(),
        rayon::current_num_threads()
    );
    let mut times = Vec::new();
    for run in 0..5 {
        let (report, d) = timed(&format!("run {run}"), || tune(std::slice::from_ref(&input), &options, &|| ()).expect("tune"));
        assert_eq!(report.results[0].candidates.len(), count);
        times.push(d);
    }
    times.sort();
    println!("  median {:.3} s ({:.2} ms per setting)", times[2].as_secs_f64(), times[2].as_secs_f64() * 1e3 / count as f64);
}

fn bench_report() {
    let events = env("VRAMKIT_BENCH_EVENTS", 5_000_000);
    let candidates = std::env::var("VRAMKIT_BENCH_REPORT_CANDIDATES").ok().and_then(|v| v.parse().ok());
    println!("report: synthetic trace of {events} entries, tune with {} settings", candidates.map_or("all".to_string(), |c: usize| c.to_string()));
    let (snapshot, _) = timed("record the synthetic trace (setup, not report)", || record(&Workload::new(events)));
    let start = Instant::now();
    let (traces, _) = timed("split by device", || DeviceTrace::split(&snapshot));
    let recorded = AllocatorConfig::pytorch_default();
    let (prepared, _) = timed("prepare (rebuild the window's start)", || PreparedTrace::new(&traces[0], recorded, None).expect("prepares"));
    let prepared_at = start.elapsed();
    let input = TuneInput { label: "synthetic".into(), prepared: &prepared, capacity_bytes: None };
    let tune_with = |exact: Exact, timeline_points: usize| {
        tune(std::slice::from_ref(&input), &TuneOptions { max_candidates: candidates, exact, timeline_points }, &|| ()).expect("tune")
    };
    timed("tune as `vramkit doctor` runs it (best and recorded exact)", || tune_with(Exact::Best, 0));
    timed(&format!("tune as `vramkit tune` runs it ({TABLE_ROWS} rows exact)"), || tune_with(Exact::Rows(TABLE_ROWS), 0));
    // `vramkit report`: the same tune, keeping the timelines of the replays that run to the end.
    let report_start = Instant::now();
    let (tuned, _) = timed("tune as `vramkit report` runs it (timelines kept)", || tune_with(Exact::Rows(TABLE_ROWS), TIMELINE_POINTS));
    let t = &tuned.results[0];
    let (diagnosis, _) = timed("doctor", || diagnose(&prepared, Some(t)).expect("doctor"));
    let (report, _) = timed("the page's replays not drawn by the tune, sites at the peak", || {
        build(&ReportInput {
            label: "synthetic".into(),
            prepared: &prepared,
            capacity_bytes: None,
            tune: Some(t),
            diagnosis: &diagnosis,
        })
        .expect("report")
    });
    let (html, _) = timed("render HTML", || report.to_html());
    println!(
        "  report from the split trace: {:.3} s (prepare, its tune, doctor, page); page {} KiB; recorded peak {} -> recommended {} ({})",
        (prepared_at + report_start.elapsed()).as_secs_f64(),
        html.len() / 1024,
        vramkit_core::format_size(t.recorded.peak_reserved_bytes),
        vramkit_core::format_size(t.best.peak_reserved_bytes),
        t.recommended
    );
    if let Ok(path) = std::env::var("VRAMKIT_BENCH_REPORT_HTML") {
        std::fs::write(&path, html).expect("write the page");
        println!("  wrote {path}");
    }
}

fn main() {
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if only.as_deref().is_none_or(|o| "tune".contains(o)) {
        bench_tune();
    }
    if only.as_deref().is_none_or(|o| "report".contains(o)) {
        bench_report();
    }
}

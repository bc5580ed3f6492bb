//! Every phase of the analysis of one long trace, from the pickle on disk:
//! read it by column, prepare it (window start, release runs, block
//! numbers), judge its reading, replay it under the recorded settings
//! (model and oracle), verify it, tune it over every candidate, diagnose
//! and report it. A timed binary: each phase runs once, too long for
//! criterion's sampling. Same-run baseline: CPython's `pickle.load` of the
//! same file.
//!
//! `cargo bench -p vramkit-bench --bench prepared` (a 5,000,000-entry
//! synthetic trace, written to `target/` the first time), or with
//! `VRAMKIT_BENCH_TRACE=/path/to/snapshot.pickle`; `VRAMKIT_BENCH_SKIP`
//! names phases to leave out (`tune,report,python`).
//!
//! The file is read once untimed first, so that reading it by column is
//! timed from the page cache, as CPython's `pickle.load` after it is: a
//! file the kernel dropped (after a long test run, or by its memory
//! monitor) would time the disk. Reading and the model replay run
//! `VRAMKIT_BENCH_ROUNDS` times (3 if unset), each round printed, and the
//! median is the figure.

use std::path::PathBuf;
use std::time::Instant;
use vramkit_replay::doctor::diagnose;
use vramkit_replay::report::{build, ReportInput};
use vramkit_replay::{DeviceTrace, PreparedTrace, TuneInput, TuneOptions};

/// The process's peak resident memory so far (`VmHWM`), in MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kb.unwrap_or(0.0) / 1e3
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    let s = t.elapsed().as_secs_f64();
    println!("  {what:<44} {s:>8.3} s   peak RSS {:>7.0} MB", peak_rss_mb());
    (out, s)
}

/// The trace to read: the given one, else a synthetic one (made once).
fn trace_path() -> PathBuf {
    if let Ok(path) = std::env::var("VRAMKIT_BENCH_TRACE") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/synthetic_5000000.pickle");
    if !path.exists() {
        let out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create the trace"));
        let mut pickle = vramkit_trace::PickleStream::new(out).expect("start");
        let segments = vramkit_replay::synthetic::stream(&vramkit_replay::synthetic::Workload::new(5_000_000), |e| pickle.entry(e).expect("write"));
        std::io::Write::flush(&mut pickle.finish(segments).expect("write")).expect("write");
    }
    path
}

/// CPython's `pickle.load` of the file, timed by itself: (seconds, peak RSS in MB).
fn cpython_load(path: &std::path::Path) -> Option<(f64, f64)> {
    let script = "import pickle, resource, sys, time\n\
                  t = time.perf_counter()\n\
                  with open(sys.argv[1], 'rb') as f: pickle.load(f)\n\
                  print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)";
    let out = std::process::Command::new("python3").args(["-c", script]).arg(path).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut figures = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some((figures.next()??, figures.next()??))
}

/// Reads the file through a small buffer and drops it: its pages in the
/// page cache, the process's memory as it was.
fn warm(path: &std::path::Path) {
    let mut file = std::fs::File::open(path).expect("the trace");
    std::io::copy(&mut file, &mut std::io::sink()).expect("reads");
}

/// The median of some timings (the upper one of the middle two).
fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

/// Runs `f` `rounds` times (each timed and printed as round k), keeping
/// the last result: it, the median of the rounds' seconds, and the peak
/// resident memory after the first round (later rounds find the heap
/// the earlier ones left, so only the first is the figure).
fn rounds<T>(what: &str, rounds: usize, mut f: impl FnMut() -> T) -> (T, f64, f64) {
    let (mut times, mut first_peak) = (Vec::new(), 0.0);
    let mut out = None;
    for k in 1..=rounds {
        // The previous round's result dropped first: one held at a time.
        drop(out.take());
        let (o, s) = timed(&format!("{what}, round {k}"), &mut f);
        if k == 1 {
            first_peak = peak_rss_mb();
        }
        out = Some(o);
        times.push(s);
    }
    (out.expect("at least one round"), median(times), first_peak)
}

fn main() {
    let skip = std::env::var("VRAMKIT_BENCH_SKIP").unwrap_or_default();
    let n = std::env::var("VRAMKIT_BENCH_ROUNDS").ok().and_then(|r| r.parse::<usize>().ok()).unwrap_or(3).max(1);
    let path = trace_path();
    let bytes = std::fs::metadata(&path).expect("the trace").len() as f64;
    println!("{} ({:.0} MB), {} threads, {n} rounds", path.display(), bytes / 1e6, rayon::current_num_threads());
    warm(&path);
    let (file, parse, peak) = rounds("read by column (streamed)", n, || vramkit_trace::read_trace_file(&path).expect("reads"));
    println!("    median {:.3} s, {:.0} MB/s; peak (round 1) {:.2}x the file", parse, bytes / 1e6 / parse, peak * 1e6 / bytes);
    let recorded = file.recorded_config(None);
    let trace = DeviceTrace::split_file(file).into_iter().find(DeviceTrace::has_allocations).expect("a trace");
    let events = trace.events.len() as f64;
    println!("    {events} entries, {:.0} MB of columns", trace.events.heap_bytes() as f64 / 1e6);
    let (prepared, _) = timed("prepare", || PreparedTrace::new(&trace, recorded.clone(), None).expect("prepares"));
    timed("judge the reading (a recorded-settings replay)", || prepared.reading().map(|_| ()).expect("judges"));
    let (_, replay, _) = rounds("model replay, recorded settings", n, || prepared.model_replay(&recorded, None, 0).expect("replays"));
    println!("    median {:.3} s, {:.1} M events/s", replay, events / 1e6 / replay);
    let (_, oracle) = timed("oracle replay", || prepared.oracle_replay(0));
    println!("    {:.1} M events/s", events / 1e6 / oracle);
    timed("verify", || assert!(PreparedTrace::new(&trace, recorded.clone(), None).and_then(|p| p.verify()).expect("verifies").passed()));
    if !skip.contains("tune") {
        let input = TuneInput { label: "trace".into(), prepared: &prepared, capacity_bytes: None };
        let count = vramkit_replay::tune::candidates(std::slice::from_ref(&input), &TuneOptions::default()).len();
        let (tuned, tune) = timed(&format!("tune, all {count} candidates"), || {
            vramkit_replay::tune(std::slice::from_ref(&input), &TuneOptions::default(), &|| ()).expect("tunes")
        });
        println!("    {:.1} M events/s over {} threads", events * count as f64 / 1e6 / tune, rayon::current_num_threads());
        let t = &tuned.results[0];
        let (diagnosis, _) = timed("doctor (after the tune)", || diagnose(&prepared, Some(t)).expect("diagnoses"));
        if !skip.contains("report") {
            timed("report: two replays with timelines, the page", || {
                let input = ReportInput { label: "trace".into(), prepared: &prepared, capacity_bytes: None, tune: Some(t), diagnosis: &diagnosis };
                build(&input).expect("reports").to_html().len()
            });
        }
    }
    if !skip.contains("python") {
        match cpython_load(&path) {
            Some((s, mb)) => println!("  CPython pickle.load, same file: {s:.3} s ({:.0} MB/s), peak RSS {mb:.0} MB", bytes / 1e6 / s),
            None => println!("  CPython pickle.load: no python3"),
        }
    }
}

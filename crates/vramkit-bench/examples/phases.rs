//! Times each phase of the analysis of one snapshot file.
use std::time::Instant;
use vramkit_replay::{tune, DeviceTrace, Exact, PreparedTrace, TuneInput, TuneOptions};

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    println!("  {what:<40} {:>9.3} s", t.elapsed().as_secs_f64());
    out
}

fn main() {
    let path = std::env::args().nth(1).expect("a snapshot");
    let file = if std::env::var("FROM_BYTES").is_ok() {
        let bytes = timed("read bytes", || std::fs::read(&path).unwrap());
        timed("parse bytes (trace file)", || vramkit_trace::read_trace_file_bytes(&bytes).unwrap())
    } else {
        timed("read + parse, streaming (trace file)", || vramkit_trace::read_trace_file(&path).unwrap())
    };
    if std::env::var("PARSE_ONLY").is_ok() {
        return;
    }
    let recorded = file.recorded_config(None);
    let traces = timed("split", || DeviceTrace::split_file(file));
    let trace = traces.into_iter().find(DeviceTrace::has_allocations).unwrap();
    println!("  {} events", trace.events.len());
    let prepared = timed("prepare", || PreparedTrace::new(&trace, recorded.clone(), None).unwrap());
    timed("reading", || prepared.reading().map(|_| ()).unwrap());
    let n: usize = std::env::var("REPLAYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    // CONF=...: the model replays run under these settings instead of the recorded ones.
    let (config, name) = match std::env::var("CONF") {
        Ok(conf) => (vramkit_core::AllocatorConfig::parse(&conf).expect("CONF: a PYTORCH_CUDA_ALLOC_CONF"), conf),
        Err(_) => (recorded.clone(), "recorded".to_string()),
    };
    for _ in 0..n {
        let t = Instant::now();
        prepared.model_replay(&config, None, 0).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!("  model replay ({name}) {s:>9.3} s  {:.2} M events/s", trace.events.len() as f64 / 1e6 / s);
    }
    if std::env::var("REPLAYS").is_err() {
        timed("oracle replay", || prepared.oracle_replay(0));
    }
    if let Ok(exact) = std::env::var("TUNE") {
        // TUNE=all, TUNE=best (what doctor needs) or TUNE=20: the first 20 rows exact (what `vramkit tune` shows).
        let input = TuneInput { label: path.clone(), prepared: &prepared, capacity_bytes: None };
        let exact = match exact.as_str() {
            "best" => Exact::Best,
            rows => rows.parse().map_or(Exact::All, Exact::Rows),
        };
        let options = TuneOptions { max_candidates: None, exact, timeline_points: 0 };
        let report = timed(&format!("tune ({exact:?})"), || tune(std::slice::from_ref(&input), &options, &|| ()).unwrap());
        let r = &report.results[0];
        let stopped: Vec<u64> = r.candidates.iter().filter_map(|o| o.stopped_at).collect();
        println!(
            "  {} candidates, {} stopped (on average at {:.1}% of the trace, at most at {:.1}%); recommended {:?}",
            r.candidates.len(),
            stopped.len(),
            100.0 * stopped.iter().sum::<u64>() as f64 / (stopped.len().max(1) as f64 * r.events as f64),
            100.0 * stopped.iter().max().copied().unwrap_or(0) as f64 / r.events as f64,
            r.recommended
        );
    }
    if std::env::args().any(|a| a == "--verify") {
        timed("verify", || prepared.verify().unwrap());
    }
}

//! Writes a synthetic snapshot of any length, to time the CLI end to end.
//! A pickle is streamed out as the workload runs (a 50-million-entry trace
//! is never held); JSON, for small traces, is written whole.
//!
//! `cargo run --release -p vramkit-bench --example synthetic_trace -- 5000000 /tmp/synthetic.pickle`

use std::io::Write;
use vramkit_replay::synthetic::{record, stream, Workload};

fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000_000);
    let path = args.next().unwrap_or_else(|| "synthetic.pickle".to_string());
    let out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create the output"));
    let workload = Workload::new(events);
    if path.ends_with(".json") {
        let file = vramkit_trace::SnapshotFile::from_snapshot(record(&workload));
        vramkit_trace::write_json(&file, out).expect("write");
    } else {
        let mut pickle = vramkit_trace::PickleStream::new(out).expect("start");
        let segments = stream(&workload, |e| pickle.entry(e).expect("write"));
        pickle.finish(segments).expect("write").flush().expect("write");
    }
    println!("wrote {path}: {events} trace entries");
}

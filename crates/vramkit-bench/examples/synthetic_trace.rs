//! Writes a synthetic snapshot of any length, to time the CLI end to end.
//!
//! `cargo run --release -p vramkit-bench --example synthetic_trace -- 5000000 /tmp/synthetic.pickle`

use vramkit_replay::synthetic::{record, Workload};

fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000_000);
    let path = args.next().unwrap_or_else(|| "synthetic.pickle".to_string());
    let file = vramkit_trace::SnapshotFile::from_snapshot(record(&Workload::new(events)));
    let out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create the output"));
    if path.ends_with(".json") {
        vramkit_trace::write_json(&file, out).expect("write");
    } else {
        vramkit_trace::write_pickle(&file, out).expect("write");
    }
    println!("wrote {path}: {events} trace entries");
}

//! Running a program on PyTorch's allocator and reading what it reported.

use crate::build::Harness;
use crate::program::{Op, Program};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// The fake device's memory when [`Setup::capacity`] does not say: 80 GiB
/// (`FAKECUDA_TOTAL`'s default in `c/cudart.c`).
pub const DEFAULT_CAPACITY: u64 = 80 << 30;

/// How the fake device and PyTorch are set up for one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Setup {
    /// `PYTORCH_CUDA_ALLOC_CONF` (unset when `None`).
    pub conf: Option<String>,
    /// The device's memory in bytes (`cudaMalloc` refuses past it);
    /// [`DEFAULT_CAPACITY`] when `None`.
    pub capacity: Option<u64>,
    /// Recorded events stay pending until the program completes them
    /// (`c`), so `record_stream` frees are deferred as on a busy GPU.
    pub manual_events: bool,
    /// Do not record history (for timing).
    pub no_history: bool,
}

/// What PyTorch reported for one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The text of each `OutOfMemoryError`, with the program line (1-based) that raised it.
    pub ooms: Vec<(usize, String)>,
    /// `memory_stats()` at each `p`, with its line.
    pub stats: Vec<(usize, BTreeMap<String, i64>)>,
    /// Each `t`: (line, bytes, nanoseconds per malloc+free pair).
    pub pairs: Vec<(usize, u64, f64)>,
    /// Errors PyTorch raised other than out-of-memory, with their lines.
    pub errors: Vec<(usize, String)>,
    /// Each side stream the program used: (its number, PyTorch's `cudaStream_t` value).
    pub streams: Vec<(u32, i64)>,
    /// The snapshot (JSON) of a [`Harness::record`], written after the last operation.
    pub snapshot: Option<String>,
}

impl Harness {
    /// Runs `program` under `setup` and reads what the harness reported.
    /// `Err` when the harness could not run or died (the fake runtime aborts
    /// on misuse), with its stderr.
    pub fn run(&self, program: &Program, setup: &Setup) -> Result<Outcome, String> {
        let mut command = Command::new(self.executable());
        command
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .env_remove("PYTORCH_ALLOC_CONF")
            .env_remove("FAKECUDA_TOTAL")
            .env_remove("FAKECUDA_EVENTS")
            .env("LD_LIBRARY_PATH", self.runtime_dir())
            .env("TORCH_CPP_LOG_LEVEL", "ERROR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(conf) = &setup.conf {
            command.env("PYTORCH_CUDA_ALLOC_CONF", conf);
        }
        if let Some(capacity) = setup.capacity {
            command.env("FAKECUDA_TOTAL", capacity.to_string());
        }
        if setup.manual_events {
            command.env("FAKECUDA_EVENTS", "manual");
        }
        if setup.no_history {
            command.env("VK_HISTORY", "0");
        }
        let mut child = command.spawn().map_err(|e| format!("cannot run {}: {e}", self.executable().display()))?;
        let text = program.to_string();
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
        let out = child.wait_with_output().map_err(|e| format!("harness: {e}"))?;
        let _ = writer.join();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let kept = std::env::temp_dir().join(format!("vramkit-harness-failed-{}.txt", std::process::id()));
            let _ = std::fs::write(&kept, program.to_string());
            return Err(format!(
                "the harness ({}) failed with {} under {setup:?} on the program kept in {}:\n{}",
                self.release(),
                out.status,
                kept.display(),
                tail(&stderr)
            ));
        }
        parse(&String::from_utf8_lossy(&out.stdout))
    }

    /// Runs `program` and takes the snapshot at its end (with the whole trace).
    pub fn record(&self, program: &Program, setup: &Setup) -> Result<Outcome, String> {
        let path = std::env::temp_dir().join(format!(
            "vramkit-harness-{}-{}.json",
            std::process::id(),
            SNAPSHOTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut program = program.clone();
        program.ops.push(Op::Snapshot(path.display().to_string()));
        let mut outcome = self.run(&program, setup)?;
        let json = std::fs::read_to_string(&path).map_err(|e| format!("the harness wrote no snapshot {}: {e}", path.display()));
        let _ = std::fs::remove_file(&path);
        outcome.snapshot = Some(json?);
        Ok(outcome)
    }
}

static SNAPSHOTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn parse(stdout: &str) -> Result<Outcome, String> {
    let mut outcome = Outcome::default();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("the harness printed {line:?}, not JSON: {e}"))?;
        let at = v["line"].as_u64().unwrap_or(0) as usize;
        if let Some(text) = v["oom"].as_str() {
            outcome.ooms.push((at, text.to_string()));
        } else if let Some(stats) = v["stats"].as_object() {
            let map = stats.iter().map(|(k, x)| (k.clone(), x.as_i64().unwrap_or(0))).collect();
            outcome.stats.push((at, map));
        } else if let Some(ns) = v["pair_ns"].as_f64() {
            outcome.pairs.push((at, v["size"].as_u64().unwrap_or(0), ns));
        } else if let (Some(i), Some(h)) = (v["stream"].as_u64(), v["handle"].as_i64()) {
            outcome.streams.push((i as u32, h));
        } else if let Some(e) = v["error"].as_str() {
            outcome.errors.push((at, e.to_string()));
        } else {
            return Err(format!("the harness printed an unknown line {line:?}"));
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_line_is_read() {
        let out = parse(
            "{\"line\": 3, \"oom\": \"CUDA out of memory.\"}\n{\"line\": 4, \"stats\": {\"num_ooms\": 1}}\n\
             {\"line\": 5, \"pair_ns\": 190.5, \"size\": 512, \"pairs\": 10}\n{\"line\": 6, \"error\": \"bad\"}\n",
        )
        .unwrap();
        assert_eq!(out.ooms, vec![(3, "CUDA out of memory.".to_string())]);
        assert_eq!(out.stats[0].1["num_ooms"], 1);
        assert_eq!(out.pairs, vec![(5, 512, 190.5)]);
        assert_eq!(out.errors, vec![(6, "bad".to_string())]);
        assert!(parse("hello\n").is_err());
    }
}

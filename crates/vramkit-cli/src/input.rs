//! Reading snapshots, parsing sizes, and the error type every command returns.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;
use crate::cli::RulesArgs;
use vramkit_core::{AllocatorConfig, PytorchRelease};
use vramkit_replay::{DeviceTrace, PreparedTrace};
use vramkit_trace::{SnapshotFile, TraceError, TraceFile};

/// A command's failure: one line for the user.
#[derive(Debug)]
pub struct CliError {
    message: String,
    broken_pipe: bool,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> CliError {
        CliError { message: message.into(), broken_pipe: false }
    }

    pub fn is_broken_pipe(&self) -> bool {
        self.broken_pipe
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        CliError { broken_pipe: e.kind() == std::io::ErrorKind::BrokenPipe, message: e.to_string() }
    }
}

/// Reads a snapshot file, with errors that name the file.
pub fn load(path: &Path) -> Result<SnapshotFile, CliError> {
    read_with(path, |p| vramkit_trace::read_snapshot(p))
}

/// Reads a snapshot file with its traces by column (what the analysis
/// commands read: a fraction of the memory), with errors that name the file.
pub fn load_traces(path: &Path) -> Result<TraceFile, CliError> {
    read_with(path, |p| vramkit_trace::read_trace_file(p))
}

fn read_with<T>(path: &Path, read: impl FnOnce(&Path) -> Result<T, TraceError>) -> Result<T, CliError> {
    if path.is_dir() {
        return Err(CliError::new(format!("{}: is a directory; pass a snapshot file (.pickle or .json)", path.display())));
    }
    let spinner = crate::progress::spinner(&format!("reading {}", path.display()));
    let file = read(path).map_err(|e| CliError::new(first_line(&e.to_string())));
    spinner.finish_and_clear();
    file
}

/// The device traces of a snapshot that hold allocation events, or an
/// error that says how to record some.
pub fn traces_with_events(traces: Vec<DeviceTrace>, path: &Path, what: &str) -> Result<Vec<DeviceTrace>, CliError> {
    let devices: Vec<DeviceTrace> = traces.into_iter().filter(DeviceTrace::has_allocations).collect();
    if devices.is_empty() {
        return Err(CliError::new(format!(
            "{}: the snapshot has no allocation events to {what} (record it with torch.cuda.memory._record_memory_history(enabled=\"all\")); `vramkit doctor` and `vramkit summary` read state-only snapshots",
            path.display()
        )));
    }
    Ok(devices)
}

/// `trace` (borrowed or kept) prepared for replays under its recorded
/// settings, its window's start rebuilt once, with errors that name the file.
pub fn prepare<'t>(trace: impl Into<Cow<'t, DeviceTrace>>, recorded: &AllocatorConfig, path: &Path) -> Result<PreparedTrace<'t>, CliError> {
    PreparedTrace::new(trace, recorded.clone(), None).map_err(|e| CliError::new(format!("{}: {e}", path.display())))
}

/// The capacity a replay of `prepared` runs against: `given`, else what
/// the trace implies (refusals or an out-of-memory error), else unlimited;
/// and which of the three it is.
pub fn capacity_for(prepared: &PreparedTrace<'_>, given: Option<u64>) -> (Option<u64>, &'static str) {
    if given.is_some() {
        return (given, "given");
    }
    match prepared.inferred_capacity() {
        Some(c) => (Some(c), "inferred from the trace"),
        None => (None, "unlimited"),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// The settings a snapshot was recorded with (PyTorch's defaults if it
/// does not say), under the allocator rules of the release `--pytorch`
/// names, else of the newest release the file may come from.
pub fn recorded_config(file: &TraceFile, rules: &RulesArgs) -> Result<AllocatorConfig, CliError> {
    Ok(file.recorded_config(given_release(rules)?))
}

/// The release `--pytorch` names, checked.
pub fn given_release(rules: &RulesArgs) -> Result<Option<PytorchRelease>, CliError> {
    let Some(text) = &rules.pytorch else { return Ok(None) };
    let release = PytorchRelease::parse(text).map_err(|e| CliError::new(format!("--pytorch {e}")))?;
    if release < PytorchRelease::OLDEST || release > PytorchRelease::NEWEST {
        eprintln!(
            "note: vramkit knows the allocator rules of torch {} to {}; following the closest, {}",
            PytorchRelease::OLDEST,
            PytorchRelease::NEWEST,
            if release < PytorchRelease::OLDEST { PytorchRelease::OLDEST } else { PytorchRelease::NEWEST }
        );
    }
    Ok(Some(release))
}

/// `24GiB`, `512MiB`, `1.5GB`, `4096`: bytes. Binary units (KiB, MiB, GiB,
/// TiB) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000.
pub fn parse_size(text: &str) -> Result<u64, CliError> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(CliError::new(format!(
                "size {text:?}: unknown unit {unit:?}; use bytes or KiB, MiB, GiB, TiB (1024-based) or KB, MB, GB, TB (1000-based), e.g. 24GiB"
            )))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| CliError::new(format!("size {text:?}: expected a number then a unit, e.g. 24GiB or 512MiB")))?;
    let bytes = value * multiplier as f64;
    if !(0.0..1.8e19).contains(&bytes) {
        return Err(CliError::new(format!("size {text:?} is out of range")));
    }
    Ok(bytes as u64)
}

/// Prints a JSON value, one per device or wrapped as {"devices": [...]}.
pub fn print_devices(values: Vec<serde_json::Value>) -> Result<(), CliError> {
    let out = if values.len() == 1 {
        values.into_iter().next().expect("one")
    } else {
        serde_json::json!({ "devices": values })
    };
    let text = serde_json::to_string_pretty(&out).map_err(|e| CliError::new(e.to_string()))?;
    use std::io::Write;
    writeln!(std::io::stdout(), "{text}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert!(parse_size("12 parsecs").unwrap_err().to_string().contains("unknown unit"));
        assert!(parse_size("GiB").is_err());
    }
}

//! The snapshot-file tools: `vramkit.replay`, `verify`, `tune`, `doctor` and `report`.
//!
//! A file is read by [`read_snapshot`] into a [`SnapshotFile`] (the
//! snapshot and the settings it was recorded with); everything after that
//! is vramkit-replay, and returns JSON the Python side turns into dicts.
//!
//! [`read_snapshot`] uses vramkit-trace's reader (pickle of any protocol,
//! or JSON), which never executes anything from the file.

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{json, Value};
use std::fmt;
use std::path::{Path, PathBuf};
use vramkit_core::{AllocatorConfig, ConfigError, Snapshot};
use vramkit_replay::{model_replay, oracle_replay, verify, DeviceTrace, ModelOptions, PreparedTrace, ReplayError};

/// Timeline points a replay keeps per device (downsampled, peaks kept).
const TIMELINE_POINTS: usize = 1000;

/// A snapshot file, read.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotFile {
    /// Segments and per-device traces.
    pub snapshot: Snapshot,
    /// The settings the trace was recorded with (the file's
    /// `allocator_settings`); PyTorch's defaults when the file has none.
    pub recorded: AllocatorConfig,
}

/// Why a snapshot file tool failed.
#[derive(Debug)]
pub(crate) enum FileError {
    /// The settings string passed is not valid.
    Settings(ConfigError),
    /// The replay could not run.
    Replay { device: i64, error: ReplayError },
    /// The file could not be read as a snapshot.
    Read(String),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Settings(error) => write!(f, "{error}"),
            FileError::Replay { device, error } => write!(f, "device {device}: {error}"),
            FileError::Read(message) => f.write_str(message),
        }
    }
}

impl From<FileError> for PyErr {
    fn from(error: FileError) -> PyErr {
        match error {
            FileError::Settings(_) => PyValueError::new_err(error.to_string()),
            FileError::Replay { .. } => PyRuntimeError::new_err(error.to_string()),
            FileError::Read(_) => PyValueError::new_err(error.to_string()),
        }
    }
}

/// Reads a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`'s
/// pickle, or the same dict as JSON), with the settings it was recorded with.
pub(crate) fn read_snapshot(path: &Path) -> Result<SnapshotFile, FileError> {
    let file = vramkit_trace::read_snapshot(path).map_err(|e| FileError::Read(e.to_string()))?;
    let recorded = file.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
    Ok(SnapshotFile { snapshot: file.snapshot, recorded })
}

/// The settings to replay under: the recorded ones with the keys `conf`
/// names changed (vramkit's update semantics).
fn settings_for(recorded: &AllocatorConfig, conf: Option<&str>) -> Result<AllocatorConfig, FileError> {
    let mut config = recorded.clone();
    if let Some(conf) = conf {
        config.update(conf).map_err(FileError::Settings)?;
    }
    Ok(config)
}

/// Oracle replay (what happened) and model replay (what vramkit predicts
/// under `conf`, within `capacity_bytes`) of every device in `file`.
pub(crate) fn replay_file(file: &SnapshotFile, conf: Option<&str>, capacity_bytes: Option<u64>) -> Result<Value, FileError> {
    let config = settings_for(&file.recorded, conf)?;
    let options =
        ModelOptions {
            config: config.clone(),
            recorded: file.recorded.clone(),
            capacity_bytes,
            recorded_capacity_bytes: None,
            timeline_points: TIMELINE_POINTS,
            reading: None,
        };
    let mut devices = Vec::new();
    for trace in DeviceTrace::split(&file.snapshot) {
        let device = trace.device;
        let replay_error = |error| FileError::Replay { device, error };
        let recorded = oracle_replay(&trace, &file.recorded, TIMELINE_POINTS).map_err(replay_error)?;
        let predicted = model_replay(&trace, &options).map_err(replay_error)?;
        devices.push(json!({
            "device": device,
            "has_events": trace.has_events(),
            "recorded": recorded,
            "predicted": predicted,
        }));
    }
    Ok(json!({
        "recorded_settings": file.recorded.to_conf_string(),
        "settings": config.to_conf_string(),
        "capacity_bytes": capacity_bytes,
        "devices": devices,
    }))
}

/// `verify` of every device in `file` under its recorded settings.
pub(crate) fn verify_file(file: &SnapshotFile) -> Result<Value, FileError> {
    let mut devices = Vec::new();
    for trace in DeviceTrace::split(&file.snapshot) {
        let device = trace.device;
        let report = verify(&trace, &file.recorded).map_err(|error| FileError::Replay { device, error })?;
        let mut value = serde_json::to_value(&report).expect("a report serialises");
        value["passed"] = report.passed().into();
        devices.push(value);
    }
    let passed = devices.iter().all(|d| d["passed"] == true);
    Ok(json!({ "recorded_settings": file.recorded.to_conf_string(), "passed": passed, "devices": devices }))
}

/// `vramkit.replay(path, conf, capacity)`, as JSON.
#[pyfunction]
#[pyo3(signature = (path, conf=None, capacity_bytes=None))]
pub(crate) fn replay_json(path: PathBuf, conf: Option<&str>, capacity_bytes: Option<u64>) -> PyResult<String> {
    // A bad settings string is reported before the (slow) read.
    settings_for(&AllocatorConfig::pytorch_default(), conf)?;
    let file = read_snapshot(&path)?;
    Ok(replay_file(&file, conf, capacity_bytes)?.to_string())
}

/// What `tune_and_diagnose` found: the tune report (when some device has
/// allocation events), the capacity each tuned device was judged at, and
/// one diagnosis per device.
struct Findings<'t> {
    traces: &'t [DeviceTrace],
    /// Per trace: prepared (once, for the tune, the diagnosis and a report)
    /// when it has allocation events.
    prepared: Vec<Option<PreparedTrace<'t>>>,
    tune: Option<vramkit_replay::TuneReport>,
    /// Per trace: the capacity it was tuned for (`None` for unlimited or
    /// for a device without events).
    capacities: Vec<Option<u64>>,
    diagnoses: Vec<vramkit_replay::doctor::Diagnosis>,
}

impl Findings<'_> {
    /// The tune result of trace `index`, if it was tuned.
    fn tune_result(&self, index: usize) -> Option<&vramkit_replay::TuneResult> {
        let tuned_before = self.traces[..index].iter().filter(|t| t.has_allocations()).count();
        let report = self.tune.as_ref()?;
        self.traces[index].has_allocations().then(|| &report.results[tuned_before])
    }

    fn diagnoses_json(&self) -> Vec<Value> {
        self.diagnoses
            .iter()
            .map(|d| {
                let mut v = serde_json::to_value(d).expect("serialisable");
                v["text"] = Value::String(d.to_string());
                v
            })
            .collect()
    }
}

/// Tunes every device of `file` (split into `traces`) that has allocation
/// events; the diagnosis of every device. Shared by `tune`, `doctor` and `report`.
fn tune_and_diagnose<'t>(file: &SnapshotFile, traces: &'t [DeviceTrace], capacity_bytes: Option<u64>) -> Result<Findings<'t>, FileError> {
    let mut prepared = Vec::new();
    let mut capacities = Vec::new();
    for t in traces {
        if !t.has_allocations() {
            capacities.push(None);
            prepared.push(None);
            continue;
        }
        let p = PreparedTrace::new(t, file.recorded.clone(), None).map_err(|error| FileError::Replay { device: t.device, error })?;
        capacities.push(capacity_bytes.or(p.inferred_capacity()));
        prepared.push(Some(p));
    }
    let inputs: Vec<_> = prepared
        .iter()
        .zip(&capacities)
        .filter_map(|(p, &capacity_bytes)| {
            p.as_ref().map(|p| vramkit_replay::TuneInput { label: format!("device {}", p.trace().device), prepared: p, capacity_bytes })
        })
        .collect();
    let tune = if inputs.is_empty() {
        None
    } else {
        Some(
            vramkit_replay::tune(&inputs, &vramkit_replay::TuneOptions::default(), &|| {})
                .map_err(|error| FileError::Replay { device: inputs[0].prepared.trace().device, error })?,
        )
    };
    drop(inputs);
    let mut findings = Findings { traces, prepared, tune, capacities, diagnoses: Vec::new() };
    for (i, t) in traces.iter().enumerate() {
        let tuned = findings.tune_result(i);
        let d = match &findings.prepared[i] {
            Some(p) => vramkit_replay::doctor::diagnose(p, tuned),
            None => vramkit_replay::doctor::diagnose_trace(t, &file.recorded, tuned),
        };
        findings.diagnoses.push(d.map_err(|error| FileError::Replay { device: t.device, error })?);
    }
    Ok(findings)
}

/// `vramkit.tune(path, capacity)`, as JSON.
#[pyfunction]
#[pyo3(signature = (path, capacity_bytes=None))]
pub(crate) fn tune_json(path: PathBuf, capacity_bytes: Option<u64>) -> PyResult<String> {
    let file = read_snapshot(&path)?;
    let traces = DeviceTrace::split(&file.snapshot);
    let findings = tune_and_diagnose(&file, &traces, capacity_bytes)?;
    let report = findings.tune.ok_or_else(|| {
        FileError::Read(format!("{}: the snapshot has no allocation events to tune (record it with _record_memory_history)", path.display()))
    })?;
    Ok(serde_json::to_string(&report).expect("serialisable"))
}

/// `vramkit.doctor(path)`, as JSON: one diagnosis per device, each with its text.
#[pyfunction]
pub(crate) fn doctor_json(path: PathBuf) -> PyResult<String> {
    let file = read_snapshot(&path)?;
    let traces = DeviceTrace::split(&file.snapshot);
    let findings = tune_and_diagnose(&file, &traces, None)?;
    Ok(json!({ "devices": findings.diagnoses_json() }).to_string())
}

/// `vramkit.report(path, output, capacity, device)`: writes the HTML page
/// `vramkit report` writes, for one device (the first with allocation
/// events unless `device` names one); returns the page's size in bytes.
#[pyfunction]
#[pyo3(signature = (path, output, capacity_bytes=None, device=None))]
pub(crate) fn report_html(path: PathBuf, output: PathBuf, capacity_bytes: Option<u64>, device: Option<i64>) -> PyResult<usize> {
    let file = read_snapshot(&path)?;
    let traces = DeviceTrace::split(&file.snapshot);
    let mut findings = tune_and_diagnose(&file, &traces, capacity_bytes)?;
    let index = match device {
        Some(d) => findings.traces.iter().position(|t| t.device == d).ok_or_else(|| {
            let have: Vec<String> = findings.traces.iter().map(|t| t.device.to_string()).collect();
            FileError::Read(format!("{}: no device {d} in the snapshot (it has: {})", path.display(), have.join(", ")))
        })?,
        None => findings.traces.iter().position(DeviceTrace::has_allocations).unwrap_or(0),
    };
    let trace = findings.traces.get(index).ok_or_else(|| FileError::Read(format!("{}: the snapshot has no segments and no trace", path.display())))?;
    let label = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let prepared = match findings.prepared[index].take() {
        Some(p) => p,
        None => PreparedTrace::new(trace, file.recorded.clone(), None).map_err(|error| FileError::Replay { device: trace.device, error })?,
    };
    let report = vramkit_replay::report::build(&vramkit_replay::report::ReportInput {
        label,
        prepared: &prepared,
        capacity_bytes: findings.capacities[index],
        tune: findings.tune_result(index),
        diagnosis: &findings.diagnoses[index],
    })
    .map_err(|error| FileError::Replay { device: trace.device, error })?;
    let html = report.to_html();
    std::fs::write(&output, &html).map_err(|e| PyOSError::new_err(format!("{}: cannot write the report: {e}", output.display())))?;
    Ok(html.len())
}

/// `vramkit.verify(path)`, as JSON.
#[pyfunction]
pub(crate) fn verify_json(path: PathBuf) -> PyResult<String> {
    let file = read_snapshot(&path)?;
    Ok(verify_file(&file)?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramkit_core::{CachingAllocator, ContextLevel, HistoryConfig, StreamId};
    use vramkit_sim::SimDevice;

    const MIB: u64 = 1 << 20;

    /// A snapshot recorded from vramkit's own allocator: what a file read
    /// by `read_snapshot` would hold.
    fn recorded() -> SnapshotFile {
        let config = AllocatorConfig::pytorch_default();
        let mut alloc = CachingAllocator::new(SimDevice::new(8 << 30), config.clone());
        alloc.record_history(Some(HistoryConfig { record_trace: true, max_entries: usize::MAX, context: ContextLevel::Never }));
        let a = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
        let b = alloc.malloc(1000, StreamId(0)).unwrap();
        alloc.free(a).unwrap();
        let _ = b;
        SnapshotFile { snapshot: alloc.snapshot(), recorded: config }
    }

    #[test]
    fn replay_reports_both_sides_per_device() {
        let value = replay_file(&recorded(), None, None).unwrap();
        let device = &value["devices"][0];
        assert_eq!(device["device"], 0);
        assert_eq!(device["has_events"], true);
        for side in ["recorded", "predicted"] {
            assert_eq!(device[side]["peak_reserved_bytes"], 22 * MIB, "{side}: {value}");
            assert_eq!(device[side]["oom_count"], 0, "{side}");
        }
        assert_eq!(value["settings"], value["recorded_settings"]);
    }

    #[test]
    fn replay_applies_settings_on_top_and_a_capacity() {
        let value = replay_file(&recorded(), Some("expandable_segments:True"), Some(16 * MIB)).unwrap();
        assert!(value["settings"].as_str().unwrap().contains("expandable_segments:True"), "{value}");
        assert_eq!(value["capacity_bytes"], 16 * MIB);
        assert!(matches!(replay_file(&recorded(), Some("max_split_size_mb:1"), None), Err(FileError::Settings(_))));
    }

    #[test]
    fn verify_passes_on_vramkits_own_trace() {
        let value = verify_file(&recorded()).unwrap();
        assert_eq!(value["passed"], true, "{value}");
        assert_eq!(value["devices"][0]["alloc_events"], 2);
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let error = read_snapshot(Path::new("no-such-snap.pickle")).unwrap_err();
        assert!(matches!(error, FileError::Read(_)));
        assert!(error.to_string().contains("no-such-snap.pickle"), "{error}");
    }
}

//! RAPIDS RMM `logging_resource_adaptor` CSV logs.
//!
//! The adaptor writes a header `Thread,Time,Action,Pointer,Size,Stream`,
//! then one line per call: `allocate`, `free` (older docs say
//! `deallocate`) or `allocate failure` (pointer `(nil)`), the pointer and
//! stream in hex, the size in bytes, and the time of day as
//! `HH:MM:SS.ffffff` (some builds write seconds since the epoch instead).
//! Each line becomes PyTorch trace events: `allocate` -> `alloc`, `free` ->
//! `free_requested` + `free_completed` (RMM frees at once), `allocate
//! failure` -> `oom` (RMM records no free-memory figure, so `addr` is 0).
//! Columns are found by name, so their order does not matter.

use crate::error::TraceError;
use crate::file::{SnapshotFile, SnapshotFormat};
use std::path::Path;
use vramkit_core::snapshot::{Snapshot, TraceAction, TraceEntry};

/// Microseconds in a day, to carry time-of-day stamps past midnight.
const DAY_US: u64 = 24 * 3600 * 1_000_000;

/// The events of one RMM log, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RmmLog {
    /// Trace entries. `time_us` is microseconds since midnight of the first
    /// line's day for time-of-day stamps (carried past midnight), or since
    /// the Unix epoch where the log has epoch stamps.
    pub entries: Vec<TraceEntry>,
}

impl RmmLog {
    /// A snapshot holding the log as device 0's trace and no segments, to
    /// write as a pickle or JSON for the memory_viz viewer or for replay.
    pub fn into_snapshot_file(self) -> SnapshotFile {
        let mut file =
            SnapshotFile::from_snapshot(Snapshot { segments: Vec::new(), device_traces: vec![self.entries] });
        file.format = SnapshotFormat::Dict;
        file
    }
}

/// Reads an RMM log file.
pub fn read_rmm_log(path: impl AsRef<Path>) -> Result<RmmLog, TraceError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?;
    read_rmm_log_str(&text).map_err(|e| e.with_path(path))
}

/// Column positions, found from the header.
struct Columns {
    time: usize,
    action: usize,
    pointer: usize,
    size: usize,
    stream: usize,
    count: usize,
}

/// Reads RMM log text.
pub fn read_rmm_log_str(text: &str) -> Result<RmmLog, TraceError> {
    let mut lines =
        text.lines().enumerate().map(|(i, line)| (i as u64 + 1, line.trim())).filter(|(_, l)| !l.is_empty());
    let Some((header_line, header)) = lines.next() else {
        return Err(rmm_error(1, "expected the header Thread,Time,Action,Pointer,Size,Stream, found an empty log"));
    };
    let columns = columns(header).map_err(|message| rmm_error(header_line, message))?;
    let mut log = RmmLog::default();
    let mut clock = Clock::default();
    for (number, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != columns.count {
            return Err(rmm_error(number, format!("expected {} fields, found {}", columns.count, fields.len())));
        }
        let field = |i: usize, what: &str| -> Result<&str, TraceError> {
            fields.get(i).copied().ok_or_else(|| rmm_error(number, format!("missing {what}")))
        };
        let time_us = clock.micros(field(columns.time, "Time")?).map_err(|m| rmm_error(number, m))?;
        let pointer =
            hex(field(columns.pointer, "Pointer")?).map_err(|m| rmm_error(number, format!("Pointer: {m}")))?;
        let size = field(columns.size, "Size")?
            .parse::<u64>()
            .map_err(|_| rmm_error(number, format!("Size: expected a byte count, found {:?}", fields[columns.size])))?;
        let stream = hex(field(columns.stream, "Stream")?).map_err(|m| rmm_error(number, format!("Stream: {m}")))?;
        let event = |action: TraceAction, addr: u64| TraceEntry {
            time_us: Some(time_us),
            ..TraceEntry::new(action, addr, size, stream)
        };
        match field(columns.action, "Action")? {
            "allocate" => log.entries.push(event(TraceAction::Alloc, pointer)),
            "free" | "deallocate" => {
                log.entries.push(event(TraceAction::FreeRequested, pointer));
                log.entries.push(event(TraceAction::FreeCompleted, pointer));
            }
            "allocate failure" => log.entries.push(event(TraceAction::Oom, 0)),
            other => {
                return Err(rmm_error(
                    number,
                    format!("Action: expected allocate, free or allocate failure, found {other:?}"),
                ))
            }
        }
    }
    Ok(log)
}

fn rmm_error(line: u64, message: impl Into<String>) -> TraceError {
    TraceError::Rmm { path: None, line, message: message.into() }
}

fn columns(header: &str) -> Result<Columns, String> {
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let find = |name: &str| {
        names.iter().position(|n| n.eq_ignore_ascii_case(name)).ok_or_else(|| {
            format!("expected a header with a {name} column (Thread,Time,Action,Pointer,Size,Stream), found {header:?}")
        })
    };
    Ok(Columns {
        time: find("Time")?,
        action: find("Action")?,
        pointer: find("Pointer")?,
        size: find("Size")?,
        stream: find("Stream")?,
        count: names.len(),
    })
}

/// A pointer or stream: hex with or without `0x`; `(nil)`/`nullptr` is 0.
fn hex(text: &str) -> Result<u64, String> {
    if matches!(text, "(nil)" | "nullptr" | "NULL" | "0") {
        return Ok(0);
    }
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    u64::from_str_radix(digits, 16).map_err(|_| format!("expected a hex address, found {text:?}"))
}

/// Turns time stamps into microseconds, carrying time-of-day stamps past
/// midnight (a stamp more than 12 hours before the previous one is taken
/// to be on the next day).
#[derive(Default)]
struct Clock {
    day_offset: u64,
    last: Option<u64>,
}

impl Clock {
    fn micros(&mut self, text: &str) -> Result<u64, String> {
        let bad = || format!("Time: expected HH:MM:SS.ffffff or epoch seconds, found {text:?}");
        if !text.contains(':') {
            let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
            let secs: u64 = secs.parse().map_err(|_| bad())?;
            return Ok(secs.saturating_mul(1_000_000).saturating_add(fraction_micros(frac).ok_or_else(bad)?));
        }
        let mut parts = text.splitn(3, ':');
        let (Some(h), Some(m), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let (s, frac) = s.split_once(['.', ':']).unwrap_or((s, ""));
        let (h, m, s): (u64, u64, u64) =
            (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, s.parse().map_err(|_| bad())?);
        if h >= 24 || m >= 60 || s >= 61 {
            return Err(bad());
        }
        let of_day = (h * 3600 + m * 60 + s) * 1_000_000 + fraction_micros(frac).ok_or_else(bad)?;
        if let Some(last) = self.last {
            if of_day + DAY_US / 2 < last {
                self.day_offset += DAY_US;
            }
        }
        self.last = Some(of_day);
        Ok(of_day + self.day_offset)
    }
}

/// Digits after the decimal point, as microseconds (extra digits dropped).
fn fraction_micros(digits: &str) -> Option<u64> {
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut micros = 0;
    for i in 0..6 {
        micros = micros * 10 + digits.as_bytes().get(i).map_or(0, |d| u64::from(d - b'0'));
    }
    Some(micros)
}

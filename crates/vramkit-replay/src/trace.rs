//! One device's view of a snapshot: its end-state segments and its trace.

use std::borrow::Cow;
use vramkit_core::{SegmentInfo, Snapshot, TraceAction};
use vramkit_trace::{Entries, TraceFile};

/// The segments and trace entries of one device.
#[derive(Clone, Debug)]
pub struct DeviceTrace {
    /// Device index.
    pub device: i64,
    /// Segments at the end of the window (snapshot time), sorted by address.
    pub end_segments: Vec<SegmentInfo>,
    /// Trace entries, oldest first, by column.
    pub events: Entries,
}

impl DeviceTrace {
    /// Splits a snapshot by device: one `DeviceTrace` per device that has
    /// segments or trace entries.
    pub fn split(snapshot: &Snapshot) -> Vec<DeviceTrace> {
        let traces = snapshot.device_traces.iter().map(|t| Entries::from(t.as_slice())).collect();
        Self::split_parts(&snapshot.segments, traces)
    }

    /// Splits a file read by column ([`vramkit_trace::read_trace_file`]),
    /// moving its entries rather than copying them.
    pub fn split_file(file: TraceFile) -> Vec<DeviceTrace> {
        let segments = file.segments().to_vec();
        Self::split_parts(&segments, file.device_traces)
    }

    fn split_parts(segments: &[SegmentInfo], mut traces: Vec<Entries>) -> Vec<DeviceTrace> {
        let mut devices: Vec<i64> = segments.iter().map(|s| s.device).collect();
        devices.extend((0..traces.len() as i64).filter(|&d| !traces[d as usize].is_empty()));
        devices.sort_unstable();
        devices.dedup();
        devices
            .into_iter()
            .map(|device| {
                let mut end_segments: Vec<SegmentInfo> = segments.iter().filter(|s| s.device == device).cloned().collect();
                end_segments.sort_by_key(|s| s.address);
                let events = usize::try_from(device).ok().and_then(|d| traces.get_mut(d)).map(std::mem::take).unwrap_or_default();
                DeviceTrace { device, end_segments, events }
            })
            .collect()
    }

    /// Whether the trace holds allocation events at all (a state-only
    /// snapshot has none, or only a `snapshot` marker).
    pub fn has_events(&self) -> bool {
        self.events.actions().iter().any(|a| {
            use TraceAction::*;
            matches!(a, Alloc | FreeRequested | FreeCompleted | SegmentAlloc | SegmentFree | SegmentMap | SegmentUnmap)
        })
    }

    /// Whether the trace holds `alloc` entries: something to replay under
    /// other settings (a state-only snapshot may still carry a stray free).
    pub fn has_allocations(&self) -> bool {
        self.events.actions().contains(&TraceAction::Alloc)
    }
}

impl<'t> From<&'t DeviceTrace> for Cow<'t, DeviceTrace> {
    fn from(trace: &'t DeviceTrace) -> Cow<'t, DeviceTrace> {
        Cow::Borrowed(trace)
    }
}

impl From<DeviceTrace> for Cow<'static, DeviceTrace> {
    fn from(trace: DeviceTrace) -> Cow<'static, DeviceTrace> {
        Cow::Owned(trace)
    }
}

//! One device's view of a snapshot: its end-state segments and its trace.

use vramkit_core::{SegmentInfo, Snapshot, TraceEntry};

/// The segments and trace entries of one device.
#[derive(Clone, Debug)]
pub struct DeviceTrace {
    /// Device index.
    pub device: i64,
    /// Segments at the end of the window (snapshot time), sorted by address.
    pub end_segments: Vec<SegmentInfo>,
    /// Trace entries, oldest first.
    pub events: Vec<TraceEntry>,
}

impl DeviceTrace {
    /// Splits a snapshot by device: one `DeviceTrace` per device that has
    /// segments or trace entries.
    pub fn split(snapshot: &Snapshot) -> Vec<DeviceTrace> {
        let mut devices: Vec<i64> = snapshot.segments.iter().map(|s| s.device).collect();
        devices.extend((0..snapshot.device_traces.len() as i64).filter(|&d| !snapshot.device_traces[d as usize].is_empty()));
        devices.sort_unstable();
        devices.dedup();
        devices
            .into_iter()
            .map(|device| {
                let mut end_segments: Vec<SegmentInfo> =
                    snapshot.segments.iter().filter(|s| s.device == device).cloned().collect();
                end_segments.sort_by_key(|s| s.address);
                let events = snapshot.device_traces.get(device as usize).cloned().unwrap_or_default();
                DeviceTrace { device, end_segments, events }
            })
            .collect()
    }

    /// Whether the trace holds allocation events at all (a state-only
    /// snapshot has none, or only a `snapshot` marker).
    pub fn has_events(&self) -> bool {
        self.events.iter().any(|e| {
            use vramkit_core::TraceAction::*;
            matches!(e.action, Alloc | FreeRequested | FreeCompleted | SegmentAlloc | SegmentFree | SegmentMap | SegmentUnmap)
        })
    }

    /// Whether the trace holds `alloc` entries: something to replay under
    /// other settings (a state-only snapshot may still carry a stray free).
    pub fn has_allocations(&self) -> bool {
        self.events.iter().any(|e| e.action == vramkit_core::TraceAction::Alloc)
    }
}

//! A snapshot as the dict `torch.cuda.memory._snapshot()` returns, in JSON
//! (the shape pytorch.org/memory_viz also opens): `segments`,
//! `device_traces` and `allocator_settings`, with PyTorch's key names.
//!
//! Pickle bytes (what `_dump_snapshot` writes) are not produced here yet;
//! the JSON has the same structure, so a writer can be added beside this.

use serde_json::{json, Map, Value};
use vramkit_core::{AllocatorConfig, BlockInfo, Frames, SegmentInfo, Snapshot, TraceAction, TraceEntry};

/// The snapshot of several devices merged: segments of all devices (each
/// carries its `device`), one trace list per device index up to the
/// highest one given, and the settings.
pub fn snapshot_value(devices: &[(i32, Snapshot)], config: &AllocatorConfig) -> Value {
    let mut segments: Vec<&SegmentInfo> = devices.iter().flat_map(|(_, s)| &s.segments).collect();
    segments.sort_by_key(|s| (s.device, s.address));
    let trace_count = devices.iter().map(|(d, _)| *d as usize + 1).max().unwrap_or(1);
    let mut device_traces = vec![Vec::new(); trace_count];
    for (device, snapshot) in devices {
        if let Some(trace) = snapshot.device_traces.get(*device as usize) {
            device_traces[*device as usize] = trace.iter().map(trace_entry).collect();
        }
    }
    json!({
        "segments": segments.into_iter().map(segment).collect::<Vec<_>>(),
        "device_traces": device_traces,
        "allocator_settings": allocator_settings(config),
    })
}

/// [`snapshot_value`] as a JSON string.
pub fn snapshot_json(devices: &[(i32, Snapshot)], config: &AllocatorConfig) -> String {
    snapshot_value(devices, config).to_string()
}

fn frames(frames: &Option<Frames>) -> Value {
    let list = frames.as_deref().unwrap_or_default();
    Value::Array(list.iter().map(|f| json!({ "filename": f.filename, "line": f.line, "name": f.name })).collect())
}

fn segment(s: &SegmentInfo) -> Value {
    json!({
        "device": s.device,
        "address": s.address,
        "total_size": s.total_size,
        "allocated_size": s.allocated_size,
        "active_size": s.active_size,
        "requested_size": s.requested_size,
        "stream": s.stream,
        "segment_type": s.segment_type.as_str(),
        "segment_pool_id": [s.segment_pool_id.0, s.segment_pool_id.1],
        "is_expandable": s.is_expandable,
        "frames": frames(&s.frames),
        "blocks": s.blocks.iter().map(block).collect::<Vec<_>>(),
    })
}

fn block(b: &BlockInfo) -> Value {
    json!({
        "address": b.address,
        "size": b.size,
        "requested_size": b.requested_size,
        "state": b.state.as_str(),
        "frames": frames(&b.frames),
    })
}

fn trace_entry(e: &TraceEntry) -> Value {
    let mut m = Map::new();
    m.insert("action".into(), e.action.as_str().into());
    // PyTorch's `oom` entry carries the device's free bytes as `device_free`, not `addr`.
    let addr_key = if e.action == TraceAction::Oom { "device_free" } else { "addr" };
    m.insert(addr_key.into(), e.addr.into());
    m.insert("size".into(), e.size.into());
    m.insert("stream".into(), e.stream.into());
    if let Some(t) = e.time_us {
        m.insert("time_us".into(), t.into());
    }
    if e.frames.is_some() {
        m.insert("frames".into(), frames(&e.frames));
    }
    if let Some(c) = &e.compile_context {
        m.insert("compile_context".into(), c.as_str().into());
    }
    if let Some(u) = &e.user_metadata {
        m.insert("user_metadata".into(), u.as_str().into());
    }
    Value::Object(m)
}

fn allocator_settings(config: &AllocatorConfig) -> Value {
    let divisions: Map<String, Value> =
        config.roundup_power2_divisions.iter().enumerate().map(|(i, &d)| ((1u64 << i).to_string(), d.into())).collect();
    json!({
        "PYTORCH_CUDA_ALLOC_CONF": config.to_conf_string(),
        "max_split_size": config.max_split_size_bytes.map_or(-1, |b| b as i64),
        "garbage_collection_threshold": config.garbage_collection_threshold,
        "expandable_segments": config.expandable_segments,
        "pinned_num_register_threads": config.pinned_num_register_threads,
        "release_lock_on_cudamalloc": config.release_lock_on_cudamalloc,
        "pinned_use_cuda_host_register": config.pinned_use_cuda_host_register,
        "graph_capture_record_stream_reuse": config.graph_capture_record_stream_reuse,
        "roundup_power2_divisions": divisions,
    })
}

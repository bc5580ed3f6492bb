//! The snapshot model: what `torch.cuda.memory._snapshot()` returns.
//!
//! These types are shared by the allocator (which produces them) and by
//! `vramkit-trace` (which reads and writes them from PyTorch's files), so
//! field names follow PyTorch's keys one to one. Snapshots are owned data,
//! never references into the allocator.

use crate::rounding::PoolKind;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One stack frame, as PyTorch records it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Source file (`??` or a bare name for C++ frames).
    pub filename: String,
    /// Line number (0 for C++ frames).
    pub line: i64,
    /// Function name.
    pub name: String,
}

/// A stack, innermost frame first. Shared: PyTorch files reference one
/// stack from many entries, and so do we.
pub type Frames = Arc<[Frame]>;

/// A block's state in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Handed to the user.
    ActiveAllocated,
    /// Freed by the user, waiting for events of other streams (`record_stream`).
    ActivePendingFree,
    /// Free and cached.
    Inactive,
}

impl BlockState {
    /// PyTorch's string.
    pub const fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// Allocated or waiting on events.
    pub const fn is_active(self) -> bool {
        !matches!(self, BlockState::Inactive)
    }
}

/// A private pool's id; `(0, 0)` is the default pool.
pub type MempoolId = (u64, u64);

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// Device address of the block.
    pub address: u64,
    /// Bytes, rounded.
    pub size: u64,
    /// Bytes the user asked for (stale for inactive blocks, as in PyTorch).
    pub requested_size: u64,
    /// Allocated, pending free, or inactive.
    pub state: BlockState,
    /// Where it was allocated (or freed), if recorded.
    pub frames: Option<Frames>,
}

/// One segment (`cudaMalloc` range, or a mapped run of an expandable segment).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// Device index.
    pub device: i64,
    /// Base address.
    pub address: u64,
    /// Bytes in the segment.
    pub total_size: u64,
    /// Sum of allocated blocks' sizes.
    pub allocated_size: u64,
    /// Sum of active blocks' sizes.
    pub active_size: u64,
    /// Sum of active blocks' requested sizes.
    pub requested_size: u64,
    /// The stream the segment was allocated for.
    pub stream: u64,
    /// `"small"` or `"large"`.
    pub segment_type: PoolKind,
    /// `(0, 0)` for the default pool.
    pub segment_pool_id: MempoolId,
    /// A mapped run of an expandable segment.
    pub is_expandable: bool,
    /// Stack of the `cudaMalloc`, if recorded.
    pub frames: Option<Frames>,
    /// Blocks in address order; their sizes add up to `total_size`.
    pub blocks: Vec<BlockInfo>,
}

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block handed out (`size` = requested bytes).
    Alloc,
    /// The user freed a block.
    FreeRequested,
    /// The block became reusable.
    FreeCompleted,
    /// `cudaMalloc` of a segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A snapshot was taken (`size` = active bytes).
    Snapshot,
    /// An allocation failed (`addr` holds the device's free bytes).
    Oom,
    /// A user annotation (about PyTorch 2.4).
    UserDefined,
}

impl TraceAction {
    /// Every action, in the order of PyTorch's enum.
    pub const ALL: [TraceAction; 10] = [
        TraceAction::Alloc,
        TraceAction::FreeRequested,
        TraceAction::FreeCompleted,
        TraceAction::SegmentAlloc,
        TraceAction::SegmentFree,
        TraceAction::SegmentMap,
        TraceAction::SegmentUnmap,
        TraceAction::Snapshot,
        TraceAction::Oom,
        TraceAction::UserDefined,
    ];

    /// PyTorch's string.
    pub const fn as_str(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
            TraceAction::UserDefined => "user_defined",
        }
    }

    /// The action named by PyTorch's string.
    pub fn from_name(name: &str) -> Option<TraceAction> {
        TraceAction::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

/// One entry of a device trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Address; for `oom`, the device's free bytes (PyTorch's `device_free`).
    pub addr: u64,
    /// Bytes (see [`TraceAction`] for which size each action records).
    pub size: u64,
    /// Stream handle.
    pub stream: u64,
    /// Microseconds since the Unix epoch, where recorded.
    pub time_us: Option<u64>,
    /// Stack, where recorded.
    pub frames: Option<Frames>,
    /// Innermost compiled region (`"N/A"` in PyTorch when none), where recorded.
    pub compile_context: Option<String>,
    /// User metadata string, where recorded.
    pub user_metadata: Option<String>,
}

impl TraceEntry {
    /// An entry with only the four fields every generation has.
    pub fn new(action: TraceAction, addr: u64, size: u64, stream: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us: None,
            frames: None,
            compile_context: None,
            user_metadata: None,
        }
    }
}

/// A whole snapshot: the state of every segment and the recorded history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Segments sorted by address.
    pub segments: Vec<SegmentInfo>,
    /// One list per device index, oldest entry first.
    pub device_traces: Vec<Vec<TraceEntry>>,
}

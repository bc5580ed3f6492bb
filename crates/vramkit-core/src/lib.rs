#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod addr_map;
mod allocator;
mod block;
pub mod config;
pub mod device;
mod error;
pub mod history;
mod live_stats;
pub mod oom;
pub mod oom_message;
mod pool;
pub mod rounding;
pub mod snapshot;
pub mod stats;
pub mod summary;

pub use addr_map::AddrMap;
pub use allocator::{
    set_invariant_checks, AddrHasher, AfterEmptyCache, CachingAllocator, InvariantChecks, InvariantViolation, RestoreError,
    StreamFilter, MAX_WATCHED, SAMPLED_BLOCKS,
};
pub use config::{AllocatorConfig, ConfigError, PytorchRelease};
pub use device::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};
pub use error::{Error, PoolError};
pub use history::{ContextLevel, HistoryConfig};
pub use live_stats::CurrentBytes;
pub use oom::{OomDiagnosis, OutOfMemoryError};
pub use oom_message::{format_size, ExabyteOomMessage, MessageStyle, OomMessage, Platform, ProcessMemory};
pub use rounding::PoolKind;
pub use snapshot::{BlockInfo, BlockState, Frame, Frames, SegmentInfo, Snapshot, TraceAction, TraceEntry};
pub use stats::{DeviceStats, Stat, StatArray};
pub use summary::{memory_summary, parse_memory_summary, ParsedSummary, SummaryLayout, SummaryParseError};

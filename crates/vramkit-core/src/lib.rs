#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod device;
pub mod history;
pub mod oom_message;
pub mod rounding;
pub mod snapshot;
pub mod stats;
pub mod summary;

pub use config::{AllocatorConfig, ConfigError};
pub use device::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};
pub use oom_message::{
    format_size, ExabyteOomMessage, MessageStyle, OomMessage, Platform, ProcessMemory,
};
pub use rounding::PoolKind;
pub use stats::{DeviceStats, Stat, StatArray};
pub use summary::{
    memory_summary, parse_memory_summary, ParsedSummary, SummaryLayout, SummaryParseError,
};

//! The `Device` trait: what the allocator asks of a GPU.
//!
//! The allocator never dereferences device memory; it only asks for ranges,
//! gives them back, and asks whether work queued on a stream has finished.
//! `vramkit-sim` implements this for tests and replay, `vramkit-cuda` for
//! real GPUs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A device address, as `cudaMalloc` returns it. Never dereferenced by the core.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceAddr(pub u64);

impl DeviceAddr {
    /// The address `bytes` further on.
    #[inline]
    pub const fn offset(self, bytes: u64) -> DeviceAddr {
        DeviceAddr(self.0 + bytes)
    }
}

impl fmt::Debug for DeviceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for DeviceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A CUDA stream, by its raw `cudaStream_t` value (0 is the legacy default
/// stream). PyTorch orders free blocks by this integer, so we keep it raw.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StreamId(pub u64);

/// A CUDA event recorded on a stream, as the device names it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct EventId(pub u64);

/// Free and total bytes, as `cudaMemGetInfo` reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MemInfo {
    /// Bytes the device could still hand out.
    pub free_bytes: u64,
    /// Bytes of memory on the device.
    pub total_bytes: u64,
}

/// Why a device call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The device has no memory for this request (`cudaErrorMemoryAllocation`).
    /// The allocator recovers from this: it releases cached memory and retries.
    #[error("the device is out of memory ({requested_bytes} bytes requested)")]
    OutOfMemory {
        /// Bytes asked for.
        requested_bytes: u64,
    },
    /// Any other failure. PyTorch raises these at once, without retrying.
    #[error("device error in {call}: {message}")]
    Other {
        /// The driver call that failed, e.g. `cuMemAlloc`.
        call: &'static str,
        /// What the driver said.
        message: String,
    },
}

/// A GPU as the caching allocator sees it.
///
/// # Contract
/// - `malloc` is called only with sizes the allocator computed by
///   `get_allocation_size` (a positive multiple of 512 bytes). It returns a
///   range no other live range overlaps. `Err(DeviceError::OutOfMemory)` means
///   "no memory now"; the allocator then frees cached segments and asks again.
/// - `free` is called exactly once for every range `malloc` returned, with the
///   same address and size, and only when no block in it is live.
/// - `record_event(stream)` marks the current end of `stream`'s queued work;
///   `query_event` says whether that work has finished, without waiting.
///   `synchronize_event` waits for it. `destroy_event` is called once per
///   event, after it was seen complete.
/// - All calls come from one thread at a time (`&mut self`); front ends add
///   the locking.
pub trait Device {
    /// `cudaMalloc`: a new range of exactly `size_bytes`.
    fn malloc(&mut self, size_bytes: u64, stream: StreamId) -> Result<DeviceAddr, DeviceError>;

    /// `cudaFree` of a range `malloc` returned.
    fn free(&mut self, addr: DeviceAddr, size_bytes: u64);

    /// `cudaMemGetInfo`.
    fn mem_get_info(&self) -> MemInfo;

    /// The device memory this process uses, as NVML reports it per process
    /// (PyTorch prints it in its out-of-memory message: "Including
    /// non-PyTorch memory, this process has ..."); `None` where it is not
    /// known, and the message has no process line.
    fn process_memory_bytes(&self) -> Option<u64> {
        None
    }

    /// `cudaStreamGetCaptureInfo` on the calling thread's current stream:
    /// is a CUDA graph being captured? Torch 2.13 and later ask this, while
    /// an allocate-to-pool is active, before every step a capture forbids
    /// (see [`Compat::capture_guards_ask_the_stream`](crate::config::Compat::capture_guards_ask_the_stream)).
    /// A device that never captures says no (the default).
    fn is_capturing(&self) -> bool {
        false
    }

    /// `cudaEventRecord` on `stream`.
    fn record_event(&mut self, stream: StreamId) -> EventId;

    /// `cudaEventQuery`: has the work before `event` finished?
    fn query_event(&mut self, event: EventId) -> bool;

    /// `cudaEventSynchronize`: wait until `event` has completed.
    fn synchronize_event(&mut self, event: EventId);

    /// Give an event back once it is no longer needed.
    fn destroy_event(&mut self, event: EventId);

    /// Whether the device has the virtual-memory calls below (CUDA's
    /// `cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`). Without them
    /// `expandable_segments:True` is ignored, as PyTorch does.
    fn supports_virtual_memory(&self) -> bool {
        false
    }

    /// `cuMemAddressReserve`: `size_bytes` of address space, holding no memory.
    ///
    /// # Contract
    /// Called only when `supports_virtual_memory()`, with a multiple of the
    /// page size the allocator uses (2 MiB or `large_segment_size`).
    fn reserve_address_range(&mut self, size_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        Err(DeviceError::Other { call: "cuMemAddressReserve", message: format!("no virtual memory support ({size_bytes} bytes)") })
    }

    /// `cuMemAddressFree` of a whole reservation, once none of it is mapped.
    fn release_address_range(&mut self, _addr: DeviceAddr, _size_bytes: u64) {}

    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` of every page of
    /// `page_bytes` in `[addr, addr + size_bytes)`, inside a reservation and
    /// not mapped yet. All or nothing: if one page cannot be created, the
    /// pages created by this call are released and `OutOfMemory` is returned.
    fn map(&mut self, addr: DeviceAddr, size_bytes: u64, page_bytes: u64) -> Result<(), DeviceError> {
        let _ = (addr, page_bytes);
        Err(DeviceError::OutOfMemory { requested_bytes: size_bytes })
    }

    /// `cuMemUnmap` + `cuMemRelease` of the mapped pages in `[addr, addr + size_bytes)`.
    fn unmap(&mut self, _addr: DeviceAddr, _size_bytes: u64) {}

    /// Wall-clock microseconds since the Unix epoch, for trace entries.
    /// Devices without a clock return 0.
    fn time_us(&self) -> u64 {
        0
    }
}

//! `SharedAllocator`: one device's [`CachingAllocator`] behind a lock, as
//! PyTorch guards each `DeviceCachingAllocator` with a mutex, plus the
//! checks a C boundary needs. The lock is [`AllocatorLock`], whose unlock
//! is a plain store (`lock.rs`).
//!
//! The core trusts its caller; a C caller can pass anything. So the front
//! end lets the core refuse a free of an address that is not live (one
//! lookup, which also gives the size `malloc` was asked for), remembers
//! freed addresses to tell a double free from a stranger, and reports a
//! free with a wrong size.

use crate::Error;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use crate::lock::{AllocatorGuard, AllocatorLock};
use std::sync::PoisonError;
use vramkit_core::{
    memory_summary, AddrMap, AllocatorConfig, CachingAllocator, Device, DeviceAddr, DeviceStats, HistoryConfig, Snapshot,
    StreamId, SummaryLayout,
};

/// Addresses remembered as "freed" to tell a double free from a stranger;
/// past this many the memory is cleared (a double free of a forgotten
/// address is then reported as an unknown pointer, still refused).
const FREED_MEMORY_LIMIT: usize = 1 << 20;

#[derive(Debug)]
struct State<D: Device> {
    /// The live blocks are the core's allocated blocks; the size each was
    /// asked for is its `requested_size`.
    allocator: CachingAllocator<D>,
    /// Addresses freed at least once (since the last clearing). Only asked
    /// about addresses the core does not hold live, so one handed out
    /// again need not leave it: a cache-hit `malloc` costs nothing here,
    /// and a `free` of an address already in it changes nothing.
    freed: AddrMap<()>,
    /// The address last put into `freed` (0: none), which is there until
    /// `freed` is cleared: the pair of a training step frees the same
    /// address every time, and needs no lookup to know it is there.
    last_freed: u64,
}

/// A thread-safe front end for one device: a [`CachingAllocator`] behind a
/// lock, with boundary checks on `free` and `record_stream`.
///
/// ```
/// use vramkit_capi::SharedAllocator;
/// use vramkit_core::{AllocatorConfig, StreamId};
/// use vramkit_sim::SimDevice;
///
/// let shared = SharedAllocator::new(SimDevice::new(8 << 30), AllocatorConfig::pytorch_default(), 0);
/// let p = std::thread::scope(|s| s.spawn(|| shared.malloc(1000, StreamId(0)).unwrap()).join().unwrap());
/// shared.free(p, 1000).unwrap(); // freed on another thread than the allocating one
/// assert!(shared.free(p, 1000).unwrap_err().is_misuse()); // a double free is refused
/// assert_eq!(shared.boundary_error_count(), 1);
/// ```
#[derive(Debug)]
pub struct SharedAllocator<D: Device> {
    device_index: i32,
    state: AllocatorLock<State<D>>,
    boundary_errors: AtomicU64,
}

impl<D: Device> SharedAllocator<D> {
    /// An allocator for `device`, shown as device `device_index` in stats,
    /// summaries, snapshots and OOM messages.
    pub fn new(device: D, config: AllocatorConfig, device_index: i32) -> Self {
        let allocator = CachingAllocator::new(device, config).with_device_index(i64::from(device_index));
        SharedAllocator {
            device_index,
            state: AllocatorLock::new(State { allocator, freed: AddrMap::default(), last_freed: 0 }),
            boundary_errors: AtomicU64::new(0),
        }
    }

    /// The device index.
    pub fn device_index(&self) -> i32 {
        self.device_index
    }

    /// The state, for a call that changes it: refused after a panic inside
    /// the lock, since the allocator may be half way through an update.
    fn lock_for_change(&self) -> Result<AllocatorGuard<'_, State<D>>, Error> {
        self.state.lock().map_err(|_| Error::Poisoned { device: self.device_index })
    }

    /// The state, for a call that only reads it: still served after a panic,
    /// since a summary is what one wants then.
    fn lock_for_read(&self) -> AllocatorGuard<'_, State<D>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn misuse(&self, error: Error) -> Error {
        debug_assert!(error.is_misuse());
        self.boundary_errors.fetch_add(1, Ordering::Relaxed);
        error
    }

    /// `malloc`: a block of at least `size_bytes` usable on `stream`.
    /// A zero-byte request returns the null address and changes nothing.
    #[inline(always)]
    pub fn malloc(&self, size_bytes: u64, stream: StreamId) -> Result<DeviceAddr, Error> {
        if size_bytes == 0 {
            return Ok(DeviceAddr(0));
        }
        Ok(self.lock_for_change()?.allocator.malloc(size_bytes, stream)?)
    }

    /// `free` of a block `malloc` returned, with the size it was asked for.
    ///
    /// Misuse is refused and counted: a null pointer with a non-zero size
    /// ([`Error::NullPointer`]), an address already freed
    /// ([`Error::DoubleFree`]) or never handed out ([`Error::UnknownPointer`]);
    /// nothing changes then. A wrong size frees the block and returns
    /// [`Error::WrongSize`]. `free(null, 0)` does nothing and is fine.
    #[inline(always)]
    pub fn free(&self, addr: DeviceAddr, size_bytes: u64) -> Result<(), Error> {
        if addr.0 == 0 {
            return if size_bytes == 0 { Ok(()) } else { Err(self.misuse(Error::NullPointer { size_bytes })) };
        }
        let mut state = self.lock_for_change()?;
        let requested_bytes = match state.allocator.free_returning_requested_size(addr) {
            Ok(requested_bytes) => requested_bytes,
            Err(vramkit_core::Error::UnknownPointer { .. }) => {
                let device = self.device_index;
                let error = if state.freed.contains(addr.0) {
                    Error::DoubleFree { addr, device }
                } else {
                    Error::UnknownPointer { addr, device }
                };
                return Err(self.misuse(error));
            }
            Err(other) => return Err(other.into()),
        };
        if state.last_freed != addr.0 {
            if state.freed.len() >= FREED_MEMORY_LIMIT {
                state.freed.clear();
            }
            state.freed.insert(addr.0, ());
            state.last_freed = addr.0;
        }
        drop(state);
        if requested_bytes != size_bytes {
            return Err(self.misuse(Error::WrongSize { addr, size_bytes, allocated_bytes: requested_bytes }));
        }
        Ok(())
    }

    /// Whether `addr` is a live block of this allocator.
    pub fn contains(&self, addr: DeviceAddr) -> bool {
        self.requested_size(addr).is_some()
    }

    /// The size `malloc` was asked for, if `addr` is a live block here.
    pub fn requested_size(&self, addr: DeviceAddr) -> Option<u64> {
        self.lock_for_read().allocator.requested_size(addr)
    }

    /// `Tensor.record_stream(stream)`: the live block at `addr` is also used
    /// on `stream`. An address that is not live is refused and counted.
    pub fn record_stream(&self, addr: DeviceAddr, stream: StreamId) -> Result<(), Error> {
        let mut state = self.lock_for_change()?;
        if state.allocator.requested_size(addr).is_none() {
            return Err(self.misuse(Error::NotLive { call: "record_stream", addr }));
        }
        state.allocator.record_stream(addr, stream)?;
        Ok(())
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&self) -> Result<(), Error> {
        self.lock_for_change()?.allocator.empty_cache();
        Ok(())
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&self) -> Result<(), Error> {
        self.lock_for_change()?.allocator.reset_peak_stats();
        Ok(())
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&self) -> Result<(), Error> {
        self.lock_for_change()?.allocator.reset_accumulated_stats();
        Ok(())
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error> {
        self.lock_for_change()?.allocator.set_memory_fraction(fraction)?;
        Ok(())
    }

    /// Applies the keys a `PYTORCH_CUDA_ALLOC_CONF`-style string names;
    /// on error nothing changes.
    pub fn update_settings(&self, conf: &str) -> Result<(), Error> {
        self.lock_for_change()?.allocator.update_settings(conf)?;
        Ok(())
    }

    /// Starts (or with `None` stops and clears) history recording.
    pub fn record_history(&self, config: Option<HistoryConfig>) -> Result<(), Error> {
        self.lock_for_change()?.allocator.record_history(config);
        Ok(())
    }

    /// The statistics.
    pub fn stats(&self) -> DeviceStats {
        self.lock_for_read().allocator.stats()
    }

    /// `torch.cuda.memory_stats()`: every key, sorted.
    pub fn memory_stats(&self) -> BTreeMap<String, i64> {
        self.lock_for_read().allocator.memory_stats()
    }

    /// `torch.cuda.memory_summary()` in PyTorch 2's layout.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        let stats = self.stats();
        memory_summary(&stats, i64::from(self.device_index), abbreviated, SummaryLayout::V2_0)
    }

    /// The current settings.
    pub fn config(&self) -> AllocatorConfig {
        self.lock_for_read().allocator.config().clone()
    }

    /// `torch.cuda.memory._snapshot()` for this device.
    pub fn snapshot(&self) -> Snapshot {
        self.lock_for_read().allocator.snapshot()
    }

    /// Blocks handed out and not yet freed.
    pub fn live_count(&self) -> usize {
        self.lock_for_read().allocator.allocated_count()
    }

    /// Misuse this allocator refused or reported since creation.
    pub fn boundary_error_count(&self) -> u64 {
        self.boundary_errors.load(Ordering::Relaxed)
    }

    /// Runs `f` on the allocator under the lock (tests, inspection, settings
    /// the front end does not wrap). The boundary checks read the core, so
    /// blocks `f` allocates or frees are seen by them too.
    pub fn with_allocator<R>(&self, f: impl FnOnce(&mut CachingAllocator<D>) -> R) -> Result<R, Error> {
        Ok(f(&mut self.lock_for_change()?.allocator))
    }
}

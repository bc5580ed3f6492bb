//! `CudaDevice`: the `Device` trait on the CUDA driver API. Its
//! virtual-memory methods run the raw calls of `vmm.rs` on the device's
//! context and keep the books of what the trait mapped.

use crate::driver::{check, driver_available, CurrentContext, Failure};
use crate::CudaError;
use cudarc::driver::sys::{self, CUresult};
use crate::vmm::{self, MappedPage};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use vramkit_core::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};

/// Idle events kept for reuse; more than this are destroyed.
const EVENT_POOL_CAPACITY: usize = 1024;

/// Driver failures in calls that cannot return an error (`free`, events)
/// printed to stderr; later ones are only counted.
const PRINTED_FAILURES: u64 = 16;

/// The smallest page the allocator maps (an expandable small-pool segment's
/// page, spec section 6).
const SMALLEST_PAGE_BYTES: u64 = 2 << 20;

/// The event id that stands for "already complete": handed out when an
/// event could not be created or recorded, after the stream was synchronised.
const COMPLETE_EVENT: EventId = EventId(0);

/// One CUDA GPU, through its primary context.
///
/// Every method makes the primary context current for the duration of the
/// call and restores the caller's context afterwards. The primary context is
/// the one the CUDA runtime (and so PyTorch) uses, so pointers from here are
/// valid in the caller's kernels.
///
/// Driver failures in the trait's infallible methods (`free`, events) are
/// counted ([`CudaDevice::driver_failure_count`]) and the first few printed
/// to stderr: they mean the context is broken (a sticky error after a kernel
/// fault), where PyTorch would raise.
#[derive(Debug)]
pub struct CudaDevice {
    index: i32,
    device: sys::CUdevice,
    /// The device's primary context, retained by `new` and released by `drop`.
    context: sys::CUcontext,
    total_bytes: u64,
    /// Created, currently unused events (`cuEventCreate` is not free).
    idle_events: Vec<sys::CUevent>,
    /// Events handed out by `record_event` and not given back to
    /// `destroy_event` yet; `drop` destroys them.
    events_in_use: BTreeSet<u64>,
    /// Driver failures seen in infallible methods (a `Cell` because
    /// `mem_get_info` takes `&self`).
    driver_failures: Cell<u64>,
    /// The driver can reserve address ranges and map memory into them, with
    /// a granularity that divides 2 MiB (the smallest page the allocator
    /// maps). Probed once in `new`.
    virtual_memory: bool,
    /// Address ranges reserved through the `Device` trait and not released:
    /// base address to size in bytes.
    address_ranges: BTreeMap<u64, u64>,
    /// Addresses from `cuMemAlloc` not freed yet; `drop` frees what is left.
    allocations: BTreeSet<u64>,
    /// Pages mapped through the `Device` trait's `map` and not unmapped, by
    /// address. Invariant: the pages do not overlap, and each lies inside
    /// one of `address_ranges`.
    pages: BTreeMap<u64, MappedPage>,
}

// SAFETY: the fields are driver handles (a device ordinal, a context, events)
// and plain numbers. CUDA driver handles are process-wide and may be used from
// any thread; the only per-thread state is which context is current, and every
// method makes `context` current on the calling thread before using any
// handle. `Cell` is `Send`. `CudaDevice` is not `Sync`: `&mut self` (or a
// front end's lock) serialises all use.
unsafe impl Send for CudaDevice {}

impl CudaDevice {
    /// The GPU with this index (CUDA's ordinal, as `cudaSetDevice` takes it).
    ///
    /// Fails with [`CudaError::NoDriver`] on a machine without the driver
    /// library, never panicking; with [`CudaError::InvalidDevice`] for an
    /// index the driver does not list.
    pub fn new(index: i32) -> Result<CudaDevice, CudaError> {
        let count = Self::device_count()?;
        if index < 0 || index >= count {
            return Err(CudaError::InvalidDevice { index, count });
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: the driver is loaded and initialised (`device_count`
        // succeeded); `device` is a valid out pointer; `index` is in range.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, index) }).map_err(Failure::into_cuda_error)?;
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: driver loaded and initialised; `device` came from
        // `cuDeviceGet`; `context` is a valid out pointer. The retain is
        // balanced by the release in `Drop`.
        check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) })
            .map_err(Failure::into_cuda_error)?;
        let mut this = CudaDevice {
            index,
            device,
            context,
            total_bytes: 0,
            idle_events: Vec::new(),
            events_in_use: BTreeSet::new(),
            driver_failures: Cell::new(0),
            virtual_memory: false,
            allocations: BTreeSet::new(),
            address_ranges: BTreeMap::new(),
            pages: BTreeMap::new(),
        };
        let mut total: usize = 0;
        // SAFETY: driver loaded; `device` is valid; `total` is a valid out pointer.
        check("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) })
            .map_err(Failure::into_cuda_error)?;
        this.total_bytes = total as u64;
        this.virtual_memory = this.probe_virtual_memory();
        Ok(this)
    }

    /// How many CUDA devices the driver sees (`cuInit` + `cuDeviceGetCount`).
    /// [`CudaError::NoDriver`] without the driver library.
    pub fn device_count() -> Result<i32, CudaError> {
        if !driver_available() {
            return Err(CudaError::NoDriver);
        }
        // SAFETY: the driver library is loaded (checked above), so cudarc
        // resolves the symbol instead of panicking; `cuInit(0)` is the
        // documented first call and may be repeated.
        check("cuInit", unsafe { sys::cuInit(0) }).map_err(Failure::into_cuda_error)?;
        let mut count = 0;
        // SAFETY: driver loaded and initialised; `count` is a valid out pointer.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) }).map_err(Failure::into_cuda_error)?;
        Ok(count)
    }

    /// Whether this GPU can back expandable segments: the driver reports
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` and its
    /// allocation granularity divides the 2 MiB small-pool page. A failed
    /// query counts as "no" (the allocator then uses `cuMemAlloc`, as
    /// PyTorch does without the attribute).
    fn probe_virtual_memory(&self) -> bool {
        let mut supported: std::ffi::c_int = 0;
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
        // SAFETY: driver loaded and initialised (`new` got this far);
        // `self.device` came from `cuDeviceGet`; `supported` is a valid out
        // pointer.
        let queried = check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut supported, attribute, self.device) });
        if queried.is_err() || supported == 0 {
            return false;
        }
        matches!(self.allocation_granularity(), Ok(g) if g > 0 && SMALLEST_PAGE_BYTES % g == 0)
    }

    /// The device index this was created for.
    pub fn index(&self) -> i32 {
        self.index
    }

    /// Bytes of memory on the device (`cuDeviceTotalMem`).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Driver failures in calls that cannot return an error (`free`, events,
    /// `mem_get_info`) since creation.
    pub fn driver_failure_count(&self) -> u64 {
        self.driver_failures.get()
    }

    /// The primary context made current on this thread until the guard drops.
    fn enter(&self) -> Result<CurrentContext, Failure> {
        // SAFETY: a `CudaDevice` exists only after the driver was loaded and
        // initialised in `new`, and `self.context` stays retained until `drop`,
        // which cannot run while `&self` is borrowed.
        unsafe { CurrentContext::enter(self.context) }
    }

    /// Counts a failure of an infallible method; prints the first few.
    fn note_failure(&self, failure: impl std::fmt::Display, what: &str) {
        let n = self.driver_failures.get() + 1;
        self.driver_failures.set(n);
        if n <= PRINTED_FAILURES {
            eprintln!("vramkit-cuda: device {}: {failure} during {what}", self.index);
            if n == PRINTED_FAILURES {
                eprintln!("vramkit-cuda: device {}: further driver failures are counted, not printed", self.index);
            }
        }
    }

    /// `malloc`'s driver part, with the context already current.
    fn alloc_raw(&self, size_bytes: u64) -> Result<DeviceAddr, Failure> {
        let _current = self.enter()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: driver loaded and the primary context current (guard);
        // `ptr` is a valid out pointer. `size_bytes` fits `usize` on the
        // 64-bit targets CUDA supports.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, size_bytes as usize) })?;
        Ok(DeviceAddr(ptr))
    }

    fn record_raw(&mut self, stream: StreamId) -> Result<EventId, Failure> {
        let _current = self.enter()?;
        let event = match self.idle_events.pop() {
            Some(event) => event,
            None => {
                let mut event: sys::CUevent = std::ptr::null_mut();
                let flags = sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32;
                // SAFETY: driver loaded, context current (guard); `event` is a
                // valid out pointer; the flags are a documented value.
                check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
                event
            }
        };
        // SAFETY: driver loaded, context current; `event` is a live event of
        // this context (created here or kept idle after a completed use);
        // `stream` is the raw handle of a stream the caller allocated on (a
        // front end's premise: PyTorch passes its live `cudaStream_t`s).
        let recorded = check("cuEventRecord", unsafe { sys::cuEventRecord(event, stream_handle(stream)) });
        if let Err(failure) = recorded {
            self.idle_events.push(event);
            return Err(failure);
        }
        let id = EventId(event as usize as u64);
        self.events_in_use.insert(id.0);
        Ok(id)
    }

    fn synchronize_stream(&self, stream: StreamId) -> Result<(), Failure> {
        let _current = self.enter()?;
        // SAFETY: driver loaded, context current; `stream` is a live stream
        // handle (see `record_raw`).
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream_handle(stream)) })
    }
}

/// The raw virtual-memory calls (`vmm.rs`), one page each, on this
/// device's context.
impl CudaDevice {
    /// `call` with the primary context current; a failure becomes a
    /// [`DeviceError`] (`OutOfMemory` of `requested_bytes` when the driver
    /// found no memory).
    fn in_context<T>(
        &self,
        requested_bytes: u64,
        call: impl FnOnce(&CurrentContext) -> Result<T, Failure>,
    ) -> Result<T, DeviceError> {
        self.enter().and_then(|current| call(&current)).map_err(|failure| failure.into_device_error(requested_bytes))
    }

    fn granularity(&self, option: sys::CUmemAllocationGranularity_flags) -> Result<u64, DeviceError> {
        self.in_context(0, |current| vmm::granularity(current, self.index, option))
    }

    /// The minimum granularity of `cuMemCreate` sizes and map addresses on
    /// this GPU (2 MiB on current hardware). Page sizes (2 MiB small pool,
    /// 20 MiB large pool in PyTorch) must be multiples of it.
    pub fn allocation_granularity(&self) -> Result<u64, DeviceError> {
        self.granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    }

    /// The granularity the driver recommends for performance.
    pub fn recommended_granularity(&self) -> Result<u64, DeviceError> {
        self.granularity(sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    }

    /// `cuMemAddressReserve`: a virtual range of `size_bytes` (a multiple of
    /// the granularity), aligned to `alignment_bytes` (0: the granularity).
    /// No memory backs it until [`CudaDevice::map_page`].
    ///
    /// This is the raw call; the `Device` trait's `reserve_address_range`
    /// (what the allocator uses) also remembers the range.
    pub fn reserve_address_range_aligned(&mut self, size_bytes: u64, alignment_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        self.in_context(size_bytes, |current| vmm::reserve_range(current, size_bytes, alignment_bytes))
    }

    /// `cuMemAddressFree` of a whole range from
    /// [`reserve_address_range_aligned`](CudaDevice::reserve_address_range_aligned),
    /// after every page in it was unmapped.
    pub fn free_address_range(&mut self, base: DeviceAddr, size_bytes: u64) -> Result<(), DeviceError> {
        self.in_context(0, |current| vmm::free_range(current, base, size_bytes))
    }

    /// Backs `[addr, addr + size_bytes)` of a reserved range with new physical
    /// memory, readable and writable from this GPU: `cuMemCreate`, `cuMemMap`,
    /// `cuMemSetAccess`. `addr` and `size_bytes` are multiples of the
    /// granularity. On failure nothing stays created or mapped.
    pub fn map_page(&mut self, addr: DeviceAddr, size_bytes: u64) -> Result<MappedPage, DeviceError> {
        self.in_context(size_bytes, |current| vmm::map_page(current, self.index, addr, size_bytes))
    }

    /// Unmaps a page and releases its physical memory: `cuMemUnmap`,
    /// `cuMemRelease`. The caller must have synchronised every stream that
    /// used the page (PyTorch synchronises the segment's stream first).
    /// If `cuMemUnmap` fails the page stays mapped and its memory is leaked
    /// (the context is broken then); it is never released twice.
    pub fn unmap_page(&mut self, page: MappedPage) -> Result<(), DeviceError> {
        self.in_context(0, |current| vmm::unmap_page(current, page))
    }
}

/// The `Device` trait's virtual-memory calls, built on the raw ones: `map`
/// creates one physical allocation per page (as PyTorch's
/// `ExpandableSegment` does) and the device keeps the [`MappedPage`]s by
/// address, so `unmap` of any run of whole pages finds their handles.
/// Errors are [`DeviceError`]s: `OutOfMemory` when `cuMemCreate` finds no
/// memory (the allocator then releases cache and retries).
impl CudaDevice {
    /// Bytes mapped through the `Device` trait's `map` and not unmapped yet.
    pub fn mapped_bytes(&self) -> u64 {
        self.pages.values().map(MappedPage::size_bytes).sum()
    }

    /// Address ranges reserved through the `Device` trait and not released yet.
    pub fn reserved_range_count(&self) -> usize {
        self.address_ranges.len()
    }

    /// `Device::reserve_address_range`: a granularity-aligned range, remembered.
    fn reserve_tracked_range(&mut self, size_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        let base = self.reserve_address_range_aligned(size_bytes, 0)?;
        self.address_ranges.insert(base.0, size_bytes);
        Ok(base)
    }

    /// `Device::release_address_range`. The trait gives no way to fail: a
    /// driver failure is counted and printed, and the range is forgotten
    /// (the address space is lost, nothing is freed twice).
    fn release_tracked_range(&mut self, base: DeviceAddr, size_bytes: u64) {
        let known = self.address_ranges.remove(&base.0);
        debug_assert_eq!(known, Some(size_bytes), "release of {base}+{size_bytes}, not a reservation of this device");
        debug_assert!(
            self.pages.range(base.0..base.0 + size_bytes).next().is_none(),
            "release of reservation {base} while pages are mapped"
        );
        let result = self.enter().and_then(|current| vmm::free_range(&current, base, size_bytes));
        if let Err(failure) = result {
            self.note_failure(failure, "release_address_range");
        }
    }

    /// `Device::map`: one new physical allocation of `page_bytes` per page of
    /// `[addr, addr + size_bytes)`, mapped read-write. All or nothing: when a
    /// page fails, the pages this call mapped are unmapped and released
    /// before the error (`OutOfMemory` for `CUDA_ERROR_OUT_OF_MEMORY`) is
    /// returned.
    fn map_pages(&mut self, addr: DeviceAddr, size_bytes: u64, page_bytes: u64) -> Result<(), DeviceError> {
        debug_assert!(page_bytes > 0 && size_bytes % page_bytes == 0, "map of {size_bytes} bytes in pages of {page_bytes}");
        debug_assert!(
            self.pages.range(addr.0..addr.0 + size_bytes).next().is_none(),
            "map of {addr}+{size_bytes} over mapped pages"
        );
        let mut mapped: Vec<MappedPage> = Vec::with_capacity((size_bytes / page_bytes.max(1)) as usize);
        let mut offset = 0;
        while offset < size_bytes {
            match self.map_page(addr.offset(offset), page_bytes) {
                Ok(page) => mapped.push(page),
                Err(error) => {
                    for page in mapped {
                        // No kernel has seen these pages yet, so they can go
                        // back without a synchronize.
                        if let Err(undo) = self.unmap_page(page) {
                            self.note_failure(undo, "map (undoing the pages mapped before a failure)");
                        }
                    }
                    return Err(match error {
                        DeviceError::OutOfMemory { .. } => DeviceError::OutOfMemory { requested_bytes: size_bytes },
                        other => other,
                    });
                }
            }
            offset += page_bytes;
        }
        for page in mapped {
            self.pages.insert(page.addr().0, page);
        }
        Ok(())
    }

    /// `Device::unmap`: unmaps and releases every page mapped by `map` in
    /// `[addr, addr + size_bytes)`. The trait names no stream, so this
    /// first waits for all work on the device (`cuCtxSynchronize`, what
    /// PyTorch's `ExpandableSegment` does when it has no stream): unlike
    /// `cuMemFree`, `cuMemUnmap` does not wait for kernels still using the
    /// memory. Failures are counted and printed; a page whose unmap failed
    /// is forgotten (leaked), never released twice.
    fn unmap_pages(&mut self, addr: DeviceAddr, size_bytes: u64) {
        let end = addr.0 + size_bytes;
        let inside: Vec<u64> = self.pages.range(addr.0..end).map(|(&a, _)| a).collect();
        if inside.is_empty() {
            debug_assert_eq!(size_bytes, 0, "unmap of {addr}+{size_bytes}, nothing mapped there");
            return;
        }
        let synchronized = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current (guard); waits for the
            // context's work, touching no memory of ours.
            check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
        });
        if let Err(failure) = synchronized {
            self.note_failure(failure, "unmap (synchronize before unmapping)");
        }
        let mut unmapped = 0;
        for page_addr in inside {
            let page = self.pages.remove(&page_addr).expect("collected from the map above");
            debug_assert!(page.addr().0 + page.size_bytes() <= end, "unmap of {addr}+{size_bytes} cuts page {page_addr:#x}");
            unmapped += page.size_bytes();
            if let Err(error) = self.unmap_page(page) {
                self.note_failure(error, "unmap");
            }
        }
        debug_assert_eq!(unmapped, size_bytes, "unmap of {addr}+{size_bytes}, not all of it mapped");
    }
}

/// The raw `CUstream` a [`StreamId`] names (0: the legacy default stream).
pub(crate) fn stream_handle(stream: StreamId) -> sys::CUstream {
    stream.0 as usize as sys::CUstream
}

fn event_handle(event: EventId) -> sys::CUevent {
    event.0 as usize as sys::CUevent
}

impl Device for CudaDevice {
    fn malloc(&mut self, size_bytes: u64, _stream: StreamId) -> Result<DeviceAddr, DeviceError> {
        let addr = self.alloc_raw(size_bytes).map_err(|failure| failure.into_device_error(size_bytes))?;
        self.allocations.insert(addr.0);
        Ok(addr)
    }

    fn free(&mut self, addr: DeviceAddr, _size_bytes: u64) {
        let known = self.allocations.remove(&addr.0);
        debug_assert!(known, "free of {addr}, not a live cuMemAlloc of this device");
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current (guard); `addr` was
            // returned by `cuMemAlloc` in `malloc` and the allocator frees it
            // exactly once (the `Device` contract).
            check("cuMemFree", unsafe { sys::cuMemFree_v2(addr.0) })
        });
        if let Err(failure) = result {
            self.note_failure(failure, "free");
        }
    }

    fn mem_get_info(&self) -> MemInfo {
        let mut free: usize = 0;
        let mut total: usize = 0;
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current (guard); both out
            // pointers are valid.
            check("cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })
        });
        match result {
            Ok(()) => MemInfo { free_bytes: free as u64, total_bytes: total as u64 },
            Err(failure) => {
                self.note_failure(failure, "mem_get_info");
                MemInfo { free_bytes: 0, total_bytes: self.total_bytes }
            }
        }
    }

    fn record_event(&mut self, stream: StreamId) -> EventId {
        match self.record_raw(stream) {
            Ok(event) => event,
            Err(failure) => {
                // No event: wait for the stream now, so "complete" is true.
                self.note_failure(failure, "record_event");
                if let Err(failure) = self.synchronize_stream(stream) {
                    self.note_failure(failure, "record_event (stream synchronize fallback)");
                }
                COMPLETE_EVENT
            }
        }
    }

    fn query_event(&mut self, event: EventId) -> bool {
        if event == COMPLETE_EVENT {
            return true;
        }
        let result = self.enter().map(|_current| {
            // SAFETY: driver loaded, context current; `event` is a live event
            // handed out by `record_event` and not yet given to `destroy_event`
            // (the `Device` contract).
            unsafe { sys::cuEventQuery(event_handle(event)) }
        });
        match result {
            Ok(CUresult::CUDA_SUCCESS) => true,
            Ok(CUresult::CUDA_ERROR_NOT_READY) => false,
            Ok(other) => {
                // Keep the block unusable rather than risk reuse under a
                // running kernel; a synchronize (empty_cache) settles it.
                self.note_failure(Failure { call: "cuEventQuery", result: other }, "query_event");
                false
            }
            Err(failure) => {
                self.note_failure(failure, "query_event");
                false
            }
        }
    }

    fn synchronize_event(&mut self, event: EventId) {
        if event == COMPLETE_EVENT {
            return;
        }
        let result = self.enter().and_then(|_current| {
            // SAFETY: as in `query_event`.
            check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(event_handle(event)) })
        });
        if let Err(failure) = result {
            self.note_failure(failure, "synchronize_event");
        }
    }

    fn destroy_event(&mut self, event: EventId) {
        if event == COMPLETE_EVENT {
            return;
        }
        let known = self.events_in_use.remove(&event.0);
        debug_assert!(known, "destroy of event {event:?}, not one handed out and live");
        if self.idle_events.len() < EVENT_POOL_CAPACITY {
            self.idle_events.push(event_handle(event));
            return;
        }
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current; the event is live and
            // the allocator destroys each event once.
            check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(event_handle(event)) })
        });
        if let Err(failure) = result {
            self.note_failure(failure, "destroy_event");
        }
    }

    fn supports_virtual_memory(&self) -> bool {
        self.virtual_memory
    }

    fn reserve_address_range(&mut self, size_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        self.reserve_tracked_range(size_bytes)
    }

    fn release_address_range(&mut self, addr: DeviceAddr, size_bytes: u64) {
        self.release_tracked_range(addr, size_bytes);
    }

    fn map(&mut self, addr: DeviceAddr, size_bytes: u64, page_bytes: u64) -> Result<(), DeviceError> {
        self.map_pages(addr, size_bytes, page_bytes)
    }

    fn unmap(&mut self, addr: DeviceAddr, size_bytes: u64) {
        self.unmap_pages(addr, size_bytes);
    }

    fn time_us(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }
}

/// Dropping a `CudaDevice` gives back everything it took: it waits for the
/// device's work, frees what `cuMemAlloc` gave and `free` did not get,
/// unmaps and releases every mapped page and reserved range, destroys its
/// events and releases the primary context. (A caching allocator dropped
/// with memory cached or in use thereby returns it all; pointers into it
/// are dangling from then on, as with any owner that is dropped.)
impl Drop for CudaDevice {
    fn drop(&mut self) {
        match self.enter() {
            Ok(current) => {
                // SAFETY: driver loaded, context current (guard); waits for
                // the context's work before its memory goes back.
                if let Err(failure) = check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() }) {
                    self.note_failure(failure, "drop (synchronize)");
                }
                for addr in std::mem::take(&mut self.allocations) {
                    // SAFETY: driver loaded, context current; `addr` came
                    // from `cuMemAlloc` and `free` has not freed it (it
                    // would have removed it from `allocations`).
                    if let Err(failure) = check("cuMemFree", unsafe { sys::cuMemFree_v2(addr) }) {
                        self.note_failure(failure, "drop (free)");
                    }
                }
                let in_use = std::mem::take(&mut self.events_in_use).into_iter().map(|id| event_handle(EventId(id)));
                for event in self.idle_events.drain(..).chain(in_use) {
                    // SAFETY: driver loaded, context current; each event is
                    // live (idle in the pool, or handed out and not destroyed)
                    // and destroyed once here; the allocator that held the
                    // handed-out ones is gone.
                    let _ = unsafe { sys::cuEventDestroy_v2(event) };
                }
                drop(current);
            }
            Err(failure) => self.note_failure(failure, "drop"),
        }
        for (_, page) in std::mem::take(&mut self.pages) {
            if let Err(error) = self.unmap_page(page) {
                self.note_failure(error, "drop (unmap)");
            }
        }
        for (base, size_bytes) in std::mem::take(&mut self.address_ranges) {
            if let Err(error) = self.free_address_range(DeviceAddr(base), size_bytes) {
                self.note_failure(error, "drop (release address range)");
            }
        }
        // SAFETY: driver loaded; balances the `cuDevicePrimaryCtxRetain` in
        // `new`. Nothing of this device uses the context any more.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

//! The virtual-memory calls expandable segments are built on (spec section 6):
//! reserve a virtual range once, then back it page by page with physical
//! memory (`cuMemCreate` + `cuMemMap` + `cuMemSetAccess`) and give pages back
//! (`cuMemUnmap` + `cuMemRelease`) without moving any address.
//!
//! ```text
//!  reserve_address_range(size)          one VA range, no memory yet
//!  |-------- unmapped --------------------------------------------|
//!  map_page(base, page) x2
//!  |== page 0 ==|== page 1 ==|---------- unmapped ----------------|
//!  unmap_page(page 0)
//!  |-- unmapped-|== page 1 ==|---------- unmapped ----------------|
//! ```
//!
//! Two layers. The inherent methods ([`CudaDevice::map_page`],
//! [`CudaDevice::unmap_page`], ...) are the raw calls, one page each, with
//! ownership of a mapping in a [`MappedPage`]. The `Device` trait's
//! `reserve_address_range`/`map`/`unmap`/`release_address_range`, which the
//! caching allocator uses, are built on them here: `map` creates one
//! physical allocation per page (as PyTorch's `ExpandableSegment` does) and
//! the device keeps the [`MappedPage`]s by address, so `unmap` of any run
//! of whole pages finds their handles. Errors are [`DeviceError`]s:
//! `OutOfMemory` when `cuMemCreate` finds no memory (the allocator then
//! releases cache and retries).

use crate::device::CudaDevice;
use crate::driver::{check, Failure};
use cudarc::driver::sys;
use vramkit_core::{DeviceAddr, DeviceError};

/// Physical memory mapped at an address of a reserved range. Owning it is
/// the right to unmap it: it is neither `Clone` nor `Copy`, and
/// [`CudaDevice::unmap_page`] consumes it. Dropping it without unmapping
/// leaks the memory until the process ends (never a double release).
#[derive(Debug, PartialEq, Eq)]
pub struct MappedPage {
    addr: DeviceAddr,
    size_bytes: u64,
    /// The `CUmemGenericAllocationHandle` of the physical memory.
    handle: sys::CUmemGenericAllocationHandle,
}

impl MappedPage {
    /// Where the memory is mapped.
    pub fn addr(&self) -> DeviceAddr {
        self.addr
    }

    /// Bytes mapped (a multiple of the allocation granularity).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
}

impl CudaDevice {
    /// Pinned device memory on this GPU, no shareable handle.
    fn allocation_prop(&self) -> sys::CUmemAllocationProp {
        sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: self.location(),
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        }
    }

    fn location(&self) -> sys::CUmemLocation {
        sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.index() }
    }

    fn granularity(&self, option: sys::CUmemAllocationGranularity_flags) -> Result<u64, DeviceError> {
        let prop = self.allocation_prop();
        let mut granularity: usize = 0;
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current (guard); `granularity`
            // is a valid out pointer and `prop` a fully initialised property
            // struct that outlives the call.
            check("cuMemGetAllocationGranularity", unsafe {
                sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option)
            })
        });
        result.map(|()| granularity as u64).map_err(|failure| failure.into_device_error(0))
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
        let mut base: sys::CUdeviceptr = 0;
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current; `base` is a valid out
            // pointer; address hint 0 and flags 0 are the documented defaults.
            check("cuMemAddressReserve", unsafe {
                sys::cuMemAddressReserve(&mut base, size_bytes as usize, alignment_bytes as usize, 0, 0)
            })
        });
        result.map(|()| DeviceAddr(base)).map_err(|failure| failure.into_device_error(size_bytes))
    }

    /// `cuMemAddressFree` of a whole range from
    /// [`reserve_address_range_aligned`](CudaDevice::reserve_address_range_aligned),
    /// after every page in it was unmapped.
    pub fn free_address_range(&mut self, base: DeviceAddr, size_bytes: u64) -> Result<(), DeviceError> {
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current. The driver checks that
            // (base, size) is a reservation it made and fails otherwise; no
            // host memory is involved.
            check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(base.0, size_bytes as usize) })
        });
        result.map_err(|failure| failure.into_device_error(0))
    }

    /// Backs `[addr, addr + size_bytes)` of a reserved range with new physical
    /// memory, readable and writable from this GPU: `cuMemCreate`, `cuMemMap`,
    /// `cuMemSetAccess`. `addr` and `size_bytes` are multiples of the
    /// granularity. On failure nothing stays created or mapped.
    pub fn map_page(&mut self, addr: DeviceAddr, size_bytes: u64) -> Result<MappedPage, DeviceError> {
        let prop = self.allocation_prop();
        let access = sys::CUmemAccessDesc {
            location: self.location(),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let size = size_bytes as usize;
        let current = self.enter().map_err(|failure| failure.into_device_error(size_bytes))?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: driver loaded, context current (`current`); `handle` is a
        // valid out pointer; `prop` is fully initialised and outlives the call.
        check("cuMemCreate", unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) })
            .map_err(|failure| failure.into_device_error(size_bytes))?;
        // SAFETY: driver loaded, context current; `handle` was just created
        // with `size` bytes; offset 0 and flags 0 are required values. The
        // driver refuses an address outside a reservation or already mapped.
        let mapped = check("cuMemMap", unsafe { sys::cuMemMap(addr.0, size, 0, handle, 0) });
        let accessible = mapped.and_then(|()| {
            // SAFETY: driver loaded, context current; the range was mapped just
            // above; `access` is one initialised descriptor, matching count 1.
            check("cuMemSetAccess", unsafe { sys::cuMemSetAccess(addr.0, size, &access, 1) }).inspect_err(|_| {
                // SAFETY: undoes the successful `cuMemMap` above; nothing
                // else has seen the address yet.
                let _ = unsafe { sys::cuMemUnmap(addr.0, size) };
            })
        });
        if let Err(failure) = accessible {
            // SAFETY: `handle` was created above and is no longer mapped
            // anywhere (the map failed or was undone), so releasing it frees
            // the memory exactly once.
            let _ = unsafe { sys::cuMemRelease(handle) };
            drop(current);
            return Err(failure.into_device_error(size_bytes));
        }
        Ok(MappedPage { addr, size_bytes, handle })
    }

    /// Unmaps a page and releases its physical memory: `cuMemUnmap`,
    /// `cuMemRelease`. The caller must have synchronised every stream that
    /// used the page (PyTorch synchronises the segment's stream first).
    /// If `cuMemUnmap` fails the page stays mapped and its memory is leaked
    /// (the context is broken then); it is never released twice.
    pub fn unmap_page(&mut self, page: MappedPage) -> Result<(), DeviceError> {
        let result = self.enter().and_then(|_current| {
            // SAFETY: driver loaded, context current; `page` is the unique
            // owner of this mapping (`MappedPage` is neither Clone nor Copy
            // and is consumed here), so it is unmapped once.
            check("cuMemUnmap", unsafe { sys::cuMemUnmap(page.addr.0, page.size_bytes as usize) })?;
            // SAFETY: the handle is owned by `page` and now mapped nowhere;
            // releasing it once frees the physical memory.
            check("cuMemRelease", unsafe { sys::cuMemRelease(page.handle) })
        });
        result.map_err(|failure: Failure| failure.into_device_error(0))
    }
}

/// The `Device` trait's virtual-memory calls (see the module docs).
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
    pub(crate) fn reserve_tracked_range(&mut self, size_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        let base = self.reserve_address_range_aligned(size_bytes, 0)?;
        self.address_ranges.insert(base.0, size_bytes);
        Ok(base)
    }

    /// `Device::release_address_range`. The trait gives no way to fail: a
    /// driver failure is counted and printed, and the range is forgotten
    /// (the address space is lost, nothing is freed twice).
    pub(crate) fn release_tracked_range(&mut self, base: DeviceAddr, size_bytes: u64) {
        let known = self.address_ranges.remove(&base.0);
        debug_assert_eq!(known, Some(size_bytes), "release of {base}+{size_bytes}, not a reservation of this device");
        debug_assert!(
            self.pages.range(base.0..base.0 + size_bytes).next().is_none(),
            "release of reservation {base} while pages are mapped"
        );
        let result = self.enter().and_then(|_current| {
            // SAFETY: as in `free_address_range`: the driver checks that
            // (base, size) is one of its reservations.
            check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(base.0, size_bytes as usize) })
        });
        if let Err(failure) = result {
            self.note_failure(failure, "release_address_range");
        }
    }

    /// `Device::map`: one new physical allocation of `page_bytes` per page of
    /// `[addr, addr + size_bytes)`, mapped read-write. All or nothing: when a
    /// page fails, the pages this call mapped are unmapped and released
    /// before the error (`OutOfMemory` for `CUDA_ERROR_OUT_OF_MEMORY`) is
    /// returned.
    pub(crate) fn map_pages(&mut self, addr: DeviceAddr, size_bytes: u64, page_bytes: u64) -> Result<(), DeviceError> {
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
    pub(crate) fn unmap_pages(&mut self, addr: DeviceAddr, size_bytes: u64) {
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

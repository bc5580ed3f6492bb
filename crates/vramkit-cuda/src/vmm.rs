//! The virtual-memory calls expandable segments are built on (spec section 6):
//! reserve a virtual range once, then back it page by page with physical
//! memory (`cuMemCreate` + `cuMemMap` + `cuMemSetAccess`) and give pages back
//! (`cuMemUnmap` + `cuMemRelease`) without moving any address.
//!
//! ```text
//!  reserve_range(size)                  one VA range, no memory yet
//!  |-------- unmapped --------------------------------------------|
//!  map_page(base, page) x2
//!  |== page 0 ==|== page 1 ==|---------- unmapped ----------------|
//!  unmap_page(page 0)
//!  |-- unmapped-|== page 1 ==|---------- unmapped ----------------|
//! ```
//!
//! Only the raw calls live here, one page each, with ownership of a mapping
//! in a [`MappedPage`]. They know no device: each runs on the context its
//! [`CurrentContext`] guard keeps current, for the GPU ordinal it is given.
//! [`CudaDevice`](crate::CudaDevice) makes its context current around them
//! (its public `map_page`, `unmap_page`, ...) and builds the `Device`
//! trait's `reserve_address_range`/`map`/`unmap`/`release_address_range`
//! on them.

use crate::driver::{check, CurrentContext, Failure};
use cudarc::driver::sys;
use vramkit_core::DeviceAddr;

/// Physical memory mapped at an address of a reserved range. Owning it is
/// the right to unmap it: it is neither `Clone` nor `Copy`, and
/// [`CudaDevice::unmap_page`](crate::CudaDevice::unmap_page) consumes it.
/// Dropping it without unmapping leaks the memory until the process ends
/// (never a double release).
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

/// Pinned device memory on GPU `ordinal`, no shareable handle.
fn allocation_prop(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

fn location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }
}

/// `cuMemGetAllocationGranularity` of [`allocation_prop`] memory on GPU
/// `ordinal`, the minimum or the recommended one (`option`).
pub(crate) fn granularity(
    _current: &CurrentContext,
    ordinal: i32,
    option: sys::CUmemAllocationGranularity_flags,
) -> Result<u64, Failure> {
    let prop = allocation_prop(ordinal);
    let mut granularity: usize = 0;
    // SAFETY: driver loaded, context current (`_current`); `granularity`
    // is a valid out pointer and `prop` a fully initialised property
    // struct that outlives the call.
    check("cuMemGetAllocationGranularity", unsafe { sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option) })?;
    Ok(granularity as u64)
}

/// `cuMemAddressReserve`: a virtual range of `size_bytes` (a multiple of
/// the granularity), aligned to `alignment_bytes` (0: the granularity).
pub(crate) fn reserve_range(_current: &CurrentContext, size_bytes: u64, alignment_bytes: u64) -> Result<DeviceAddr, Failure> {
    let mut base: sys::CUdeviceptr = 0;
    // SAFETY: driver loaded, context current (`_current`); `base` is a valid
    // out pointer; address hint 0 and flags 0 are the documented defaults.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut base, size_bytes as usize, alignment_bytes as usize, 0, 0)
    })?;
    Ok(DeviceAddr(base))
}

/// `cuMemAddressFree` of a whole range from [`reserve_range`], after every
/// page in it was unmapped.
pub(crate) fn free_range(_current: &CurrentContext, base: DeviceAddr, size_bytes: u64) -> Result<(), Failure> {
    // SAFETY: driver loaded, context current (`_current`). The driver checks
    // that (base, size) is a reservation it made and fails otherwise; no
    // host memory is involved.
    check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(base.0, size_bytes as usize) })
}

/// Backs `[addr, addr + size_bytes)` of a reserved range with new physical
/// memory of GPU `ordinal`, readable and writable from it: `cuMemCreate`,
/// `cuMemMap`, `cuMemSetAccess`. `addr` and `size_bytes` are multiples of
/// the granularity. On failure nothing stays created or mapped.
pub(crate) fn map_page(
    _current: &CurrentContext,
    ordinal: i32,
    addr: DeviceAddr,
    size_bytes: u64,
) -> Result<MappedPage, Failure> {
    let prop = allocation_prop(ordinal);
    let access = sys::CUmemAccessDesc {
        location: location(ordinal),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    let size = size_bytes as usize;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: driver loaded, context current (`_current`); `handle` is a
    // valid out pointer; `prop` is fully initialised and outlives the call.
    check("cuMemCreate", unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) })?;
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
        return Err(failure);
    }
    Ok(MappedPage { addr, size_bytes, handle })
}

/// Unmaps a page and releases its physical memory: `cuMemUnmap`,
/// `cuMemRelease`. The caller must have synchronised every stream that
/// used the page (PyTorch synchronises the segment's stream first).
/// If `cuMemUnmap` fails the page stays mapped and its memory is leaked
/// (the context is broken then); it is never released twice.
pub(crate) fn unmap_page(_current: &CurrentContext, page: MappedPage) -> Result<(), Failure> {
    // SAFETY: driver loaded, context current (`_current`); `page` is the
    // unique owner of this mapping (`MappedPage` is neither Clone nor Copy
    // and is consumed here), so it is unmapped once.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(page.addr.0, page.size_bytes as usize) })?;
    // SAFETY: the handle is owned by `page` and now mapped nowhere;
    // releasing it once frees the physical memory.
    check("cuMemRelease", unsafe { sys::cuMemRelease(page.handle) })
}

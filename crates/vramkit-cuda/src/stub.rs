//! `CudaDevice` without the `cuda` feature: the same API, but `new` always
//! fails with [`CudaError::NotBuilt`], so a `CudaDevice` can never exist and
//! every method body is unreachable.

use crate::CudaError;
use std::convert::Infallible;
use vramkit_core::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};

/// Whether the CUDA driver library can be loaded: never, in this build.
pub fn driver_available() -> bool {
    false
}

/// One CUDA GPU. This build has no CUDA support (feature `cuda` is off), so
/// none can be created.
#[derive(Debug)]
pub struct CudaDevice {
    never: Infallible,
}

/// Physical memory mapped at an address of a reserved range (never exists
/// in this build).
#[derive(Debug, PartialEq, Eq)]
pub struct MappedPage {
    never: Infallible,
}

impl MappedPage {
    /// Where the memory is mapped.
    pub fn addr(&self) -> DeviceAddr {
        match self.never {}
    }

    /// Bytes mapped.
    pub fn size_bytes(&self) -> u64 {
        match self.never {}
    }
}

impl CudaDevice {
    /// Always [`CudaError::NotBuilt`].
    pub fn new(_index: i32) -> Result<CudaDevice, CudaError> {
        Err(CudaError::NotBuilt)
    }

    /// Always [`CudaError::NotBuilt`].
    pub fn device_count() -> Result<i32, CudaError> {
        Err(CudaError::NotBuilt)
    }

    /// The device index.
    pub fn index(&self) -> i32 {
        match self.never {}
    }

    /// Bytes of memory on the device.
    pub fn total_bytes(&self) -> u64 {
        match self.never {}
    }

    /// Driver failures in infallible calls.
    pub fn driver_failure_count(&self) -> u64 {
        match self.never {}
    }

    /// Minimum allocation granularity.
    pub fn allocation_granularity(&self) -> Result<u64, DeviceError> {
        match self.never {}
    }

    /// Recommended allocation granularity.
    pub fn recommended_granularity(&self) -> Result<u64, DeviceError> {
        match self.never {}
    }

    /// `cuMemAddressReserve`.
    pub fn reserve_address_range_aligned(
        &mut self,
        _size_bytes: u64,
        _alignment_bytes: u64,
    ) -> Result<DeviceAddr, DeviceError> {
        match self.never {}
    }

    /// `cuMemAddressFree`.
    pub fn free_address_range(&mut self, _base: DeviceAddr, _size_bytes: u64) -> Result<(), DeviceError> {
        match self.never {}
    }

    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`.
    pub fn map_page(&mut self, _addr: DeviceAddr, _size_bytes: u64) -> Result<MappedPage, DeviceError> {
        match self.never {}
    }

    /// `cuMemUnmap` + `cuMemRelease`.
    pub fn unmap_page(&mut self, _page: MappedPage) -> Result<(), DeviceError> {
        match self.never {}
    }

    /// Bytes mapped through the `Device` trait.
    pub fn mapped_bytes(&self) -> u64 {
        match self.never {}
    }

    /// Address ranges reserved through the `Device` trait.
    pub fn reserved_range_count(&self) -> usize {
        match self.never {}
    }
}

impl Device for CudaDevice {
    fn malloc(&mut self, _size_bytes: u64, _stream: StreamId) -> Result<DeviceAddr, DeviceError> {
        match self.never {}
    }
    fn free(&mut self, _addr: DeviceAddr, _size_bytes: u64) {
        match self.never {}
    }
    fn mem_get_info(&self) -> MemInfo {
        match self.never {}
    }
    fn record_event(&mut self, _stream: StreamId) -> EventId {
        match self.never {}
    }
    fn query_event(&mut self, _event: EventId) -> bool {
        match self.never {}
    }
    fn synchronize_event(&mut self, _event: EventId) {
        match self.never {}
    }
    fn destroy_event(&mut self, _event: EventId) {
        match self.never {}
    }
    fn supports_virtual_memory(&self) -> bool {
        match self.never {}
    }
}

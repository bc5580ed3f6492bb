#![doc = include_str!("../README.md")]
// The driver API is FFI: this crate is one of the few allowed `unsafe`
// (STYLE.md). Every block says why it is sound.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![warn(missing_docs)]

mod error;

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod vmm;

#[cfg(not(feature = "cuda"))]
mod stub;

pub use error::CudaError;

#[cfg(feature = "cuda")]
pub use device::CudaDevice;
#[cfg(feature = "cuda")]
pub use driver::driver_available;
#[cfg(feature = "cuda")]
pub use vmm::MappedPage;

#[cfg(not(feature = "cuda"))]
pub use stub::{driver_available, CudaDevice, MappedPage};

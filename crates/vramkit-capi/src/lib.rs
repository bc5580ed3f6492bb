#![doc = include_str!("../README.md")]
// A C library: `#[no_mangle]` exports and raw pointers are its job. This is
// one of the few crates allowed `unsafe` (STYLE.md); every block says why
// it is sound.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![warn(missing_docs)]

mod error;
pub mod ffi;
mod lock;
mod panic;
pub mod process;
mod registry;
mod report;
pub mod settings;
mod shared;
pub mod snapshot_json;

pub use error::Error;
pub use settings::Backend;
pub use shared::SharedAllocator;

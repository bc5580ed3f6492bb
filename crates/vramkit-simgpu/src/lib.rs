#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod build;
mod fetch;
mod pins;
mod preset;
mod shipped;
mod sources;
mod stack;
mod symbols;
mod unavailable;
mod venv;

pub use build::RUNTIME_ALIASES;
pub use fetch::Headers;
pub use pins::pinned_cudnn_version;
pub use preset::{Preset, PRESETS};
pub use shipped::{user_cache_dir, SHIPPED_ENV};
pub use sources::{Source, SOURCES};
pub use stack::Stack;
pub use symbols::{libraries, Library, CUDA_MAJORS};
pub use unavailable::REQUIRE_ENV;
pub use venv::{TorchEnv, TORCH_PYTHON_DEPENDENCIES};

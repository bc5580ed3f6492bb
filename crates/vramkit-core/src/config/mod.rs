//! Allocator settings: the `PYTORCH_CUDA_ALLOC_CONF` keys as a typed struct.
//!
//! `AllocatorConfig::pytorch_default()` is what PyTorch runs with when the
//! variable is unset. [`AllocatorConfig::parse`] reads the string form
//! (`parse.rs`), [`AllocatorConfigBuilder`] is the typed form, and
//! [`AllocatorConfig::update`] changes only the keys a string names, and
//! [`AllocatorConfig::set_allocator_settings_pytorch`] replays PyTorch's own
//! runtime setter, which first resets some keys it is not given.
//! Behaviour that differs between PyTorch releases is in [`Compat`], and
//! [`PytorchRelease::compat`] says which switches a release follows.

mod compat;
mod error;
mod parse;
mod release;

pub use compat::{Compat, Generation, SizeTies};
pub use release::PytorchRelease;
pub use error::ConfigError;

use crate::rounding::{LARGE_BUFFER, ROUNDUP_INTERVALS};

/// Which allocator PyTorch uses (`backend:`). vramkit models `native`; the
/// other value is accepted so real settings strings parse.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// The caching allocator (`backend:native`), the default.
    #[default]
    Native,
    /// `backend:cudaMallocAsync`: CUDA's own stream-ordered allocator.
    CudaMallocAsync,
}

/// Every setting of PyTorch's CUDA caching allocator.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AllocatorConfig {
    /// `max_split_size_mb`, in bytes. Blocks of this size or more are never
    /// split, and only requests of this size or more may reuse them.
    /// `None` is PyTorch's default: unlimited (`SIZE_MAX`).
    pub max_split_size_bytes: Option<u64>,
    /// `max_non_split_rounding_mb`, in bytes: an oversize request may reuse a
    /// cached oversize block less than this many bytes larger than it.
    /// Default 20 MiB (`large_segment_size`).
    pub max_non_split_rounding_bytes: u64,
    /// `large_segment_size_mb` (R26), in bytes: the segment size for rounded
    /// requests in (1 MiB, 10 MiB), and the large-pool expandable page. Default 20 MiB.
    pub large_segment_size_bytes: u64,
    /// `roundup_power2_divisions`, resolved to one entry per size class
    /// (index 0: < 2 MiB, index i: [2^i, 2^(i+1)) MiB, index 15: >= 32 GiB).
    /// 0 or 1 means no power-of-two rounding for that class.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` in (0, 1); 0 means off (the default).
    /// Only acts when a memory fraction limit is in effect.
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`: grow one virtual range per stream instead of
    /// calling `cudaMalloc` for each segment.
    pub expandable_segments: bool,
    /// `per_process_memory_fraction` in [0, 1]; 1.0 (the default) means no limit (R26).
    pub per_process_memory_fraction: f64,
    /// `release_lock_on_cudamalloc`: drop the device lock around `cudaMalloc`.
    /// Changes thread interleavings only, never a decision.
    pub release_lock_on_cudamalloc: bool,
    /// `graph_capture_record_stream_reuse`: affects frees during CUDA-graph capture only.
    pub graph_capture_record_stream_reuse: bool,
    /// `backend`.
    pub backend: Backend,
    /// `pinned_use_cuda_host_register` (host allocator; accepted, not used).
    pub pinned_use_cuda_host_register: bool,
    /// `pinned_num_register_threads` (host allocator; accepted, not used). Default 1.
    pub pinned_num_register_threads: u64,
    /// `pinned_use_background_threads` (host allocator; accepted, not used).
    pub pinned_use_background_threads: bool,
    /// `pinned_reserve_segment_size_mb` (host allocator; accepted, not used). Default 0.
    pub pinned_reserve_segment_size_mb: u64,
    /// Behaviour that changed between PyTorch releases.
    pub compat: Compat,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self::pytorch_default()
    }
}

impl AllocatorConfig {
    /// PyTorch's settings with `PYTORCH_CUDA_ALLOC_CONF` unset (R26).
    pub const fn pytorch_default() -> Self {
        AllocatorConfig {
            max_split_size_bytes: None,
            max_non_split_rounding_bytes: LARGE_BUFFER,
            large_segment_size_bytes: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            per_process_memory_fraction: 1.0,
            release_lock_on_cudamalloc: false,
            graph_capture_record_stream_reuse: false,
            backend: Backend::Native,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            pinned_reserve_segment_size_mb: 0,
            compat: Compat::R26,
        }
    }

    /// Settings for one PyTorch generation, otherwise PyTorch's defaults.
    pub fn for_generation(generation: Generation) -> Self {
        AllocatorConfig { compat: Compat::of(generation), ..Self::pytorch_default() }
    }

    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string on top of PyTorch's defaults.
    pub fn parse(conf: &str) -> Result<Self, ConfigError> {
        Self::parse_with_compat(conf, Compat::R26)
    }

    /// Parses a settings string as the PyTorch with these switches would:
    /// which keys exist and their limits depend on the generation.
    pub fn parse_with_compat(conf: &str, compat: Compat) -> Result<Self, ConfigError> {
        let mut config = AllocatorConfig { compat, ..Self::pytorch_default() };
        config.update(conf)?;
        Ok(config)
    }

    /// Applies the keys `conf` names, leaving every other key as it is.
    /// On error nothing changes.
    pub fn update(&mut self, conf: &str) -> Result<(), ConfigError> {
        let mut next = self.clone();
        parse::apply(&mut next, conf)?;
        *self = next;
        Ok(())
    }

    /// A typed builder starting from PyTorch's defaults.
    pub fn builder() -> AllocatorConfigBuilder {
        AllocatorConfigBuilder { config: Self::pytorch_default() }
    }

    /// `max_split_size` as PyTorch stores it: `u64::MAX` when unlimited.
    #[inline]
    pub fn max_split_size(&self) -> u64 {
        self.max_split_size_bytes.unwrap_or(u64::MAX)
    }

    /// The bytes by which a cached block may exceed an oversize request and
    /// still be reused whole.
    #[inline]
    pub fn oversize_tolerance(&self) -> u64 {
        if self.compat.fixed_oversize_tolerance {
            LARGE_BUFFER
        } else {
            self.max_non_split_rounding_bytes
        }
    }

    /// The `PYTORCH_CUDA_ALLOC_CONF` string that gives these settings
    /// (keys at their defaults are left out; empty for the defaults).
    pub fn to_conf_string(&self) -> String {
        parse::to_conf_string(self)
    }

    /// Checks the settings the typed API can get wrong; the string parser
    /// checks the same things with PyTorch's messages.
    pub fn validate(&self) -> Result<(), ConfigError> {
        parse::validate(self)
    }
}

/// Builds an [`AllocatorConfig`] field by field; `build()` validates.
#[derive(Clone, Debug)]
pub struct AllocatorConfigBuilder {
    config: AllocatorConfig,
}

impl AllocatorConfigBuilder {
    /// `max_split_size_mb` in bytes (`None`: unlimited).
    pub fn max_split_size_bytes(mut self, bytes: Option<u64>) -> Self {
        self.config.max_split_size_bytes = bytes;
        self
    }
    /// `max_non_split_rounding_mb` in bytes.
    pub fn max_non_split_rounding_bytes(mut self, bytes: u64) -> Self {
        self.config.max_non_split_rounding_bytes = bytes;
        self
    }
    /// `large_segment_size_mb` in bytes.
    pub fn large_segment_size_bytes(mut self, bytes: u64) -> Self {
        self.config.large_segment_size_bytes = bytes;
        self
    }
    /// `roundup_power2_divisions:N`: the same divisions for every size class.
    pub fn roundup_power2_divisions(mut self, divisions: u64) -> Self {
        self.config.roundup_power2_divisions = [divisions; ROUNDUP_INTERVALS];
        self
    }
    /// `roundup_power2_divisions` as a resolved 16-entry table.
    pub fn roundup_power2_division_table(mut self, table: [u64; ROUNDUP_INTERVALS]) -> Self {
        self.config.roundup_power2_divisions = table;
        self
    }
    /// `garbage_collection_threshold`.
    pub fn garbage_collection_threshold(mut self, threshold: f64) -> Self {
        self.config.garbage_collection_threshold = threshold;
        self
    }
    /// `expandable_segments`.
    pub fn expandable_segments(mut self, on: bool) -> Self {
        self.config.expandable_segments = on;
        self
    }
    /// `per_process_memory_fraction`.
    pub fn per_process_memory_fraction(mut self, fraction: f64) -> Self {
        self.config.per_process_memory_fraction = fraction;
        self
    }
    /// `release_lock_on_cudamalloc`.
    pub fn release_lock_on_cudamalloc(mut self, on: bool) -> Self {
        self.config.release_lock_on_cudamalloc = on;
        self
    }
    /// Behaviour of a given PyTorch generation.
    pub fn compat(mut self, compat: Compat) -> Self {
        self.config.compat = compat;
        self
    }
    /// The settings, checked as the string parser checks them.
    pub fn build(self) -> Result<AllocatorConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

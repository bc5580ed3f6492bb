//! `allocator_settings`: the allocator configuration a snapshot recorded,
//! and what it means as a core [`AllocatorConfig`]. Reading and writing the
//! dict are the walkers' (`decode/settings.rs`, `encode/settings.rs`).

use crate::value::Value;
use std::collections::BTreeMap;
use vramkit_core::rounding::ROUNDUP_INTERVALS;
use vramkit_core::config::{Compat, Generation};
use vramkit_core::AllocatorConfig;

/// The top-level `allocator_settings` dict of newer snapshots. Every field
/// is optional because PyTorch releases added keys over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF`: the last settings string PyTorch parsed,
    /// verbatim (`""` when unset).
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// `max_split_size` in bytes; -1 means unlimited.
    pub max_split_size: Option<i64>,
    /// `garbage_collection_threshold`; 0 means off.
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments`.
    pub expandable_segments: Option<bool>,
    /// `pinned_num_register_threads` (host allocator).
    pub pinned_num_register_threads: Option<u64>,
    /// `release_lock_on_cudamalloc`.
    pub release_lock_on_cudamalloc: Option<bool>,
    /// `pinned_use_cuda_host_register` (host allocator).
    pub pinned_use_cuda_host_register: Option<bool>,
    /// `graph_capture_record_stream_reuse` (newest releases).
    pub graph_capture_record_stream_reuse: Option<bool>,
    /// `roundup_power2_divisions`: the lower bound in MiB of each size
    /// class (`1, 2, 4, ..., 32768`) to its number of divisions.
    pub roundup_power2_divisions: Option<BTreeMap<u64, u64>>,
    /// Keys this crate does not know, in file order.
    pub other: Vec<(String, Value)>,
}

impl AllocatorSettings {
    /// The allocator generation these settings come from, as far as the keys
    /// tell: `graph_capture_record_stream_reuse` arrived with R26 (spec 9.2);
    /// without it the dict is the R24 one.
    pub fn generation(&self) -> Generation {
        if self.graph_capture_record_stream_reuse.is_some() {
            Generation::R26
        } else {
            Generation::R24
        }
    }

    /// The recorded settings as a core [`AllocatorConfig`].
    ///
    /// Starts from the parsed `PYTORCH_CUDA_ALLOC_CONF` string (so keys the
    /// dict does not carry, like `max_non_split_rounding_mb`, are honoured;
    /// PyTorch's defaults if the string is absent or does not parse), then
    /// applies every value the dict recorded, which PyTorch reports as in
    /// effect: `max_split_size` -1 is unlimited (`None`), and the
    /// `roundup_power2_divisions` keys map to the 16-entry table by
    /// log2 of the key.
    /// The allocator generation follows [`Self::generation`].
    pub fn to_config(&self) -> AllocatorConfig {
        self.to_config_with(Compat::of(self.generation()))
    }

    /// [`to_config`](Self::to_config) under the rules `compat` (of the
    /// release that recorded the file, see `SnapshotFile::release`).
    pub fn to_config_with(&self, compat: Compat) -> AllocatorConfig {
        let mut config = self
            .pytorch_cuda_alloc_conf
            .as_deref()
            .and_then(|conf| AllocatorConfig::parse_with_compat(conf, compat).ok())
            .unwrap_or_else(|| AllocatorConfig { compat, ..AllocatorConfig::default() });
        config.compat = compat;
        if let Some(max_split) = self.max_split_size {
            config.max_split_size_bytes = u64::try_from(max_split).ok();
        }
        if let Some(threshold) = self.garbage_collection_threshold {
            config.garbage_collection_threshold = threshold;
        }
        if let Some(on) = self.expandable_segments {
            config.expandable_segments = on;
        }
        if let Some(threads) = self.pinned_num_register_threads {
            config.pinned_num_register_threads = threads;
        }
        if let Some(on) = self.release_lock_on_cudamalloc {
            config.release_lock_on_cudamalloc = on;
        }
        if let Some(on) = self.pinned_use_cuda_host_register {
            config.pinned_use_cuda_host_register = on;
        }
        if let Some(on) = self.graph_capture_record_stream_reuse {
            config.graph_capture_record_stream_reuse = on;
        }
        if let Some(table) = &self.roundup_power2_divisions {
            config.roundup_power2_divisions = division_table(table);
        }
        config
    }
}

/// The 16-entry table from `{lower bound in MiB: divisions}`.
fn division_table(table: &BTreeMap<u64, u64>) -> [u64; ROUNDUP_INTERVALS] {
    let mut out = [0; ROUNDUP_INTERVALS];
    for (&mib, &divisions) in table {
        if mib == 0 {
            continue;
        }
        let index = (63 - mib.leading_zeros()) as usize;
        out[index.min(ROUNDUP_INTERVALS - 1)] = divisions;
    }
    out
}

//! `allocator_settings`: the known keys typed, the others kept as values.

use super::reader::Reader;
use super::schema_err::{AtKey, SchemaErr};
use crate::settings::AllocatorSettings;
use crate::tree::Item;
use std::collections::BTreeMap;

impl Reader<'_> {
    pub(super) fn settings(&self, item: Item) -> Result<AllocatorSettings, SchemaErr> {
        let mut settings = AllocatorSettings::default();
        for &(k, v) in self.dict(item)? {
            let key = self.key_name(k)?;
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" => settings.pytorch_cuda_alloc_conf = Some(self.str(v).at(key)?.to_owned()),
                // PyTorch writes `int64_t(max_split_size)`, -1 when unlimited
                // (SIZE_MAX); the unsigned spelling reads the same.
                "max_split_size" => settings.max_split_size = Some(self.bits64(v).at(key)? as i64),
                "garbage_collection_threshold" => settings.garbage_collection_threshold = Some(self.f64(v).at(key)?),
                "expandable_segments" => settings.expandable_segments = Some(self.bool(v).at(key)?),
                "pinned_num_register_threads" => settings.pinned_num_register_threads = Some(self.u64(v).at(key)?),
                "release_lock_on_cudamalloc" => settings.release_lock_on_cudamalloc = Some(self.bool(v).at(key)?),
                "pinned_use_cuda_host_register" => settings.pinned_use_cuda_host_register = Some(self.bool(v).at(key)?),
                "graph_capture_record_stream_reuse" => {
                    settings.graph_capture_record_stream_reuse = Some(self.bool(v).at(key)?);
                }
                "roundup_power2_divisions" => settings.roundup_power2_divisions = Some(self.divisions(v).at(key)?),
                _ => settings.other.push((key.to_owned(), self.value(v).at(key)?)),
            }
        }
        Ok(settings)
    }

    /// `roundup_power2_divisions`: `{"1": n, "2": n, ..., "32768": n}`.
    fn divisions(&self, item: Item) -> Result<BTreeMap<u64, u64>, SchemaErr> {
        let mut table = BTreeMap::new();
        for &(k, v) in self.dict(item)? {
            let key = self.key_name(k)?;
            let mib: u64 = key.parse().map_err(|_| {
                SchemaErr::new("a size class in MiB (\"1\", \"2\", ..., \"32768\")", format!("{key:?}")).key(key)
            })?;
            table.insert(mib, self.u64(v).at(key)?);
        }
        Ok(table)
    }
}

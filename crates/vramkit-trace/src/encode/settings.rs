//! `allocator_settings`: the recorded keys in PyTorch's order, then the
//! unknown ones as they were.

use super::encoder::{int, Encoder};
use crate::value::Value;
use crate::settings::AllocatorSettings;

impl Encoder {
    pub(super) fn settings(&mut self, settings: &AllocatorSettings) -> Value {
        let mut pairs = Vec::new();
        if let Some(conf) = &settings.pytorch_cuda_alloc_conf {
            pairs.push((self.key("PYTORCH_CUDA_ALLOC_CONF"), Value::str(conf)));
        }
        if let Some(n) = settings.max_split_size {
            pairs.push((self.key("max_split_size"), Value::Int(n)));
        }
        if let Some(x) = settings.garbage_collection_threshold {
            pairs.push((self.key("garbage_collection_threshold"), Value::Float(x)));
        }
        if let Some(b) = settings.expandable_segments {
            pairs.push((self.key("expandable_segments"), Value::Bool(b)));
        }
        if let Some(n) = settings.pinned_num_register_threads {
            pairs.push((self.key("pinned_num_register_threads"), int(n)));
        }
        if let Some(b) = settings.release_lock_on_cudamalloc {
            pairs.push((self.key("release_lock_on_cudamalloc"), Value::Bool(b)));
        }
        if let Some(b) = settings.pinned_use_cuda_host_register {
            pairs.push((self.key("pinned_use_cuda_host_register"), Value::Bool(b)));
        }
        if let Some(b) = settings.graph_capture_record_stream_reuse {
            pairs.push((self.key("graph_capture_record_stream_reuse"), Value::Bool(b)));
        }
        if let Some(table) = &settings.roundup_power2_divisions {
            let table = table.iter().map(|(mib, &n)| (Value::str(&mib.to_string()), int(n))).collect();
            pairs.push((self.key("roundup_power2_divisions"), Value::dict(table)));
        }
        for (key, value) in &settings.other {
            pairs.push((Value::str(key), value.clone()));
        }
        Value::dict(pairs)
    }
}

//! The out-of-memory error: every number of PyTorch's message, and
//! vramkit's diagnosis of why the request failed.

use std::fmt;

/// Why memory ran out, in numbers, and what would have helped.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OomDiagnosis {
    /// The request after rounding.
    pub rounded_size_bytes: u64,
    /// Free bytes cached in the request's pool on its stream.
    pub free_cached_bytes: u64,
    /// Number of those free blocks.
    pub free_cached_blocks: u64,
    /// The largest of them (0 when none).
    pub largest_free_block_bytes: u64,
    /// Free cached bytes in every pool and stream.
    pub free_cached_bytes_all_pools: u64,
    /// Bytes freed by the user but waiting on other streams' events.
    pub pending_free_bytes: u64,
    /// Enough free cached bytes for the request, but no one block that fits:
    /// the cache is fragmented.
    pub fragmentation: bool,
    /// Settings under which this same request succeeds on a copy of the
    /// allocator's state, as `PYTORCH_CUDA_ALLOC_CONF` strings.
    pub settings_that_fit: Vec<String>,
    /// Settings tried that did not help.
    pub settings_tried: Vec<String>,
}

/// `torch.OutOfMemoryError`: the request could not be served even after
/// releasing every cached segment.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OutOfMemoryError {
    /// Device index.
    pub device: i64,
    /// Bytes the caller asked for.
    pub requested_bytes: u64,
    /// Size of the segment the allocator tried to get (PyTorch's "Tried to allocate").
    pub alloc_size_bytes: u64,
    /// `cudaMemGetInfo` total.
    pub total_capacity_bytes: u64,
    /// `cudaMemGetInfo` free.
    pub device_free_bytes: u64,
    /// The memory-fraction limit, when one is in effect ("allowed").
    pub limit_bytes: Option<u64>,
    /// `allocated_bytes.all.current`.
    pub allocated_bytes: u64,
    /// `reserved_bytes.all.current`.
    pub reserved_bytes: u64,
    /// Free bytes cached in private pools (CUDA graphs).
    pub private_pool_free_bytes: u64,
    /// The device memory the process uses, as NVML reports it, where known
    /// ([`Device::process_memory_bytes`](crate::Device::process_memory_bytes)).
    #[serde(default)]
    pub process_memory_bytes: Option<u64>,
    /// `expandable_segments` was in effect (2.15 words its message's tail
    /// differently then).
    #[serde(default)]
    pub expandable_segments: bool,
    /// True for a request of 1 EB or more, refused before anything else.
    pub more_than_one_exabyte: bool,
    /// vramkit's analysis; `None` for the 1 EB refusal.
    pub diagnosis: Option<OomDiagnosis>,
}

impl OutOfMemoryError {
    pub(crate) fn more_than_one_exabyte(device: i64, requested_bytes: u64) -> Self {
        OutOfMemoryError {
            device,
            requested_bytes,
            alloc_size_bytes: requested_bytes,
            total_capacity_bytes: 0,
            device_free_bytes: 0,
            limit_bytes: None,
            allocated_bytes: 0,
            reserved_bytes: 0,
            private_pool_free_bytes: 0,
            process_memory_bytes: None,
            expandable_segments: false,
            more_than_one_exabyte: true,
            diagnosis: None,
        }
    }

    /// PyTorch's message alone, exactly as the newest release prints it.
    pub fn pytorch_message(&self) -> String {
        self.pytorch_message_as(crate::oom_message::MessageStyle::default())
    }

    /// PyTorch's message in the wording of another release.
    pub fn pytorch_message_as(&self, style: crate::oom_message::MessageStyle) -> String {
        if self.more_than_one_exabyte {
            return crate::oom_message::ExabyteOomMessage::default().to_string();
        }
        self.message(style).to_string()
    }

    /// The numbers of PyTorch's message, in one release's wording, with the
    /// process's own line where its device memory is known (vramkit sees no
    /// other processes).
    pub fn message(&self, style: crate::oom_message::MessageStyle) -> crate::oom_message::OomMessage {
        crate::oom_message::OomMessage {
            style,
            platform: crate::oom_message::Platform::Cuda,
            device: self.device,
            alloc_size_bytes: self.alloc_size_bytes,
            total_capacity_bytes: self.total_capacity_bytes,
            device_free_bytes: self.device_free_bytes,
            processes: self.process_memory_bytes.map(|used_bytes| crate::oom_message::ProcessMemory { pid: None, used_bytes }).into_iter().collect(),
            allowed_bytes: self.limit_bytes,
            allocated_bytes: self.allocated_bytes,
            reserved_bytes: self.reserved_bytes,
            private_pool_cached_bytes: self.private_pool_free_bytes,
            expandable_segments: self.expandable_segments,
        }
    }

    /// vramkit's diagnosis in a few lines of plain words.
    pub fn diagnosis_text(&self) -> String {
        let Some(d) = &self.diagnosis else { return String::new() };
        use crate::oom_message::format_size;
        let mut out = String::new();
        out.push_str(&format!(
            "vramkit: the request needed a block of {} ({} requested); the cache held {} free in {} block(s) of this pool and stream, the largest {}.",
            format_size(d.rounded_size_bytes),
            format_size(self.requested_bytes),
            format_size(d.free_cached_bytes),
            d.free_cached_blocks,
            format_size(d.largest_free_block_bytes),
        ));
        if d.fragmentation {
            out.push_str(" This is a fragmentation OOM: there were enough free cached bytes, but no single block large enough.");
        }
        if d.pending_free_bytes > 0 {
            out.push_str(&format!(
                " {} were freed but still wait on other streams' work (record_stream).",
                format_size(d.pending_free_bytes)
            ));
        }
        if d.fragmentation && d.settings_that_fit.is_empty() {
            out.push_str(
                " Settings that change how the cache fragments over time (max_split_size_mb, expandable_segments:True) cannot be judged from this moment alone: record a snapshot with torch.cuda.memory._record_memory_history() and run `vramkit tune` on it.",
            );
        }
        if d.settings_that_fit.is_empty() {
            if !d.settings_tried.is_empty() {
                out.push_str(&format!(
                    " Retrying this request on a copy of the allocator under {} did not help; the memory is held by live tensors.",
                    d.settings_tried.join(", ")
                ));
            }
        } else {
            out.push_str(&format!(
                " On a copy of the allocator's state this request succeeds with PYTORCH_CUDA_ALLOC_CONF={}.",
                d.settings_that_fit.join(" or ")
            ));
        }
        out
    }
}

impl fmt::Display for OutOfMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pytorch_message())?;
        if self.diagnosis.is_some() {
            write!(f, "\n{}", self.diagnosis_text())?;
        }
        Ok(())
    }
}

impl std::error::Error for OutOfMemoryError {}

//! PyTorch's out-of-memory message. (Temporary: replaced by the full
//! multi-release version.)

use crate::oom::OutOfMemoryError;
use std::fmt;

/// `format_size` (spec 3.6).
pub fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1_048_576 {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1_073_741_824 {
        format!("{:.2} MiB", size as f64 / 1_048_576.0)
    } else {
        format!("{:.2} GiB", size as f64 / 1_073_741_824.0)
    }
}

/// The numbers of the message.
#[derive(Debug, Clone)]
pub struct OomMessage<'a>(&'a OutOfMemoryError);

impl<'a> OomMessage<'a> {
    /// The message for an error.
    pub fn from_error(e: &'a OutOfMemoryError) -> Self {
        OomMessage(e)
    }
}

impl fmt::Display for OomMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        if e.more_than_one_exabyte {
            return f.write_str("CUDA out of memory. Tried to allocate more than 1EB memory.");
        }
        write!(f, "CUDA out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free. ",
            format_size(e.alloc_size_bytes), e.device, format_size(e.total_capacity_bytes), format_size(e.device_free_bytes))?;
        if let Some(l) = e.limit_bytes {
            write!(f, "{} allowed; ", format_size(l))?;
        }
        write!(f, "Of the allocated memory {} is allocated by PyTorch, ", format_size(e.allocated_bytes + e.private_pool_free_bytes))?;
        if e.private_pool_free_bytes > 0 {
            write!(f, "with {} allocated in private pools (e.g., CUDA Graphs), ", format_size(e.private_pool_free_bytes))?;
        }
        write!(f, "and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            format_size(e.reserved_bytes.saturating_sub(e.allocated_bytes + e.private_pool_free_bytes)))
    }
}

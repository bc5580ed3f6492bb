//! The out-of-memory message, worded as each PyTorch release words it
//! (spec sections 3.4, 3.6 and 16.2).
//!
//! [`OomMessage`] holds every number the message shows; its `Display` prints
//! the allocator's own text, without the exception class that Python puts in
//! front (`torch.OutOfMemoryError: ` and the like).

use crate::rounding::ONE_EXABYTE;
use std::fmt;

/// PyTorch's `format_size`: up to 1024 bytes as `<n> bytes`, then KiB, MiB
/// or GiB with two decimals. Each unit runs up to *and including* 1024 of
/// itself, so 1 MiB prints as `1024.00 KiB`, and so does anything that rounds
/// up to it.
///
/// The C++ converts the size to `double` and prints it with
/// `std::fixed << setprecision(2)`, which rounds the exact binary value half
/// to even. This does the same with integers, so it does not depend on how
/// Rust's float formatting breaks ties: `u64::MAX` becomes 2^64 as a double
/// and prints as `17179869184.00 GiB`, as PyTorch prints NVML's "not
/// available" value.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let (shift, unit) = if bytes <= KIB {
        return format!("{bytes} bytes");
    } else if bytes <= MIB {
        (10, "KiB")
    } else if bytes <= GIB {
        (20, "MiB")
    } else {
        (30, "GiB")
    };
    // Exact: a double holding an integer below 2^65 converts without loss.
    let as_double = bytes as f64 as u128;
    let scaled = as_double * 100;
    let mut hundredths = scaled >> shift;
    let remainder = scaled & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if remainder > half || (remainder == half && hundredths % 2 == 1) {
        hundredths += 1;
    }
    format!("{}.{:02} {unit}", hundredths / 100, hundredths % 100)
}

/// The wording of one range of PyTorch releases. The default is the newest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MessageStyle {
    /// 1.0 – 1.3: `(GPU d; T total capacity; A already allocated; F free;
    /// C cached)`, where "cached" is reserved minus allocated. No fraction
    /// limit existed yet.
    V1_0,
    /// 1.4 – 1.9: `...; F free; [L allowed; ]R reserved in total by PyTorch)`
    /// and nothing after it.
    V1_4,
    /// 1.10 – 2.0: as [`MessageStyle::V1_4`] plus the `max_split_size_mb`
    /// hint.
    V1_10,
    /// 2.1.x: the sentence form with the typo `total capacty`, NVML process
    /// lines and the `max_split_size_mb` hint. The fraction limit is computed
    /// but left out of the text (2.1 – 2.3 all drop it).
    V2_1,
    /// 2.2 – 2.3 as released with a working device index: the
    /// `expandable_segments:True` hint and the `pytorch.org` URL; no
    /// fraction limit and no private-pool clause.
    V2_2,
    /// 2.3.x as it really printed: [`MessageStyle::V2_2`], but the `int8`
    /// device index is streamed as a character (pytorch#126766, fixed by
    /// PR #123984). For GPU 0 that is a NUL byte, at which Python cuts the
    /// message: `... Tried to allocate X. GPU `.
    V2_3,
    /// 2.4.x: when private pools cache free blocks, `with P allocated in
    /// private pools (e.g., CUDA Graphs), `. The fraction limit is still
    /// left out, as in 2.1 – 2.3 (measured on torch 2.4.1; 2.5 is taken to
    /// print as 2.4).
    V2_4,
    /// 2.6 – 2.9: [`MessageStyle::V2_4`] with the fraction limit again
    /// (`L allowed; `, measured on torch 2.6 and 2.8).
    V2_6,
    /// 2.10.x: the hint names `PYTORCH_ALLOC_CONF`; URL unchanged.
    V2_10,
    /// 2.11 – 2.14 (spec R26): `PYTORCH_CUDA_ALLOC_CONF` again, and the
    /// `docs.pytorch.org` URL (measured on 2.11, 2.12 and 2.13).
    V2_11,
    /// 2.15 and later: [`MessageStyle::V2_11`], but while expandable
    /// segments are on the `expandable_segments:True` hint gives way to a
    /// note on running out of virtual address space (measured on torch 2.15).
    #[default]
    V2_15,
}

/// Which build of PyTorch prints the message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Platform {
    /// NVIDIA builds.
    #[default]
    Cuda,
    /// ROCm builds: `HIP out of memory.` and `(e.g., HIP Graphs)`, but the
    /// hint still names `PYTORCH_CUDA_ALLOC_CONF` (ROCm/TheRock#2118).
    Rocm,
    /// ROCm builds whose hint also says `PYTORCH_HIP_ALLOC_CONF`
    /// (ROCm/TheRock#1054).
    RocmHipAllocConf,
}

impl Platform {
    fn api(self) -> &'static str {
        match self {
            Platform::Cuda => "CUDA",
            Platform::Rocm | Platform::RocmHipAllocConf => "HIP",
        }
    }
}

/// One line of NVML's per-process report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessMemory {
    /// The process id, or `None` for the process raising the error, which
    /// PyTorch words as "Including non-PyTorch memory, this process".
    pub pid: Option<u32>,
    /// Bytes NVML says the process uses; `u64::MAX` is NVML's "not available".
    pub used_bytes: u64,
}

/// Everything the caching allocator's out-of-memory message shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomMessage {
    /// Which release's wording to print.
    pub style: MessageStyle,
    /// CUDA or ROCm spelling.
    pub platform: Platform,
    /// The device index.
    pub device: i64,
    /// The size that was being allocated ("Tried to allocate"), in bytes.
    pub alloc_size_bytes: u64,
    /// Total device memory from `cudaMemGetInfo`, in bytes.
    pub total_capacity_bytes: u64,
    /// Free device memory from `cudaMemGetInfo`, in bytes.
    pub device_free_bytes: u64,
    /// NVML's compute processes on the device, in NVML's order; empty when
    /// NVML is unavailable. Printed from 2.1 on.
    pub processes: Vec<ProcessMemory>,
    /// The memory-fraction limit in bytes, when one is set ("allowed").
    pub allowed_bytes: Option<u64>,
    /// `allocated_bytes.all.current`, in bytes.
    pub allocated_bytes: u64,
    /// `reserved_bytes.all.current`, in bytes.
    pub reserved_bytes: u64,
    /// Bytes of free blocks cached in private pools (CUDA graphs, `MemPool`).
    /// Counted as allocated from 2.4 on; earlier wordings ignore it.
    pub private_pool_cached_bytes: u64,
    /// `expandable_segments` was on when memory ran out, which changes the
    /// tail of the message from 2.15 on.
    pub expandable_segments: bool,
}

const OLD_HINT: &str = " If reserved memory is >> allocated memory try setting max_split_size_mb \
                        to avoid fragmentation.  See documentation for Memory Management and ";
const V2_1_HINT: &str =
    " If reserved but unallocated memory is large try setting max_split_size_mb \
                         to avoid fragmentation.  See documentation for Memory Management and ";
/// 2.15's tail while expandable segments are on, instead of the hint.
const V2_15_EXPANDABLE_NOTE: &str = " expandable_segments is enabled. If instead the process is running out of virtual \
                                     address space (VSZ), expandable segments may be over-reserving VA (each segment \
                                     reserves ~9/8 of device memory, times the number of streams); reduce it via \
                                     PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve / \
                                     expandable_segments_reserve_by_class.";
const OLD_URL: &str = "https://pytorch.org/docs/stable/notes/cuda.html#environment-variables";
const DOCS_URL: &str = "https://docs.pytorch.org/docs/stable/notes/cuda.html\
                        #optimizing-memory-usage-with-pytorch-cuda-alloc-conf";

impl OomMessage {
    fn env_var(&self) -> &'static str {
        match (self.style, self.platform) {
            (MessageStyle::V2_10, _) => "PYTORCH_ALLOC_CONF",
            (_, Platform::RocmHipAllocConf) => "PYTORCH_HIP_ALLOC_CONF",
            _ => "PYTORCH_CUDA_ALLOC_CONF",
        }
    }

    fn write_allowed(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.allowed_bytes {
            Some(limit) => write!(f, "{} allowed; ", format_size(limit)),
            None => Ok(()),
        }
    }

    /// 1.0 – 2.0: one parenthesis of figures, then the hint from 1.10.
    fn fmt_old(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            " (GPU {}; {} total capacity; {} already allocated; {} free; ",
            self.device,
            format_size(self.total_capacity_bytes),
            format_size(self.allocated_bytes),
            format_size(self.device_free_bytes),
        )?;
        if self.style == MessageStyle::V1_0 {
            // The C++ subtracted unsigned counters, so a negative wraps.
            let cached = self.reserved_bytes.wrapping_sub(self.allocated_bytes);
            return write!(f, "{} cached)", format_size(cached));
        }
        self.write_allowed(f)?;
        write!(
            f,
            "{} reserved in total by PyTorch)",
            format_size(self.reserved_bytes)
        )?;
        if self.style == MessageStyle::V1_10 {
            write!(f, "{OLD_HINT}{}", self.env_var())?;
        }
        Ok(())
    }

    /// 2.1 and later: sentences, NVML lines, and a hint that changed often.
    fn fmt_sentences(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(". GPU ")?;
        if self.style == MessageStyle::V2_3 {
            // `os << int8_t` writes the byte itself.
            write!(f, "{}", char::from(self.device as u8))?;
        } else {
            write!(f, "{}", self.device)?;
        }
        let capacity = if self.style == MessageStyle::V2_1 {
            "capacty"
        } else {
            "capacity"
        };
        write!(
            f,
            " has a total {capacity} of {} of which {} is free. ",
            format_size(self.total_capacity_bytes),
            format_size(self.device_free_bytes),
        )?;
        for process in &self.processes {
            match process.pid {
                Some(pid) => write!(f, "Process {pid}")?,
                None => f.write_str("Including non-PyTorch memory, this process")?,
            }
            write!(
                f,
                " has {} memory in use. ",
                format_size(process.used_bytes)
            )?;
        }

        let with_private_pools = !matches!(
            self.style,
            MessageStyle::V2_1 | MessageStyle::V2_2 | MessageStyle::V2_3
        );
        let private = if with_private_pools {
            self.private_pool_cached_bytes
        } else {
            0
        };
        let prints_limit = !matches!(
            self.style,
            MessageStyle::V2_1 | MessageStyle::V2_2 | MessageStyle::V2_3 | MessageStyle::V2_4
        );
        if prints_limit {
            self.write_allowed(f)?;
        }
        // Unsigned arithmetic, as in the C++.
        write!(
            f,
            "Of the allocated memory {} is allocated by PyTorch, ",
            format_size(self.allocated_bytes.wrapping_add(private)),
        )?;
        if private > 0 {
            write!(
                f,
                "with {} allocated in private pools (e.g., {} Graphs), ",
                format_size(private),
                self.platform.api(),
            )?;
        }
        let unallocated = self
            .reserved_bytes
            .wrapping_sub(self.allocated_bytes)
            .wrapping_sub(private);
        write!(
            f,
            "and {} is reserved by PyTorch but unallocated.",
            format_size(unallocated)
        )?;

        if self.style == MessageStyle::V2_1 {
            return write!(f, "{V2_1_HINT}{}", self.env_var());
        }
        if self.style == MessageStyle::V2_15 && self.expandable_segments {
            return f.write_str(V2_15_EXPANDABLE_NOTE);
        }
        let url = if matches!(self.style, MessageStyle::V2_11 | MessageStyle::V2_15) {
            DOCS_URL
        } else {
            OLD_URL
        };
        write!(
            f,
            " If reserved but unallocated memory is large try setting {}=expandable_segments:True \
             to avoid fragmentation.  See documentation for Memory Management  ({url})",
            self.env_var(),
        )
    }
}

impl fmt::Display for OomMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} out of memory. Tried to allocate {}",
            self.platform.api(),
            format_size(self.alloc_size_bytes)
        )?;
        match self.style {
            MessageStyle::V1_0 | MessageStyle::V1_4 | MessageStyle::V1_10 => self.fmt_old(f),
            _ => self.fmt_sentences(f),
        }
    }
}

/// The error for a request of [`ONE_EXABYTE`] or more, which PyTorch refuses
/// before looking at any memory, with a message that has no figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExabyteOomMessage {
    /// CUDA or ROCm spelling.
    pub platform: Platform,
}

impl ExabyteOomMessage {
    /// Whether a request of `bytes` gets this message instead of an allocation.
    pub const fn applies_to(bytes: u64) -> bool {
        bytes >= ONE_EXABYTE
    }
}

impl fmt::Display for ExabyteOomMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} out of memory. Tried to allocate more than 1EB memory.",
            self.platform.api()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_size_unit_boundaries() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size((1 << 20) - 1), "1024.00 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size((1 << 20) + 1), "1.00 MiB");
        assert_eq!(format_size((1 << 30) - 1), "1024.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size((1 << 30) + 1), "1.00 GiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }

    #[test]
    fn format_size_rounds_exact_ties_to_even() {
        // 1.125 and 1.375 KiB are exact in binary, so these are true ties.
        assert_eq!(format_size(1152), "1.12 KiB");
        assert_eq!(format_size(1408), "1.38 KiB");
        assert_eq!(format_size(1153), "1.13 KiB");
    }

    #[test]
    fn format_size_of_nvml_not_available() {
        assert_eq!(format_size(u64::MAX), "17179869184.00 GiB");
        // Above 2^53 the double conversion rounds first, as in the C++.
        assert_eq!(format_size((1 << 62) + 1), "4294967296.00 GiB");
    }

    fn message(style: MessageStyle) -> OomMessage {
        OomMessage {
            style,
            device: 1,
            alloc_size_bytes: 2 << 20,
            total_capacity_bytes: 16 << 30,
            device_free_bytes: 1 << 20,
            processes: vec![ProcessMemory {
                pid: Some(7),
                used_bytes: 1 << 30,
            }],
            allowed_bytes: Some(8 << 30),
            allocated_bytes: 4 << 30,
            reserved_bytes: 6 << 30,
            private_pool_cached_bytes: 1 << 30,
            ..OomMessage::default()
        }
    }

    #[test]
    fn fraction_limit_is_printed_only_by_releases_that_print_it() {
        for (style, shown) in [
            (MessageStyle::V1_0, false),
            (MessageStyle::V1_4, true),
            (MessageStyle::V1_10, true),
            (MessageStyle::V2_1, false),
            (MessageStyle::V2_2, false),
            (MessageStyle::V2_3, false),
            (MessageStyle::V2_4, false),
            (MessageStyle::V2_6, true),
            (MessageStyle::V2_10, true),
            (MessageStyle::V2_11, true),
            (MessageStyle::V2_15, true),
        ] {
            let text = message(style).to_string();
            assert_eq!(
                text.contains("8.00 GiB allowed; "),
                shown,
                "{style:?}: {text}"
            );
        }
    }

    #[test]
    fn private_pools_count_as_allocated_from_2_4() {
        let old = message(MessageStyle::V2_2).to_string();
        assert!(
            old.contains("memory 4.00 GiB is allocated by PyTorch, and 2.00 GiB is reserved"),
            "{old}"
        );
        let new = message(MessageStyle::V2_4).to_string();
        assert!(
            new.contains(
                "memory 5.00 GiB is allocated by PyTorch, with 1024.00 MiB allocated in \
                 private pools (e.g., CUDA Graphs), and 1024.00 MiB is reserved"
            ),
            "{new}"
        );
    }

    #[test]
    fn device_index_as_a_character_in_2_3() {
        let mut msg = message(MessageStyle::V2_3);
        msg.device = 0;
        let text = msg.to_string();
        assert!(text.starts_with(
            "CUDA out of memory. Tried to allocate 2.00 MiB. GPU \0 has a total capacity"
        ));
    }

    #[test]
    fn exabyte_message() {
        assert!(!ExabyteOomMessage::applies_to(ONE_EXABYTE - 1));
        assert!(ExabyteOomMessage::applies_to(ONE_EXABYTE));
        assert_eq!(
            ExabyteOomMessage::default().to_string(),
            "CUDA out of memory. Tried to allocate more than 1EB memory."
        );
        assert_eq!(
            ExabyteOomMessage {
                platform: Platform::Rocm
            }
            .to_string(),
            "HIP out of memory. Tried to allocate more than 1EB memory."
        );
    }
}

//! GPU presets: the memory and properties of real cards, as the simulated
//! runtime reports them.
//!
//! Each number is what the CUDA runtime reports on the real card (deviceQuery,
//! `torch.cuda.get_device_properties`), not the marketing size: a "16 GB" T4
//! offers 15,110 MiB to `cudaMemGetInfo`. The usable total varies by a few
//! MiB with the driver version (ECC and driver reservations); where the
//! sources disagree the field's doc says so.
//!
//! The C side reads a preset from the environment ([`Preset::env`]): the
//! `FAKECUDA_*` variables of vramkit-pytorch's `cudart.c` for the name,
//! memory and compute capability, and the ones `c/device.c` adds for the
//! rest.

use std::borrow::Cow;

/// One card: what `cudaGetDeviceProperties`, `cudaDeviceGetAttribute`,
/// `cudaMemGetInfo` and NVML report for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name `--gpu` takes (lower case), e.g. `a100-80gb`.
    pub key: Cow<'static, str>,
    /// What `torch.cuda.get_device_name()` shows.
    pub device_name: Cow<'static, str>,
    /// Device memory as `cudaMemGetInfo` reports its total, bytes.
    pub total_bytes: u64,
    /// Compute capability (major, minor); PyTorch sizes its cuBLAS
    /// workspace by it (32 MiB on 9.0, 8,519,680 bytes elsewhere).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors; PyTorch sizes reduction buffers by it.
    pub sm_count: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Memory bus width, bits.
    pub memory_bus_width_bits: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// Shared memory per SM, bytes.
    pub shared_memory_per_sm_bytes: u32,
    /// Shared memory one block may opt in to, bytes.
    pub shared_memory_per_block_optin_bytes: u32,
    /// Boost clock, kHz.
    pub clock_khz: u32,
    /// Memory clock, kHz.
    pub memory_clock_khz: u32,
    /// Where the numbers come from, and how sure they are.
    pub source: &'static str,
}

const KIB: u32 = 1024;
const MIB: u64 = 1 << 20;

/// A card of the Turing generation (compute capability 7.5), to be named.
const TURING: Preset = Preset {
    key: Cow::Borrowed(""),
    device_name: Cow::Borrowed(""),
    total_bytes: 0,
    compute_capability: (7, 5),
    sm_count: 40,
    l2_bytes: 4 * KIB * KIB,
    memory_bus_width_bits: 256,
    max_threads_per_sm: 1024,
    max_blocks_per_sm: 16,
    shared_memory_per_sm_bytes: 64 * KIB,
    shared_memory_per_block_optin_bytes: 64 * KIB,
    clock_khz: 1_590_000,
    memory_clock_khz: 5_001_000,
    source: "",
};

/// A GA100 (compute capability 8.0).
const AMPERE: Preset = Preset {
    compute_capability: (8, 0),
    sm_count: 108,
    l2_bytes: 40 * KIB * KIB,
    memory_bus_width_bits: 5120,
    max_threads_per_sm: 2048,
    max_blocks_per_sm: 32,
    shared_memory_per_sm_bytes: 164 * KIB,
    shared_memory_per_block_optin_bytes: 163 * KIB,
    clock_khz: 1_410_000,
    memory_clock_khz: 1_593_000,
    ..TURING
};

/// An Ada card (compute capability 8.9); SMs, L2, bus and clocks vary.
const ADA: Preset = Preset {
    compute_capability: (8, 9),
    max_threads_per_sm: 1536,
    max_blocks_per_sm: 24,
    shared_memory_per_sm_bytes: 100 * KIB,
    shared_memory_per_block_optin_bytes: 99 * KIB,
    ..TURING
};

/// A GH100 (compute capability 9.0) in its SXM form: the A100's bus and
/// thread limits, more SMs, L2 and shared memory.
const HOPPER: Preset = Preset {
    compute_capability: (9, 0),
    sm_count: 132,
    l2_bytes: 50 * KIB * KIB,
    shared_memory_per_sm_bytes: 228 * KIB,
    shared_memory_per_block_optin_bytes: 227 * KIB,
    clock_khz: 1_980_000,
    memory_clock_khz: 2_619_000,
    ..AMPERE
};

/// The cards `--gpu` knows, smallest memory first.
pub const PRESETS: &[Preset] = &[
    Preset {
        key: Cow::Borrowed("t4"),
        device_name: Cow::Borrowed("Tesla T4"),
        total_bytes: 15_843_721_216,
        source: "deviceQuery (driver 11.0): 15,110 MiB; PyTorch on newer drivers (Colab) shows 15,095 to 15,109 MiB",
        ..TURING
    },
    Preset {
        key: Cow::Borrowed("l4"),
        device_name: Cow::Borrowed("NVIDIA L4"),
        total_bytes: 23_612_293_120,
        sm_count: 58,
        l2_bytes: 48 * KIB * KIB,
        memory_bus_width_bits: 192,
        clock_khz: 2_040_000,
        memory_clock_khz: 6_251_000,
        source: "deviceQuery (driver 12.0): 22,518 MiB",
        ..ADA
    },
    Preset {
        key: Cow::Borrowed("rtx4090"),
        device_name: Cow::Borrowed("NVIDIA GeForce RTX 4090"),
        total_bytes: 25_756_696_576,
        sm_count: 128,
        l2_bytes: 72 * KIB * KIB,
        memory_bus_width_bits: 384,
        clock_khz: 2_520_000,
        memory_clock_khz: 10_501_000,
        source: "deviceQuery (driver 12.1, Linux): 24,563 MiB, as torch shows; Windows (WDDM) reports about 1.5 GiB less",
        ..ADA
    },
    Preset {
        key: Cow::Borrowed("a100-40gb"),
        device_name: Cow::Borrowed("NVIDIA A100-SXM4-40GB"),
        total_bytes: 42_298_834_944,
        source: "deviceQuery (driver 12.2): 40,339 MiB; older drivers showed 40,536 MiB",
        ..AMPERE
    },
    Preset {
        key: Cow::Borrowed("h100"),
        device_name: Cow::Borrowed("NVIDIA H100 80GB HBM3"),
        total_bytes: 85_028_896_768,
        source: "deviceQuery (driver 12.8): 81,090 MiB; drivers 12.7 to 13.0 show 81,079 to 81,106 MiB",
        ..HOPPER
    },
    Preset {
        key: Cow::Borrowed("a100-80gb"),
        device_name: Cow::Borrowed("NVIDIA A100-SXM4-80GB"),
        total_bytes: 85_100_068_864,
        source: "deviceQuery (driver 12.5): 81,158 MiB; driver 12.2 showed 81,051 MiB",
        ..AMPERE
    },
    Preset {
        key: Cow::Borrowed("h200"),
        device_name: Cow::Borrowed("NVIDIA H200"),
        total_bytes: 143_156 * MIB,
        l2_bytes: 60 * KIB * KIB,
        memory_bus_width_bits: 6144,
        source: "torch.cuda.get_device_properties: 143,156 MiB (to the MiB; no byte count found)",
        ..HOPPER
    },
];

impl Preset {
    /// The preset called `name`: its key or its device name, case and
    /// punctuation ignored (`A100-80GB`, `h100`, `NVIDIA L4`), or a model
    /// number alone (`4090`).
    pub fn find(name: &str) -> Option<&'static Preset> {
        let wanted = normalise(name);
        let model_number = wanted.len() >= 4 && wanted.chars().all(|c| c.is_ascii_digit());
        PRESETS.iter().find(|p| {
            let key = normalise(&p.key);
            key == wanted || normalise(&p.device_name) == wanted || (model_number && key.ends_with(&wanted))
        })
    }

    /// A card of `total_bytes` with no other particulars: an H100's
    /// properties, so the default compute capability (9.0) is the one
    /// vramkit-pytorch's runtime assumes too.
    pub fn sized(total_bytes: u64) -> Preset {
        let mut preset = PRESETS.iter().find(|p| p.key == "h100").cloned().unwrap_or_else(|| PRESETS[0].clone());
        preset.key = Cow::Owned(format!("{total_bytes}B"));
        preset.device_name = Cow::Owned(format!("vramkit simulated GPU ({})", human_bytes(total_bytes)));
        preset.total_bytes = total_bytes;
        preset.source = "a plain size: H100 properties with this much memory";
        preset
    }

    /// A preset name, or a plain size: `24GiB`, `24GB` (decimal), `16000MiB`,
    /// or bytes.
    pub fn parse(spec: &str) -> Result<Preset, String> {
        if let Some(p) = Preset::find(spec) {
            return Ok(p.clone());
        }
        let s = spec.trim();
        let digits = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
        let (number, unit) = s.split_at(digits);
        let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            _ => return Err(unknown(spec)),
        };
        let value: f64 = number.parse().map_err(|_| unknown(spec))?;
        let bytes = (value * factor).round();
        if !(1.0..1e15).contains(&bytes) {
            return Err(format!("GPU size {spec:?} is out of range: give between 1 byte and 1 PB"));
        }
        Ok(Preset::sized(bytes as u64))
    }

    /// The environment the simulated runtime reads this card from.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FAKECUDA_NAME", self.device_name.to_string()),
            ("FAKECUDA_TOTAL", self.total_bytes.to_string()),
            ("FAKECUDA_MAJOR", self.compute_capability.0.to_string()),
            ("FAKECUDA_MINOR", self.compute_capability.1.to_string()),
            ("FAKECUDA_SM_COUNT", self.sm_count.to_string()),
            ("FAKECUDA_L2_BYTES", self.l2_bytes.to_string()),
            ("FAKECUDA_BUS_WIDTH", self.memory_bus_width_bits.to_string()),
            ("FAKECUDA_THREADS_PER_SM", self.max_threads_per_sm.to_string()),
            ("FAKECUDA_BLOCKS_PER_SM", self.max_blocks_per_sm.to_string()),
            ("FAKECUDA_SMEM_PER_SM", self.shared_memory_per_sm_bytes.to_string()),
            ("FAKECUDA_SMEM_PER_BLOCK_OPTIN", self.shared_memory_per_block_optin_bytes.to_string()),
            ("FAKECUDA_CLOCK_KHZ", self.clock_khz.to_string()),
            ("FAKECUDA_MEMORY_CLOCK_KHZ", self.memory_clock_khz.to_string()),
        ]
    }
}

fn normalise(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect()
}

fn unknown(spec: &str) -> String {
    let names: Vec<&str> = PRESETS.iter().map(|p| p.key.as_ref()).collect();
    format!("no GPU preset or size {spec:?}: give one of {} or a size such as 24GiB", names.join(", "))
}

fn human_bytes(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_found_by_their_usual_spellings() {
        assert_eq!(Preset::find("A100-80GB").map(|p| p.device_name.as_ref()), Some("NVIDIA A100-SXM4-80GB"));
        assert_eq!(Preset::find("h100").map(|p| p.compute_capability), Some((9, 0)));
        assert_eq!(Preset::find("4090").map(|p| p.key.as_ref()), Some("rtx4090"));
        assert_eq!(Preset::find("T4").map(|p| p.sm_count), Some(40));
        assert!(Preset::find("v100").is_none());
        assert!(Preset::find("80gb").is_none(), "a size suffix alone is not a card");
        assert_eq!(Preset::find("NVIDIA H100 80GB HBM3").map(|p| p.key.as_ref()), Some("h100"));
    }

    #[test]
    fn the_table_holds_every_card_the_issue_names_with_sane_numbers() {
        for key in ["t4", "l4", "rtx4090", "a100-40gb", "a100-80gb", "h100", "h200"] {
            let p = Preset::find(key).unwrap_or_else(|| panic!("no preset {key}"));
            let gib = p.total_bytes as f64 / (1u64 << 30) as f64;
            assert!((14.0..140.0).contains(&gib), "{key}: {gib} GiB");
            assert!(p.max_threads_per_sm >= 1024 && p.sm_count >= 40, "{key}");
        }
        let totals: Vec<u64> = PRESETS.iter().map(|p| p.total_bytes).collect();
        assert!(totals.windows(2).all(|w| w[0] < w[1]), "smallest first: {totals:?}");
    }

    #[test]
    fn plain_sizes_are_parsed_in_binary_and_decimal_units() {
        assert_eq!(Preset::parse("24GiB").map(|p| p.total_bytes), Ok(24 << 30));
        assert_eq!(Preset::parse("16GB").map(|p| p.total_bytes), Ok(16_000_000_000));
        assert_eq!(Preset::parse("512MiB").map(|p| p.total_bytes), Ok(512 << 20));
        assert_eq!(Preset::parse("1000000").map(|p| p.total_bytes), Ok(1_000_000));
        assert_eq!(Preset::parse("0.5GiB").map(|p| p.total_bytes), Ok(1 << 29));
        let sized = Preset::parse("24GiB").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sized.device_name, "vramkit simulated GPU (24.0 GiB)");
        assert_eq!(sized.compute_capability, (9, 0));
        let err = Preset::parse("24 furlongs").unwrap_err();
        assert!(err.contains("24 furlongs") && err.contains("a100-80gb") && err.contains("24GiB"), "{err}");
        assert!(Preset::parse("0GiB").unwrap_err().contains("out of range"));
    }

    #[test]
    fn the_environment_carries_every_property() {
        let env = Preset::find("l4").map(Preset::env).unwrap_or_default();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FAKECUDA_NAME"), Some("NVIDIA L4"));
        assert_eq!(get("FAKECUDA_TOTAL"), Some("23612293120"));
        assert_eq!(get("FAKECUDA_MAJOR"), Some("8"));
        assert_eq!(get("FAKECUDA_MINOR"), Some("9"));
        assert_eq!(get("FAKECUDA_SM_COUNT"), Some("58"));
        assert_eq!(get("FAKECUDA_THREADS_PER_SM"), Some("1536"));
        assert_eq!(env.len(), 13);
    }
}

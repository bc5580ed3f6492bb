//! What the process environment chooses: the device backend
//! (`VRAMKIT_DEVICE`) and the allocator settings (`VRAMKIT_ALLOC_CONF`,
//! else PyTorch's variables).

use std::fmt;
use vramkit_core::AllocatorConfig;

/// The variables read for settings, first set wins (not merged, as in PyTorch).
pub const CONF_VARIABLES: [&str; 3] = ["VRAMKIT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"];

/// The variable that chooses the backend: `cuda` (the default), `sim` or `sim:<capacity>`.
pub const DEVICE_VARIABLE: &str = "VRAMKIT_DEVICE";

/// Memory of a simulated device when `sim` names no capacity: 80 GiB, an H100's.
pub const DEFAULT_SIM_CAPACITY_BYTES: u64 = 80 << 30;

/// Which devices serve the C entry points, chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Real GPUs through the CUDA driver (`vramkit-cuda`).
    Cuda,
    /// A simulated GPU per device index, for tests and dry runs.
    Sim {
        /// Memory of each simulated device.
        capacity_bytes: u64,
    },
}

impl Backend {
    /// Reads `cuda`, `sim` or `sim:<capacity>` (`sim:8GiB`, `sim:1073741824`).
    pub fn parse(text: &str) -> Result<Backend, String> {
        let text = text.trim();
        if text == "cuda" {
            return Ok(Backend::Cuda);
        }
        if text == "sim" {
            return Ok(Backend::Sim { capacity_bytes: DEFAULT_SIM_CAPACITY_BYTES });
        }
        if let Some(capacity) = text.strip_prefix("sim:") {
            return parse_bytes(capacity).map(|capacity_bytes| Backend::Sim { capacity_bytes }).ok_or_else(|| {
                format!("bad capacity {capacity:?} in {text:?}: write bytes with an optional unit, e.g. sim:8GiB")
            });
        }
        Err(format!("unknown backend {text:?}: expected cuda, sim or sim:<capacity> (e.g. sim:8GiB)"))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cuda => f.write_str("cuda"),
            Backend::Sim { capacity_bytes } => write!(f, "sim:{capacity_bytes}"),
        }
    }
}

/// `123`, `123B`, `4K`/`4KiB`/`4KB`, `M`, `G`, `T` (all powers of 1024).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KiB" => 10,
        "M" | "MB" | "MiB" => 20,
        "G" | "GB" | "GiB" => 30,
        "T" | "TB" | "TiB" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift).filter(|&b| b > 0)
}

/// The backend `VRAMKIT_DEVICE` names; `cuda` when unset. A bad value
/// prints one line to stderr and falls back to `cuda`.
pub fn backend_from_env() -> Backend {
    match std::env::var(DEVICE_VARIABLE) {
        Ok(value) => Backend::parse(&value).unwrap_or_else(|reason| {
            eprintln!("vramkit: ignoring {DEVICE_VARIABLE}={value:?}: {reason}; using cuda");
            Backend::Cuda
        }),
        Err(_) => Backend::Cuda,
    }
}

/// The settings from the first of [`CONF_VARIABLES`] that is set, and the
/// one line to print when it did not parse (the defaults are used then).
pub fn config_from_vars(get: impl Fn(&str) -> Option<String>) -> (AllocatorConfig, Option<String>) {
    for name in CONF_VARIABLES {
        if let Some(value) = get(name) {
            return match AllocatorConfig::parse(&value) {
                Ok(config) => (config, None),
                Err(error) => (
                    AllocatorConfig::pytorch_default(),
                    Some(format!("vramkit: ignoring {name}={value:?}: {error}; using PyTorch's default settings")),
                ),
            };
        }
    }
    (AllocatorConfig::pytorch_default(), None)
}

/// [`config_from_vars`] on the process environment, printing the warning.
pub fn config_from_env() -> AllocatorConfig {
    let (config, warning) = config_from_vars(|name| std::env::var(name).ok());
    if let Some(line) = warning {
        eprintln!("{line}");
    }
    config
}

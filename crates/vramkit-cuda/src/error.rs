//! The crate's error type.

/// Why a [`CudaDevice`](crate::CudaDevice) could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The CUDA driver library (`libcuda.so.1` / `nvcuda.dll`) could not be
    /// loaded: this machine has no NVIDIA driver, or it is not on the
    /// library path.
    #[error(
        "no CUDA driver found: the CUDA driver library (libcuda.so / nvcuda.dll) could not be loaded; \
         install an NVIDIA driver, check LD_LIBRARY_PATH, or use a simulated device"
    )]
    NoDriver,
    /// vramkit-cuda was compiled without its `cuda` feature.
    #[error(
        "vramkit-cuda was built without its `cuda` feature, so it cannot talk to a GPU; rebuild with `--features cuda`"
    )]
    NotBuilt,
    /// The device index is not one of this machine's GPUs.
    #[error("CUDA device {index} does not exist: this machine has {count} CUDA device(s)")]
    InvalidDevice {
        /// The index asked for.
        index: i32,
        /// How many devices the driver reports.
        count: i32,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} (CUresult {code})")]
    Driver {
        /// The driver function, e.g. `cuDevicePrimaryCtxRetain`.
        call: &'static str,
        /// The `CUresult` value.
        code: u32,
        /// The driver's name for it, e.g. `CUDA_ERROR_NO_DEVICE`.
        name: String,
    },
}

//! The few things every driver call needs: is the library there, what a
//! failed `CUresult` is called, and a context made current for one call.
//!
//! cudarc resolves each driver symbol on first use and *panics* when the
//! library is missing, so nothing in this crate calls into `sys` before
//! [`driver_available`] said yes: a [`CudaDevice`](crate::CudaDevice) exists
//! only after that check, and every call goes through one.

use crate::CudaError;
use cudarc::driver::sys::{self, CUresult};
use std::ffi::CStr;
use std::sync::OnceLock;
use vramkit_core::DeviceError;

/// Whether the CUDA driver library can be loaded on this machine. Checked
/// once per process; never panics.
pub fn driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries to `dlopen` the driver library
        // under its usual names and closes it again. The premise of loading a
        // library is that its initialisers are sound to run in this process;
        // NVIDIA's libcuda is written to be loaded into any process.
        unsafe { sys::is_culib_present() }
    })
}

/// A driver call that returned something other than `CUDA_SUCCESS`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure {
    pub(crate) call: &'static str,
    pub(crate) result: CUresult,
}

impl Failure {
    /// The driver's name for the result, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
    pub(crate) fn name(&self) -> String {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the driver is loaded (a `Failure` only comes from a call
        // made after `driver_available()`); `name` is a valid place for the
        // out pointer.
        let status = unsafe { sys::cuGetErrorName(self.result, &mut name) };
        if status != CUresult::CUDA_SUCCESS || name.is_null() {
            return format!("unknown CUresult {}", self.code());
        }
        // SAFETY: on success the driver points `name` at a static,
        // NUL-terminated ASCII string it owns for the life of the process.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }

    pub(crate) fn code(&self) -> u32 {
        self.result as u32
    }

    pub(crate) fn is_out_of_memory(&self) -> bool {
        self.result == CUresult::CUDA_ERROR_OUT_OF_MEMORY
    }

    pub(crate) fn into_cuda_error(self) -> CudaError {
        CudaError::Driver { call: self.call, code: self.code(), name: self.name() }
    }

    /// Out of memory stays recoverable; anything else names the call.
    pub(crate) fn into_device_error(self, requested_bytes: u64) -> DeviceError {
        if self.is_out_of_memory() {
            DeviceError::OutOfMemory { requested_bytes }
        } else {
            DeviceError::Other { call: self.call, message: format!("{} (CUresult {})", self.name(), self.code()) }
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} (CUresult {})", self.call, self.name(), self.code())
    }
}

/// `Ok` for `CUDA_SUCCESS`, otherwise the call and its result.
#[inline]
pub(crate) fn check(call: &'static str, result: CUresult) -> Result<(), Failure> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Failure { call, result })
    }
}

/// Makes a context current on this thread for the guard's life, then puts
/// back whatever was current before, so a caller of the CUDA runtime never
/// finds its current device changed. Costs one `cuCtxGetCurrent` when the
/// context is already current.
///
/// Holds a raw pointer, so it is neither `Send` nor `Sync`: current
/// contexts are per thread.
#[derive(Debug)]
pub(crate) struct CurrentContext {
    /// The context to restore, when this guard changed it.
    previous: Option<sys::CUcontext>,
}

impl CurrentContext {
    /// # Safety
    /// - The driver library is loaded and `cuInit` succeeded.
    /// - `context` is a live context that stays retained for the guard's life.
    pub(crate) unsafe fn enter(context: sys::CUcontext) -> Result<CurrentContext, Failure> {
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: driver loaded and initialised (caller's premise); `current`
        // is a valid place for the out pointer.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if current == context {
            return Ok(CurrentContext { previous: None });
        }
        // SAFETY: `context` is live (caller's premise); making a context
        // current touches only this thread's state.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context) })?;
        Ok(CurrentContext { previous: Some(current) })
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: the driver is loaded (it was when the guard was made).
            // `previous` was current on this thread a moment ago and nothing
            // outside this crate ran since, so it is still live (or null,
            // which means "no context").
            let _ = unsafe { sys::cuCtxSetCurrent(previous) };
        }
    }
}

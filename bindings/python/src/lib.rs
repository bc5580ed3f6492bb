//! `vramkit._vramkit`: the native half of the `vramkit` Python package.
//!
//! # Architecture
//! This shared object is two things at once. It is the Python extension
//! module (the functions below, wrapped by `python/vramkit/*.py`), and it is
//! the library PyTorch's `CUDAPluggableAllocator` loads: rustc exports the
//! `#[no_mangle] extern "C"` functions of every crate linked into a cdylib,
//! so vramkit-capi's C entry points (`vramkit_malloc`, `vramkit_free`,
//! `vramkit_empty_cache`, ...) are in this library's dynamic symbol table
//! without being named here (`tests/test_live.py` checks with `nm -D`). `ctypes.CDLL` of the module's own path returns the handle Python's
//! import already holds, so PyTorch's allocations and the stats read here
//! are one process-wide state (`vramkit_capi::process`).
//!
//! The snapshot-file tools (`files`) run the replayer on a file read by
//! [`files::read_snapshot`]; `simgpu` gives the environment that runs a
//! program on the simulated GPU the wheel ships. The `vramkit` command is
//! not in here: it is the CLI's own binary, shipped beside this module
//! (`build.rs`) and started by `python/vramkit/_command.py`.

#![forbid(unsafe_code)]

mod files;
mod simgpu;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use vramkit_capi::{process, Backend, Error};

/// A vramkit-capi error as the Python exception a caller expects: bad
/// arguments and settings are `ValueError`s, the rest `RuntimeError`s.
fn to_py(error: Error) -> PyErr {
    match error {
        Error::Allocator(vramkit_core::Error::Config(_)) | Error::NoDevice { .. } | Error::InvalidArgument { .. } => {
            PyValueError::new_err(error.to_string())
        }
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// `torch.cuda.memory_stats(device)`: every key, sorted, all zero for a
/// device vramkit has not served yet.
#[pyfunction]
fn memory_stats(device: i32) -> PyResult<BTreeMap<String, i64>> {
    process::memory_stats(device).map_err(to_py)
}

/// `torch.cuda.memory_summary(device, abbreviated)`.
#[pyfunction]
fn memory_summary(device: i32, abbreviated: bool) -> PyResult<String> {
    process::memory_summary(device, abbreviated).map_err(to_py)
}

/// Every device's snapshot in PyTorch's dict shape, as JSON text.
#[pyfunction]
fn snapshot_json() -> String {
    process::snapshot().to_string()
}

/// `torch.cuda.empty_cache()` on every device vramkit serves.
#[pyfunction]
fn empty_cache() -> PyResult<()> {
    process::empty_cache().map_err(to_py)
}

/// Applies a `PYTORCH_CUDA_ALLOC_CONF`-style string to every device, now
/// and later; only the keys named change.
#[pyfunction]
fn set_settings(conf: &str) -> PyResult<()> {
    process::update_settings(conf).map_err(to_py)
}

/// The current settings as a `PYTORCH_CUDA_ALLOC_CONF` string.
#[pyfunction]
fn settings() -> String {
    process::settings().to_conf_string()
}

/// `torch.cuda.reset_peak_memory_stats(device)`.
#[pyfunction]
fn reset_peak_stats(device: i32) -> PyResult<()> {
    process::reset_peak_stats(device).map_err(to_py)
}

/// `torch.cuda.reset_accumulated_memory_stats(device)`.
#[pyfunction]
fn reset_accumulated_stats(device: i32) -> PyResult<()> {
    process::reset_accumulated_stats(device).map_err(to_py)
}

/// Starts (or stops and clears) the trace of allocator events that the
/// snapshot reports; `max_entries` bounds it (`None`: unbounded).
#[pyfunction]
#[pyo3(signature = (device, enabled, max_entries=None))]
fn record_history(device: i32, enabled: bool, max_entries: Option<usize>) -> PyResult<()> {
    process::record_history(device, enabled, max_entries).map_err(to_py)
}

/// Where memory comes from: `"cuda"`, or `"sim:<bytes>"` for the simulated
/// device (`VRAMKIT_DEVICE`).
#[pyfunction]
fn backend() -> String {
    process::backend().to_string()
}

/// Chooses the backend (`"cuda"`, `"sim"`, `"sim:8GiB"`) before first use.
#[pyfunction]
fn select_backend(name: &str) -> PyResult<()> {
    let backend = Backend::parse(name).map_err(PyValueError::new_err)?;
    process::select_backend(backend).map_err(to_py)
}

/// Misuse of the C entry points reported since the library was loaded.
#[pyfunction]
fn boundary_errors() -> u64 {
    process::boundary_error_count()
}

/// Device indices vramkit has served.
#[pyfunction]
fn devices_in_use() -> Vec<i32> {
    process::devices_in_use()
}

/// Whether the C entry points follow the allocator rules of PyTorch release
/// `version` (`2.15.0+cu132`): vramkit-core's rules for that release line
/// are the ones its settings carry (PyTorch 2.10 and 2.11's by default).
#[pyfunction]
fn follows_pytorch_rules(version: &str) -> PyResult<bool> {
    let release = vramkit_core::PytorchRelease::parse(version).map_err(PyValueError::new_err)?;
    Ok(process::settings().compat == release.compat())
}

/// The module `vramkit._vramkit`.
#[pymodule]
fn _vramkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SIMGPU_SHIPPED_ENV", vramkit_simgpu::SHIPPED_ENV)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(memory_summary, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot_json, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(set_settings, m)?)?;
    m.add_function(wrap_pyfunction!(settings, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_accumulated_stats, m)?)?;
    m.add_function(wrap_pyfunction!(record_history, m)?)?;
    m.add_function(wrap_pyfunction!(backend, m)?)?;
    m.add_function(wrap_pyfunction!(select_backend, m)?)?;
    m.add_function(wrap_pyfunction!(boundary_errors, m)?)?;
    m.add_function(wrap_pyfunction!(devices_in_use, m)?)?;
    m.add_function(wrap_pyfunction!(follows_pytorch_rules, m)?)?;
    m.add_function(wrap_pyfunction!(files::replay_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::verify_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::tune_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::doctor_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::report_html, m)?)?;
    m.add_function(wrap_pyfunction!(simgpu::simgpu_env, m)?)?;
    Ok(())
}

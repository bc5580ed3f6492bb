//! The simulated GPU the wheel ships (`vramkit/_simgpu`): the environment
//! that runs a Python program on it. `vramkit run` takes the same stacks
//! through `VRAMKIT_SIMGPU_SHIPPED`; this is for running a program on the
//! simulated card without `vramkit run`'s recording, e.g. one that swaps in
//! vramkit's allocator itself.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use vramkit_simgpu::{pinned_cudnn_version, Preset, Stack};

/// The variables to set for a program whose torch is built for CUDA
/// `cuda_major` (and requires `torch_requires`, its `Requires-Dist`
/// lines) to run on the simulated `gpu` (a preset or a size): the stack
/// shipped in `shipped` is installed into the user's cache on first use.
#[pyfunction]
pub fn simgpu_env(shipped: PathBuf, cuda_major: u32, gpu: &str, torch_requires: Vec<String>) -> PyResult<Vec<(String, String)>> {
    let preset = Preset::parse(gpu).map_err(PyValueError::new_err)?;
    let stack = Stack::install_shipped(&shipped, cuda_major).map_err(PyRuntimeError::new_err)?;
    let mut env: Vec<(String, String)> = stack.env(&preset).into_iter().map(|(k, v)| (k, v.to_string_lossy().into_owned())).collect();
    let metadata: String = torch_requires.iter().map(|r| format!("Requires-Dist: {r}\n")).collect();
    if let Some(version) = pinned_cudnn_version(&metadata) {
        env.push(("FAKECUDA_CUDNN_VERSION".into(), version.to_string()));
    }
    Ok(env)
}

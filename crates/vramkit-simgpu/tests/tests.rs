//! The simulated GPU, built and run for real.
//!
//! `libraries` checks what the build produced (sonames, version nodes,
//! exports) for both CUDA majors; `runtime` drives the runtime library from
//! Python's ctypes, without torch; `torch` runs real torch wheels on it
//! (device properties, the stubs winning over installed NVIDIA libraries, a
//! pluggable allocator that allocates through the driver API); `models`
//! trains GPT-2-small-, ResNet- and diffusion-UNet-sized models one step;
//! `shipped` installs a stack shipped as a wheel holds it (plain files) and
//! runs it; `faithful` reruns a program whose real-GPU recording we ship and compares
//! allocation for allocation.
//!
//! Everything skips when the machine cannot build the stack or fetch a torch
//! wheel, unless `VRAMKIT_REQUIRE_SIMGPU=1`. The torch releases:
//! `VRAMKIT_SIMGPU_RELEASES` (default `2.15.0,2.10.0`).

mod faithful;
mod libraries;
mod models;
mod runtime;
mod shipped;
mod support;
mod torch;

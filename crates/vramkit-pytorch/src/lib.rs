//! PyTorch's own caching allocator, without a GPU: the yardstick vramkit is
//! held to.
//!
//! PyTorch's CUDA caching allocator lives in `libc10_cuda.so`, which ships in
//! every torch wheel, and it needs only about forty functions of the CUDA
//! runtime. This crate gives it a fake runtime (`c/cudart.c`: bookkeeping,
//! no memory behind the addresses; NVML in `c/nvml.c`) and a driver program
//! (`c/harness.cpp`) that runs a [`Program`] of mallocs, frees,
//! `record_stream`s, `empty_cache()`s, settings changes and private pools on
//! it, and reports what PyTorch did: snapshots in
//! `torch.cuda.memory._snapshot()`'s shape, `memory_stats()`, the text of each
//! `OutOfMemoryError`, and timed cache-hit pairs.
//!
//! ```text
//!  Harness::build(release)                  Harness::run(program, setup)
//!   pip download torch==V, CUDA headers ->   harness < program
//!   cc cudart.c nvml.c -> libcudart.so.N     PyTorch's allocator decides
//!   c++ harness.cpp (V's headers, ABI)  ->   Outcome: snapshots, stats, OOM texts
//! ```
//!
//! Everything large (the wheels, about 0.5 to 0.9 GB each) is downloaded at
//! test time into a cache ([`cache_dir`]), never committed. On a machine
//! without network, pip or a C++ compiler, [`Harness::build`] says why and
//! returns `Ok(None)` (a skip), unless [`REQUIRE_ENV`] is `1` (CI).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod build;
mod program;
mod random;
mod release;
mod run;

pub use build::{cache_dir, Harness, REQUIRE_ENV};
pub use program::{Op, Program};
pub use random::{random_program, Shape};
pub use release::{Release, RELEASES};
pub use run::{Outcome, Setup, DEFAULT_CAPACITY};

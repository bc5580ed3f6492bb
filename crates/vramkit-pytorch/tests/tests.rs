//! vramkit held to PyTorch's own allocator, release by release.
//!
//! Each test builds the harness for the releases `support::releases()`
//! names (CI: the newest and the oldest), runs random programs on PyTorch's
//! allocator, and checks vramkit against what PyTorch did. The long sweep:
//! `VRAMKIT_PYTORCH_RELEASES=all VRAMKIT_SWEEP_SEEDS=100 cargo test --release -p vramkit-pytorch --test tests`.

mod stats;
mod support;
mod verify;
mod whatif;

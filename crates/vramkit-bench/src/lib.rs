//! Benchmarks live in `benches/`; this crate exists so that they build
//! `vramkit-core` without the `validate` feature its own tests turn on.

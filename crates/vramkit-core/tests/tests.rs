//! Integration tests of vramkit-core. Every test runs with the `validate`
//! feature, so the invariant checker runs after every public operation.

mod support;

mod config;
mod expandable;
mod faults;
mod max_split_watch;
mod goldens;
mod private_pools;
mod property;
mod scenarios;
mod temporary;

//! Integration tests of vramkit-core. Every test runs with the `validate`
//! feature, so the invariant checker runs after every public operation.

mod support;

mod property;
mod scenarios;

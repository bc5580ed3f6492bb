//! Integration tests of vramkit-replay.
//!
//! They turn the allocator's per-operation invariant checker off (the
//! `validate` feature, which the workspace's tests switch on): these tests
//! are about placement and replay every setting, the checker makes every
//! operation O(blocks) (sampled, `InvariantChecks::Sampled`, it still
//! makes `selfcheck::refusals_under_every_setting` take minutes), and
//! vramkit-core's own tests run it after every operation.

/// Turns the invariant checker off for this test process.
pub fn without_invariant_checks() {
    vramkit_core::set_invariant_checks(vramkit_core::InvariantChecks::Off);
}

mod selfcheck;
mod tune;
mod window;
mod whatif;

//! Integration tests of vramkit-replay.

mod selfcheck;
mod whatif;

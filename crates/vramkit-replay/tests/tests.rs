//! Integration tests of vramkit-replay.

mod selfcheck;

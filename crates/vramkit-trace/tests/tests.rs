//! Integration tests of vramkit-trace (one binary; one module per topic).

mod columns;
mod common;
mod entries;
mod expected;
mod integers;
mod json;
mod pickle_read;
mod pickle_write;
mod rmm;
mod robustness;
mod roundtrip;
mod schema;

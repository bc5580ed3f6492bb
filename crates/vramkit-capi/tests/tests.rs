//! Integration tests of vramkit-capi: the thread-safe front end on a
//! simulated device, the C entry points called in-process, the generated
//! header, and a C program linked against the built library.

// The C entry points take C strings; calling them is `unsafe`.
#![allow(unsafe_code)]

mod c_program;
mod concurrency;
mod ffi;
mod header;
mod misuse;
mod process;
mod settings;
mod shared;
mod snapshot;
mod threads;

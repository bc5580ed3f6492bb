//! Integration tests of vramkit-cuda. On a machine without a GPU (or
//! without the driver) the GPU tests print why and return early; the tests
//! of the no-driver path run everywhere.

mod support;

mod allocator;
mod device;
mod fake_driver;
mod fake_only;
mod no_driver;
mod vmm;

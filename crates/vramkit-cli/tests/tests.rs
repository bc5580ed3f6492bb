//! End-to-end tests of the `vramkit` binary on the real traces in `data/traces`, and of `vramkit run`
//! on real torch wheels.

mod bad_files;
mod commands;
mod run;
mod tune_doctor_report;

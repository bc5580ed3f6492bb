//! End-to-end tests of the `vramkit` binary on the real traces in `data/traces`.

mod bad_files;
mod commands;
mod tune_doctor_report;

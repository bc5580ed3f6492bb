//! End-to-end tests of the `vramkit` binary on the real traces in `data/traces`.

mod commands;
mod tune_doctor_report;

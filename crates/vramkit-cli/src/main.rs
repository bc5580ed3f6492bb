//! `vramkit`: parse, dispatch, map errors to exit codes (0 ok, 1 a failed
//! check, 2 bad input), and treat a closed pipe as success.

mod cli;
mod convert;
mod doctor;
mod input;
mod progress;
mod replay;
mod report;
mod run;
mod summary;
mod tune;
mod verify;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A test build of the workspace turns on core's per-operation checks;
    // the tool itself does not need them (core's own tests keep them).
    vramkit_core::set_invariant_checks(vramkit_core::InvariantChecks::Off);
    let args = cli::Cli::parse();
    let result = match args.command {
        cli::Command::Summary(a) => summary::run(a),
        cli::Command::Replay(a) => replay::run(a),
        cli::Command::Verify(a) => verify::run(a),
        cli::Command::Convert(a) => convert::run(a),
        cli::Command::Tune(a) => tune::run(a),
        cli::Command::Doctor(a) => doctor::run(a),
        cli::Command::Report(a) => report::run(a),
        cli::Command::Run(a) => run::run(a),
    };
    match result {
        Ok(code) => code,
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("vramkit: {err}");
            ExitCode::from(2)
        }
    }
}

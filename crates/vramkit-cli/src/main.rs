//! `vramkit`: parse, dispatch, map errors to exit codes (0 ok, 1 a failed
//! check, 2 bad input), and treat a closed pipe as success.

mod cli;
mod convert;
mod input;
mod replay;
mod summary;
mod verify;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A test build of the workspace turns on core's per-operation checks;
    // the tool itself does not need them (core's own tests keep them).
    vramkit_core::set_invariant_checks(false);
    let args = cli::Cli::parse();
    let result = match args.command {
        cli::Command::Summary(a) => summary::run(a),
        cli::Command::Replay(a) => replay::run(a),
        cli::Command::Verify(a) => verify::run(a),
        cli::Command::Convert(a) => convert::run(a),
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

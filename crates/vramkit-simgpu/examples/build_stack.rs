//! Builds the simulated CUDA stack of one major into a directory, for
//! packaging it prebuilt (a Python wheel ships `<dir>/lib`, and users need
//! no compiler):
//!
//! ```text
//! cargo run -p vramkit-simgpu --example build_stack -- 13 out/simgpu-cuda13
//! ```
//!
//! Exit code 0 and the library directory on stdout; 2 for bad arguments;
//! 1 when the build fails or this machine cannot build (it says why).

use std::path::PathBuf;
use std::process::ExitCode;
use vramkit_simgpu::Stack;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(major), Some(dir)) = (args.first().and_then(|m| m.parse::<u32>().ok()), args.get(1)) else {
        eprintln!("usage: build_stack CUDA_MAJOR DIR   (CUDA_MAJOR: 12 or 13)");
        return ExitCode::from(2);
    };
    match Stack::build(major, &PathBuf::from(dir)) {
        Ok(Some(stack)) => {
            println!("{}", stack.lib_dir().display());
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

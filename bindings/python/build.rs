//! Builds what the wheel ships beside the extension module, so that a user
//! who installs it needs no Rust, no C compiler and no CUDA toolkit:
//!
//! ```text
//!  OUT_DIR/_bin/vramkit            the `vramkit` command: crates/vramkit-cli, built by cargo
//!                                  as it is (every subcommand it has)
//!  OUT_DIR/_simgpu/cuda12, cuda13  the simulated CUDA stacks (vramkit-simgpu), compiled now
//!                                  and shipped as plain files (Stack::ship)
//! ```
//!
//! `pyproject.toml` puts both into the wheel under `vramkit/` (maturin's
//! `include ... from = "out-dir"`). The CLI is a binary crate, which no
//! crate can depend on, so it is built by a cargo of its own, in a target
//! directory beside this build's (`<profile>/vramkit-shipped/`), where the
//! stacks are compiled too: both stay incremental across rebuilds of this
//! crate whose OUT_DIR changes.
//!
//! Compiling the stacks needs a C compiler and the CUDA runtime headers
//! (fetched from PyPI into vramkit's cache once); without them the build
//! fails and says what to install.

use std::path::{Path, PathBuf};
use std::process::Command;
use vramkit_simgpu::{Stack, CUDA_MAJORS, REQUIRE_ENV};

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // OUT_DIR is <target>[/<triple>]/<profile>/build/<package>-<hash>/out.
    let shared = out.ancestors().nth(3).unwrap_or(&out).join("vramkit-shipped");
    for watched in ["crates", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", repo.join(watched).display());
    }
    for var in ["VRAMKIT_PYTORCH_CACHE", "CC", "PYTHON"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Err(e) = ship_stacks(&shared.join("stacks"), &out.join("_simgpu")).and_then(|()| ship_command(&repo, &shared, &out)) {
        eprintln!("{e}");
        panic!("{e}");
    }
}

/// Compiles the stack of every CUDA major into `build` (reused when its
/// sources did not change) and ships it into `shipped/cuda<major>`.
fn ship_stacks(build: &Path, shipped: &Path) -> Result<(), String> {
    // "Cannot be built here" is an error for a wheel, not a skip.
    std::env::set_var(REQUIRE_ENV, "1");
    for &major in CUDA_MAJORS {
        let stack = Stack::build(major, &build.join(format!("cuda{major}")))
            .map_err(|e| {
                format!(
                    "the vramkit wheel ships the simulated CUDA {major} stack, compiled while it is built: {e}\n\
                     Install a C compiler (e.g. apt-get install gcc) and let pip reach PyPI for the CUDA headers \
                     (or set VRAMKIT_PYTORCH_CACHE to a cache that holds them)."
                )
            })?
            .ok_or("the simulated CUDA stack was not built, and nothing said why")?;
        stack.ship(&shipped.join(format!("cuda{major}")))?;
    }
    Ok(())
}

/// Builds the `vramkit` command with this build's profile and target into
/// `shared/cli` and copies it to `out/_bin/vramkit`.
fn ship_command(repo: &Path, shared: &Path, out: &Path) -> Result<(), String> {
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "release".into());
    let target = std::env::var("TARGET").unwrap_or_default();
    let cross = target != std::env::var("HOST").unwrap_or_default();
    let target_dir = shared.join("cli");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(["build", "--quiet", "--package", "vramkit-cli", "--bin", "vramkit", "--manifest-path"])
        .arg(repo.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // Line tables (the workspace's release profile keeps them for
        // profiling) would triple the size of the wheel.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    if profile == "release" {
        command.arg("--release");
    }
    if cross {
        command.args(["--target", &target]);
    }
    let built = command.output().map_err(|e| format!("cannot run {}: {e}", cargo.to_string_lossy()))?;
    if !built.status.success() {
        return Err(format!(
            "building the vramkit command (cargo build -p vramkit-cli in {}) failed:\n{}",
            repo.display(),
            String::from_utf8_lossy(&built.stderr)
        ));
    }
    let mut binary = target_dir;
    if cross {
        binary.push(&target);
    }
    binary.push(profile);
    binary.push("vramkit");
    let bin = out.join("_bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("cannot create {}: {e}", bin.display()))?;
    std::fs::copy(&binary, bin.join("vramkit")).map(drop).map_err(|e| format!("cannot copy {}: {e}", binary.display()))
}

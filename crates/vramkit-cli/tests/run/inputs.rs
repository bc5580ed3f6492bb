//! Bad input is refused with exit code 2 and a message that names it and says what to give; a
//! torch the simulated GPU cannot serve is named with its release. No torch is needed: the
//! releases are fake `torch` packages (a `version.py`) put first on `PYTHONPATH`.

use super::support::{scratch, vramkit_run, Ran};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// A directory holding a package `torch` whose version.py says `version` and `cuda`.
fn fake_torch(name: &str, version: &str, cuda: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("torch")).unwrap();
    std::fs::write(dir.join("torch/__init__.py"), "raise ImportError('a fake torch')\n").unwrap();
    let text = format!("from typing import Optional\n__version__ = '{version}'\ncuda: Optional[str] = {cuda}\nhip: Optional[str] = None\n");
    std::fs::write(dir.join("torch/version.py"), text).unwrap();
    dir
}

fn refused(options: &[&str], command: &[&str], env: &[(&str, &OsStr)]) -> Ran {
    let command: Vec<&OsStr> = command.iter().map(OsStr::new).collect();
    let ran = vramkit_run(options, &command, env);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stdout.is_empty(), "{ran:?}");
    ran
}

#[test]
fn bad_options_are_named_with_the_fix() {
    let cases: [(&[&str], &str); 5] = [
        (&["--gpu", "v100"], "vramkit: --gpu: no GPU preset or size \"v100\": give one of t4, l4, rtx4090, a100-40gb, h100, a100-80gb, h200 or a size such as 24GiB"),
        (&["--gpu", "t4", "--reserve", "15GiB"], "vramkit: --reserve 15GiB: that is all of the Tesla T4's 15843721216 bytes; give less, e.g. 1GiB"),
        (&["--reserve", "lots"], "vramkit: --reserve: size \"lots\": unknown unit \"lots\"; use bytes or KiB, MiB, GiB, TiB (1024-based) or KB, MB, GB, TB (1000-based), e.g. 24GiB"),
        (&["--batch", "BS=1-64"], "vramkit: --batch \"BS=1-64\": \"1-64\" is not a whole number; give VAR=LO..HI (e.g. BS=1..256) or VAR=LIST (e.g. BS=8,16,24,32)"),
        (&["--batch", "BS=64..1"], "vramkit: --batch \"BS=64..1\": the range must run from at least 1 up to a larger value, e.g. BS=1..64"),
    ];
    for (options, says) in cases {
        let ran = refused(options, &["python3", "train.py"], &[]);
        assert_eq!(ran.stderr.trim(), says);
    }
}

#[test]
fn a_missing_command_or_program_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramkit")).args(["run", "--gpu", "t4"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<COMMAND>..."));
    let ran = refused(&[], &["pyhton3", "train.py"], &[]);
    assert_eq!(ran.stderr.trim(), "vramkit: pyhton3: no such program (check the command after --, or PATH)");
}

/// Skips (returns `None`) where there is no python3 to run the probe.
fn python3() -> Option<&'static str> {
    let found = std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: no python3 on PATH");
    }
    found.then_some("python3")
}

#[test]
fn a_torch_the_simulated_gpu_cannot_serve_is_named() {
    let Some(python) = python3() else { return };
    let cases = [
        ("cpu", "2.5.1+cpu", "None", "is a CPU-only build: the simulated GPU serves torch built for CUDA 12 or 13 (2.4 to 2.15 tested); install a CUDA build"),
        ("cu117", "2.0.1+cu117", "'11.7'", "is built for CUDA 11.7: the simulated GPU serves torch built for CUDA 12 or 13 (2.4 to 2.15 tested); install torch 2.4 or newer"),
    ];
    for (name, version, cuda, says) in cases {
        let dir = fake_torch(name, version, cuda);
        let ran = refused(&["--gpu", "t4"], &[python, "train.py"], &[("PYTHONPATH", dir.as_os_str())]);
        let at = format!("vramkit: torch {version} ({}) {says}", dir.join("torch").display());
        assert!(ran.stderr.starts_with(&at), "{}\nwanted: {at}", ran.stderr);
    }
}

#[test]
fn a_python_without_torch_is_named() {
    let Some(python) = python3() else { return };
    // `python-nosite` runs python3 -S: no site-packages, so no torch, wherever torch is installed.
    let dir = scratch("nosite");
    let wrapper = dir.join("python-nosite");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec {python} -S \"$@\"\n")).unwrap();
    make_executable(&wrapper);
    let ran = refused(&[], &[wrapper.to_str().unwrap(), "train.py"], &[]);
    assert!(ran.stderr.contains("has no torch to import: install a CUDA build of torch there (pip install torch), or name the program's Python with --python"), "{}", ran.stderr);
}

#[test]
fn bad_settings_are_refused_before_running() {
    let Some(python) = python3() else { return };
    let dir = fake_torch("conf", "2.15.0+cu132", "'13.2'");
    let ran = refused(&["--conf", "max_split_size_mb:10"], &[python, "train.py"], &[("PYTHONPATH", dir.as_os_str())]);
    assert!(ran.stderr.starts_with("vramkit: --conf \"max_split_size_mb:10\": "), "{}", ran.stderr);
    assert!(ran.stderr.contains("max_split_size_mb"), "{}", ran.stderr);
    let from_env = [("PYTHONPATH", dir.as_os_str()), ("PYTORCH_CUDA_ALLOC_CONF", OsStr::new("expandable_segments:Maybe"))];
    let ran = refused(&[], &[python, "train.py"], &from_env);
    assert!(ran.stderr.starts_with("vramkit: PYTORCH_CUDA_ALLOC_CONF (from your environment) \"expandable_segments:Maybe\": "), "{}", ran.stderr);
}

#[cfg(unix)]
fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(not(unix))]
fn make_executable(_: &Path) {}

//! What the tests share: the stacks and environments, built once per test
//! process, and running a script on the simulated GPU.

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use vramkit_pytorch::Release;
use vramkit_simgpu::{Preset, Stack, TorchEnv};

/// The torch releases the model tests run on: `$VRAMKIT_SIMGPU_RELEASES`
/// (`all`, or versions separated by commas), else the newest (CUDA 13) and
/// 2.10.0 (CUDA 12).
pub fn releases() -> Vec<&'static Release> {
    match std::env::var("VRAMKIT_SIMGPU_RELEASES") {
        Ok(list) if list == "all" => vramkit_pytorch::RELEASES.iter().collect(),
        Ok(list) => list.split(',').map(|v| release(v.trim())).collect(),
        Err(_) => vec![release("2.15.0"), release("2.10.0")],
    }
}

/// The release `version`, which vramkit-pytorch must know.
pub fn release(version: &str) -> &'static Release {
    Release::find(version).unwrap_or_else(|| panic!("no torch release {version:?} in vramkit_pytorch::RELEASES"))
}

/// The stack of `cuda_major`, built once per process; `None` (a skip,
/// explained on stderr) where this machine cannot build it.
pub fn stack(cuda_major: u32) -> Option<Stack> {
    static BUILT: OnceLock<Mutex<HashMap<u32, Option<Stack>>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    built.entry(cuda_major).or_insert_with(|| Stack::cached(cuda_major).unwrap_or_else(|e| panic!("{e}"))).clone()
}

/// The environment of `release`, made once per process; `None` on a skip.
pub fn torch(release: &'static Release) -> Option<TorchEnv> {
    static MADE: OnceLock<Mutex<HashMap<&'static str, Option<TorchEnv>>>> = OnceLock::new();
    let mut made = MADE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    made.entry(release.version).or_insert_with(|| TorchEnv::create(release).unwrap_or_else(|e| panic!("{e}"))).clone()
}

/// Stack and environment for `release`, or `None` (skip).
pub fn simulated(release: &'static Release) -> Option<(Stack, TorchEnv)> {
    let env = torch(release)?;
    Some((stack(env.cuda_major())?, env))
}

/// The preset called `name`.
pub fn preset(name: &str) -> Preset {
    Preset::parse(name).unwrap_or_else(|e| panic!("{e}"))
}

/// `tests/py`.
pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("py")
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramkit-simgpu-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// What a run printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The JSON report on the last line of stdout (the model scripts').
    pub fn report(&self) -> Value {
        assert!(self.success, "the script failed:\n{}", self.tail());
        let line = self.stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no report:\n{}", self.tail()));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("report {line:?}: {e}"))
    }

    /// The end of both outputs, for failure messages.
    pub fn tail(&self) -> String {
        let last = |s: &str| s.lines().rev().take(25).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        format!("stdout:\n{}\nstderr:\n{}", last(&self.stdout), last(&self.stderr))
    }
}

/// Runs `command` to completion.
pub fn run(command: &mut Command) -> Run {
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `env`'s Python on the simulated `preset`, its libraries reporting the
/// versions this torch pins.
pub fn python(stack: &Stack, env: &TorchEnv, preset: &Preset) -> Command {
    let mut command = stack.command(env.python(), preset);
    command.envs(env.library_env());
    command
}

/// `tests/py/<script> <args>` under `env`'s Python on the simulated `preset`.
pub fn script(stack: &Stack, env: &TorchEnv, preset: &Preset, script: &str, args: &[&str]) -> Command {
    let mut command = python(stack, env, preset);
    command.arg(scripts().join(script)).args(args).current_dir(scripts());
    command
}

/// A number in a report.
pub fn number(report: &Value, key: &str) -> u64 {
    report[key].as_u64().unwrap_or_else(|| panic!("report has no number {key}: {report}"))
}

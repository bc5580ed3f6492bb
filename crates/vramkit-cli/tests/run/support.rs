//! What the `vramkit run` tests share: a torch environment and the stack for it (made once per
//! process), the programs, and the binary.

use serde_json::Value;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use vramkit_pytorch::Release;
use vramkit_simgpu::{Stack, TorchEnv};

/// The Python of an environment holding torch `version`, with the simulated stack for it built;
/// `None` (a skip, explained on stderr) where this machine cannot make them.
pub fn python(version: &'static str) -> Option<PathBuf> {
    static MADE: OnceLock<Mutex<HashMap<&'static str, Option<PathBuf>>>> = OnceLock::new();
    let mut made = MADE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    made.entry(version)
        .or_insert_with(|| {
            let release = Release::find(version).unwrap_or_else(|| panic!("vramkit-pytorch knows no torch {version}"));
            let env = TorchEnv::create(release).unwrap_or_else(|e| panic!("{e}"))?;
            Stack::find(env.cuda_major()).unwrap_or_else(|e| panic!("{e}"))?;
            Some(env.python())
        })
        .clone()
}

/// The newest torch, which the tests run on.
pub fn newest() -> Option<PathBuf> {
    python("2.15.0")
}

/// `tests/programs/<name>`.
pub fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(name)
}

/// The line of `program` holding `text`, 1-based.
pub fn line_of(program: &Path, text: &str) -> usize {
    let source = std::fs::read_to_string(program).unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    source.lines().position(|l| l.contains(text)).map(|i| i + 1).unwrap_or_else(|| panic!("{text:?} not in {}", program.display()))
}

/// How `vramkit run` ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// `--json`'s object.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }

    /// Asserts the exit code, showing both outputs when it is not.
    pub fn expect(&self, code: i32) -> &Ran {
        assert_eq!(self.code, Some(code), "stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    /// Asserts stdout holds `text`.
    pub fn says(&self, text: &str) -> &Ran {
        assert!(self.stdout.contains(text), "no {text:?} in stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

/// `vramkit run <options> -- <command>`, with `env` added.
pub fn vramkit_run(options: &[&str], command: &[&OsStr], env: &[(&str, &OsStr)]) -> Ran {
    let mut args: Vec<OsString> = vec!["run".into()];
    args.extend(options.iter().map(OsString::from));
    args.push("--".into());
    args.extend(command.iter().map(|c| c.to_os_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_vramkit")).args(&args).envs(env.iter().copied()).output().expect("the binary runs");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramkit-cli-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// A number in a JSON value.
pub fn number(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

//! A session: the checked inputs, the stack for the program's torch, and running the program on
//! it, once or many times (`--batch`).

use super::batch::BatchSpec;
use super::hook::Hook;
use super::python::{interpreter, Torch};
use super::recording::Recording;
use crate::cli::{RunArgs, DEFAULT_GPU};
use crate::input::{parse_size, CliError};
use std::cell::Cell;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use vramkit_core::{AllocatorConfig, PytorchRelease};
use vramkit_simgpu::{Preset, Stack};

/// The environment variables PyTorch reads its allocator settings from (the second since 2.9).
const CONF_VARS: [&str; 2] = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"];

/// Where the program's output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// To the terminal (stdout to stderr under --json).
    Shown,
    /// Into a file, its end kept for a failure message.
    Kept,
}

/// Everything a run needs, checked before the first.
#[derive(Debug)]
pub struct Session {
    pub preset: Preset,
    /// `--gpu` was not given.
    pub gpu_is_default: bool,
    pub reserve_bytes: u64,
    pub torch: Torch,
    pub release: Option<PytorchRelease>,
    /// Said once in the output: an untested release, a guessed interpreter.
    pub notes: Vec<String>,
    pub command: Vec<OsString>,
    pub batch: Option<BatchSpec>,
    /// `--conf`, else the user's environment; empty: PyTorch's defaults.
    pub conf: String,
    pub json: bool,
    stack: Stack,
    hook: Hook,
    work: WorkDir,
    runs: Cell<u32>,
}

impl Session {
    /// Checks the arguments, finds the program's torch and the stack for it.
    pub fn prepare(args: &RunArgs) -> Result<Session, CliError> {
        let gpu_is_default = args.gpu.is_none();
        let preset = Preset::parse(args.gpu.as_deref().unwrap_or(DEFAULT_GPU)).map_err(|e| CliError::new(format!("--gpu: {e}")))?;
        let reserve_bytes = args.reserve.as_deref().map(parse_size).transpose().map_err(|e| CliError::new(format!("--reserve: {e}")))?.unwrap_or(0);
        if reserve_bytes >= preset.total_bytes {
            return Err(CliError::new(format!(
                "--reserve {}: that is all of the {}'s {} bytes; give less, e.g. 1GiB",
                args.reserve.as_deref().unwrap_or_default(),
                preset.device_name,
                preset.total_bytes
            )));
        }
        let batch = args.batch.as_deref().map(BatchSpec::parse).transpose().map_err(CliError::new)?;
        let interpreter = interpreter(&args.command, args.python.as_deref())?;
        let torch = Torch::probe(&interpreter.program)?;
        let major = torch.cuda_major()?;
        let (release, release_note) = torch.release();
        let conf = match &args.conf {
            Some(c) => c.clone(),
            None => CONF_VARS.iter().rev().find_map(|v| std::env::var(v).ok()).unwrap_or_default(),
        };
        let compat = release.unwrap_or_default().compat();
        AllocatorConfig::parse_with_compat(&conf, compat).map_err(|e| {
            let from = if args.conf.is_some() { "--conf" } else { "PYTORCH_CUDA_ALLOC_CONF (from your environment)" };
            CliError::new(format!("{from} {conf:?}: {e}"))
        })?;
        let mut notes: Vec<String> = release_note.into_iter().collect();
        if !interpreter.assumed.is_empty() {
            notes.push(interpreter.assumed.clone());
        }
        if let Some(b) = batch.as_ref().filter(|b| !b.appears_in(&args.command)) {
            notes.push(format!("{{{0}}} does not appear in the command: the program must read the environment variable {0}", b.var));
        }
        let spinner = crate::progress::spinner(&format!("preparing the simulated CUDA {major} stack"));
        let stack = Stack::find(major).map_err(CliError::new)?;
        spinner.finish_and_clear();
        let stack = stack.ok_or_else(|| {
            CliError::new(format!(
                "no simulated CUDA {major} stack on this machine: it is built once, with a C compiler (why it could not be is above); \
                 the vramkit Python package ships it prebuilt ({} names it)",
                vramkit_simgpu::SHIPPED_ENV
            ))
        })?;
        let work = WorkDir::new()?;
        let hook = Hook::install(&work.0.join("hook"))?;
        Ok(Session {
            preset,
            gpu_is_default,
            reserve_bytes,
            torch,
            release,
            notes,
            command: args.command.clone(),
            batch,
            conf,
            json: args.json,
            stack,
            hook,
            work,
            runs: Cell::new(0),
        })
    }

    /// What PyTorch may use: the card's memory less `--reserve`.
    pub fn usable_bytes(&self) -> u64 {
        self.preset.total_bytes - self.reserve_bytes
    }

    /// Runs the program once, with the `--batch` variable at `value` and `conf` instead of the
    /// session's settings when given; `record`: PyTorch records its memory history for a snapshot.
    pub fn run(&self, value: Option<u64>, conf: Option<&str>, output: Output, record: bool) -> Result<Recording, CliError> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let dir = self.work.0.join(format!("run-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
        let args = match (&self.batch, value) {
            (Some(b), Some(v)) => b.substitute(&self.command, v),
            _ => self.command.clone(),
        };
        let mut command = self.stack.command(&args[0], &self.preset);
        command.args(&args[1..]).envs(self.torch.library_env()).envs(self.hook.env(&dir, record));
        command.env("FAKECUDA_CONTEXT", self.reserve_bytes.to_string());
        if let (Some(b), Some(v)) = (&self.batch, value) {
            command.env(&b.var, v.to_string());
        }
        let conf = conf.unwrap_or(&self.conf);
        for var in CONF_VARS {
            command.env(var, conf);
        }
        let log = dir.join("output.txt");
        if output == Output::Kept {
            let file = File::create(&log).map_err(|e| CliError::new(format!("cannot create {}: {e}", log.display())))?;
            command.stdout(file.try_clone()?).stderr(file);
        } else if self.json {
            command.stdout(stderr()?);
        }
        let exit = spawn_and_wait(&mut command, &args[0])?;
        let tail = if output == Output::Kept { tail(&log, 25) } else { String::new() };
        Ok(Recording::collect(&dir, value, conf.to_string(), exit, tail))
    }
}

fn spawn_and_wait(command: &mut Command, program: &OsString) -> Result<std::process::ExitStatus, CliError> {
    command.status().map_err(|e| {
        let fix = if e.kind() == std::io::ErrorKind::NotFound { ": no such program (check the command after --)" } else { "" };
        CliError::new(format!("cannot run {}: {e}{fix}", program.to_string_lossy()))
    })
}

/// This process's stderr, for the program's stdout when stdout carries JSON.
fn stderr() -> Result<Stdio, CliError> {
    use std::os::fd::AsFd;
    Ok(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?))
}

/// The last `lines` lines of a file.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A scratch directory, removed when dropped.
#[derive(Debug)]
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> Result<WorkDir, CliError> {
        let dir = std::env::temp_dir().join(format!("vramkit-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! What one run left behind: how the program ended, and what the hook wrote (status-<pid>.json,
//! snapshot-<pid>.pickle) for each process that imported torch.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use vramkit_core::Frame;

/// status-<pid>.json, as sitecustomize.py writes it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Status {
    pub pid: u32,
    /// `torch.__version__`.
    pub torch: Option<String>,
    /// The process initialised CUDA.
    pub cuda_used: bool,
    pub oom: Option<OomStatus>,
    pub peak_reserved_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub snapshot: Option<PathBuf>,
    /// The hook could not start recording.
    pub hook_error: Option<String>,
    /// Python ran its exit handlers: the program's own code had finished.
    #[serde(default)]
    pub exiting: bool,
}

/// The first out-of-memory error of a process.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct OomStatus {
    pub requested_bytes: u64,
    /// PyTorch's message (`str(torch.OutOfMemoryError)`), when the error was raised into Python.
    pub message: Option<String>,
    /// The Python stack of the allocating thread, innermost first (empty on autograd's threads).
    #[serde(default)]
    pub stack: Vec<Frame>,
    /// The main thread's Python stack at that moment.
    #[serde(default)]
    pub main_thread_stack: Vec<Frame>,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Fits,
    /// PyTorch raised `torch.OutOfMemoryError` (the program may have caught it).
    OutOfMemory,
    /// Neither: why, in a sentence.
    Failed(String),
}

/// One run of the program.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The `--batch` value, if any.
    pub value: Option<u64>,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the program had it.
    pub conf: String,
    pub exit: ExitStatus,
    /// The process reported on: the first that ran out of memory, else the one that reserved most.
    pub status: Option<Status>,
    /// Processes that used the GPU.
    pub gpu_processes: usize,
    /// The end of the program's output, when it was captured.
    pub output_tail: String,
}

impl Recording {
    /// Reads what the hook wrote in `dir`.
    pub fn collect(dir: &Path, value: Option<u64>, conf: String, exit: ExitStatus, output_tail: String) -> Recording {
        let mut statuses: Vec<Status> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("status-") && n.ends_with(".json")))
            .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
            .collect();
        let gpu_processes = statuses.iter().filter(|s| s.cuda_used).count();
        statuses.sort_by_key(|s| (s.oom.is_none(), !s.cuda_used, std::cmp::Reverse(s.peak_reserved_bytes), s.pid));
        Recording { value, conf, exit, status: statuses.into_iter().next(), gpu_processes, output_tail }
    }

    /// Fits, ran out of memory, or failed (and why).
    pub fn outcome(&self) -> Outcome {
        let Some(status) = &self.status else {
            return Outcome::Failed(format!(
                "{} and never imported torch under vramkit's start-up hook (a Python started with -I, -E or -S ignores PYTHONPATH, where the hook is)",
                ended(&self.exit)
            ));
        };
        if status.oom.is_some() {
            return Outcome::OutOfMemory;
        }
        if let Some(e) = &status.hook_error {
            return Outcome::Failed(format!("vramkit's start-up hook could not record torch {}'s memory: {e}", status.torch.as_deref().unwrap_or("?")));
        }
        if !self.exit.success() && !self.died_in_teardown() {
            return Outcome::Failed(format!("{}, not from an out-of-memory error", ended(&self.exit)));
        }
        if !status.cuda_used {
            return Outcome::Failed("the program finished without using the GPU (torch.cuda was never initialised): does it pick the device?".into());
        }
        Outcome::Fits
    }

    /// Killed by a signal after the program's code had finished and Python had begun to exit
    /// (torch 2.15's teardown on the simulated stack sometimes aborts with "terminate called
    /// without an active exception" under load): the run itself is complete.
    pub fn died_in_teardown(&self) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            self.exit.signal().is_some() && self.status.as_ref().is_some_and(|s| s.exiting && s.oom.is_none())
        }
        #[cfg(not(unix))]
        false
    }

    /// How the program ended, in words.
    pub fn exit_text(&self) -> String {
        ended(&self.exit)
    }

    pub fn peak_reserved_bytes(&self) -> u64 {
        self.status.as_ref().and_then(|s| s.peak_reserved_bytes).unwrap_or(0)
    }

    pub fn snapshot(&self) -> Option<&Path> {
        self.status.as_ref().and_then(|s| s.snapshot.as_deref()).filter(|p| p.is_file())
    }
}

/// "the program exited with status 1", "... was killed by signal 11 (SIGSEGV)".
fn ended(exit: &ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = exit.signal() {
            let name = match signal {
                6 => " (SIGABRT)",
                9 => " (SIGKILL: out of host memory?)",
                11 => " (SIGSEGV: set VRAMKIT_SIMGPU_TRACE=1 to see which stubbed CUDA call it made last)",
                _ => "",
            };
            return format!("the program was killed by signal {signal}{name}");
        }
    }
    match exit.code() {
        Some(0) => "the program finished".into(),
        Some(code) => format!("the program exited with status {code}"),
        None => "the program ended".into(),
    }
}

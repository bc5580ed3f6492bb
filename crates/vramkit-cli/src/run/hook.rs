//! The start-up hook (`sitecustomize.py`): written into a directory that goes first on
//! `PYTHONPATH`, so the program's Python records its memory history without being changed.

use crate::input::CliError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

/// Trace entries PyTorch keeps (its ring buffer): a few training steps of a large model fit.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// The hook, installed in a directory.
#[derive(Debug)]
pub struct Hook {
    dir: PathBuf,
}

impl Hook {
    /// Writes the hook into `dir` (created).
    pub fn install(dir: &Path) -> Result<Hook, CliError> {
        std::fs::create_dir_all(dir).map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
        let file = dir.join("sitecustomize.py");
        std::fs::write(&file, SITECUSTOMIZE).map_err(|e| CliError::new(format!("cannot write {}: {e}", file.display())))?;
        Ok(Hook { dir: dir.to_path_buf() })
    }

    /// The environment of a run whose status and snapshot go to `run_dir`: the hook first on
    /// `PYTHONPATH`, ahead of what the user has there; `record`: a snapshot is recorded.
    pub fn env(&self, run_dir: &Path, record: bool) -> Vec<(&'static str, OsString)> {
        let mut path = vec![self.dir.clone()];
        path.extend(std::env::var_os("PYTHONPATH").iter().flat_map(std::env::split_paths));
        let joined = std::env::join_paths(path).unwrap_or_else(|_| self.dir.clone().into_os_string());
        vec![
            ("PYTHONPATH", joined),
            ("VRAMKIT_RUN_DIR", run_dir.as_os_str().to_owned()),
            ("VRAMKIT_RUN_MAX_ENTRIES", MAX_ENTRIES.to_string().into()),
            ("VRAMKIT_RUN_RECORD", if record { "1" } else { "0" }.into()),
        ]
    }
}

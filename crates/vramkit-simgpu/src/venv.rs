//! A Python environment with a real torch CUDA wheel, for running programs
//! on the simulated GPU.
//!
//! The wheel is installed with `--no-deps`: none of its NVIDIA dependencies
//! (two gigabytes of libraries the stack replaces), only the pure-Python
//! packages torch imports. Environments live in
//! `<cache>/simgpu/venv-<version>` and are made once (in a temporary
//! sibling, renamed when complete).

use crate::fetch;
use crate::unavailable::{settle, Unavailable};
use std::path::{Path, PathBuf};
use std::process::Command;
use vramkit_pytorch::Release;

/// What torch needs at import and for the usual programs, besides itself.
pub const TORCH_PYTHON_DEPENDENCIES: &[&str] =
    &["numpy", "filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2", "fsspec"];

/// A virtual environment holding one torch release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorchEnv {
    release: &'static Release,
    dir: PathBuf,
}

impl TorchEnv {
    /// The environment for `release` in `<cache>/simgpu/venv-<version>`,
    /// made when missing: the wheel from `<cache>/wheels` (downloaded with
    /// `pip download --no-deps` when not there) and
    /// [`TORCH_PYTHON_DEPENDENCIES`].
    ///
    /// `Ok(None)` when this machine cannot (no `python3 -m venv`, no network
    /// for what is missing), after printing why, unless
    /// `VRAMKIT_REQUIRE_SIMGPU=1`.
    pub fn create(release: &'static Release) -> Result<Option<TorchEnv>, String> {
        let dir = vramkit_pytorch::cache_dir().join("simgpu").join(format!("venv-{}", release.version));
        settle(&format!("making a Python environment with {release}"), make(release, &dir).map(|()| TorchEnv { release, dir }))
    }

    /// The release installed.
    pub fn release(&self) -> &'static Release {
        self.release
    }

    /// The CUDA major of the wheel: the stack it needs.
    pub fn cuda_major(&self) -> u32 {
        self.release.cuda_major()
    }

    /// The environment's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its interpreter.
    pub fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }

    /// The environment the stubs need to report the NVIDIA library versions
    /// this torch pins (`FAKECUDA_CUDNN_VERSION`): set it beside
    /// [`Stack::env`](crate::Stack::env).
    pub fn library_env(&self) -> Vec<(&'static str, String)> {
        let metadata = std::fs::read_dir(self.dir.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|python| python.path().join("site-packages").join(format!("torch-{}.dist-info", self.release.version)).join("METADATA"))
            .find_map(|path| std::fs::read_to_string(path).ok());
        match metadata.as_deref().and_then(crate::pins::pinned_cudnn_version) {
            Some(version) => vec![("FAKECUDA_CUDNN_VERSION", version.to_string())],
            None => Vec::new(),
        }
    }

    /// Installs `packages` (pip requirement strings) if they are not there.
    pub fn install(&self, packages: &[&str]) -> Result<(), String> {
        pip_install(&self.python(), packages).map_err(|e| format!("installing {} into {}: {e}", packages.join(" "), self.dir.display()))
    }
}

fn make(release: &Release, dir: &Path) -> Result<(), Unavailable> {
    if dir.join(".complete").is_file() {
        return Ok(());
    }
    let cache = vramkit_pytorch::cache_dir();
    let wheel = fetch::wheel(&cache, &format!("torch=={}", release.version), "", &[])?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("venv");
    let tmp = dir.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = (|| {
        run(Command::new(fetch::python()).args(["-m", "venv"]).arg(&tmp), "python3 -m venv")
            .map_err(|e| Unavailable::Here(format!("{e} (install python3-venv)")))?;
        // A venv's interpreter finds its packages from its own location, so
        // the environment works under its final name too.
        let python = tmp.join("bin").join("python");
        let mut torch = Command::new(&python);
        torch.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]).arg(&wheel);
        run(&mut torch, "pip install torch")?;
        pip_install(&python, TORCH_PYTHON_DEPENDENCIES)?;
        std::fs::write(tmp.join(".complete"), "").map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        Ok::<(), Unavailable>(())
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if std::fs::rename(&tmp, dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.join(".complete").is_file() {
            return Err(Unavailable::Failed(format!("cannot move {} to {}", tmp.display(), dir.display())));
        }
    }
    Ok(())
}

fn pip_install(python: &Path, packages: &[&str]) -> Result<(), Unavailable> {
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(packages);
    run(&mut pip, "pip install").map_err(|e| match e {
        // Without the index, nothing can be installed: a skip, not a bug.
        Unavailable::Failed(why) if why.contains("No matching distribution") || why.contains("connection") => Unavailable::Here(why),
        other => other,
    })
}

fn run(command: &mut Command, what: &str) -> Result<(), Unavailable> {
    let out = command.output().map_err(|e| Unavailable::Here(format!("cannot run {what}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    Err(Unavailable::Failed(format!("`{what}` failed: {last}")))
}

//! A built stack, and how a program is run on it.
//!
//! # How the stubs win
//!
//! torch's libraries find the NVIDIA ones by soname through `DT_RPATH`
//! (`$ORIGIN/../../nvidia/<x>/lib`), which the dynamic linker searches
//! *before* `LD_LIBRARY_PATH`; and `torch/__init__.py` preloads whatever
//! NVIDIA wheels are installed by absolute path. So a user with the real
//! libraries installed would get them under `LD_LIBRARY_PATH` alone. The
//! stack is therefore put in `LD_PRELOAD`: preloaded objects come first in
//! the global lookup scope, and a `DT_NEEDED` soname already loaded is not
//! searched for again, so every symbol torch imports binds to the stubs, and
//! a real library loaded later by path (torch's preloading) is never called.
//! `LD_LIBRARY_PATH` is set as well, for the names opened with `dlopen` that
//! no preloaded object carries as its soname: the driver (`libcuda.so.1`,
//! cudarc's `libcuda.so`) and `libnvidia-ml.so.1`, links to the runtime,
//! which the dynamic linker recognises as the file it already loaded.

use crate::build;
use crate::fetch::Headers;
use crate::unavailable::{settle, Unavailable};
use crate::preset::Preset;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The simulated CUDA stack of one CUDA major, built in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    cuda_major: u32,
    dir: PathBuf,
}

impl Stack {
    /// Builds the stack for `cuda_major` (12 or 13) into `dir`, fetching the
    /// CUDA runtime headers into [`vramkit_pytorch::cache_dir`] when they are
    /// not there yet. A stack already built there from the same sources is
    /// reused as it is.
    ///
    /// `Ok(None)` when this machine cannot (not Linux, no C compiler, no
    /// `python3 -m pip` or network for the headers), after printing why,
    /// unless [`REQUIRE_ENV`](crate::REQUIRE_ENV) is `1`: then that is an
    /// error. `Err` when a step fails for another reason (the compiler
    /// rejects a source).
    pub fn build(cuda_major: u32, dir: &Path) -> Result<Option<Stack>, String> {
        let attempt = || -> Result<Stack, Unavailable> {
            if !cfg!(target_os = "linux") {
                return Err(Unavailable::Here("the simulated GPU is built for Linux only".into()));
            }
            let cc = compiler()?;
            let headers = Headers::fetch(&vramkit_pytorch::cache_dir(), cuda_major)?;
            Ok(Stack::build_with_headers(cuda_major, dir, &headers, &cc)?)
        };
        settle(&format!("building the simulated CUDA {cuda_major} stack in {}", dir.display()), attempt())
    }

    /// [`build`](Stack::build) into `<cache>/simgpu/cuda<major>`.
    pub fn cached(cuda_major: u32) -> Result<Option<Stack>, String> {
        Stack::build(cuda_major, &vramkit_pytorch::cache_dir().join("simgpu").join(format!("cuda{cuda_major}")))
    }

    /// Builds with headers already at hand and the C compiler `cc`, asking
    /// no package index: for packaging the stack (a wheel build compiles it
    /// once, so users need no compiler).
    pub fn build_with_headers(cuda_major: u32, dir: &Path, headers: &Headers, cc: &str) -> Result<Stack, String> {
        build::build(cuda_major, dir, headers, cc)?;
        Stack::open(dir)
    }

    /// A stack built before (or shipped prebuilt) in `dir`.
    pub fn open(dir: &Path) -> Result<Stack, String> {
        let cuda_major = crate::symbols::CUDA_MAJORS
            .iter()
            .copied()
            .find(|m| dir.join("lib").join(format!("libcudart.so.{m}")).is_file())
            .ok_or_else(|| format!("{} holds no simulated CUDA stack (no lib/libcudart.so.12 or .13): build it first", dir.display()))?;
        Ok(Stack { cuda_major, dir: dir.to_path_buf() })
    }

    /// The CUDA major it serves (torch wheels `+cu12x` or `+cu13x`).
    pub fn cuda_major(&self) -> u32 {
        self.cuda_major
    }

    /// Where it is built.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of the libraries (and the runtime's other names).
    pub fn lib_dir(&self) -> PathBuf {
        self.dir.join("lib")
    }

    /// Every library to preload: the files in [`lib_dir`](Stack::lib_dir),
    /// not the links, sorted.
    pub fn preload(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.lib_dir())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// The environment a program runs on the simulated `preset` with: the
    /// stack preloaded ahead of anything already in `LD_PRELOAD`, its
    /// directory first on `LD_LIBRARY_PATH`, and the card.
    pub fn env(&self, preset: &Preset) -> Vec<(String, OsString)> {
        let mut env = vec![
            ("LD_PRELOAD".to_string(), prepend(&self.preload(), std::env::var_os("LD_PRELOAD"))),
            ("LD_LIBRARY_PATH".to_string(), prepend(&[self.lib_dir()], std::env::var_os("LD_LIBRARY_PATH"))),
        ];
        env.extend(preset.env().into_iter().map(|(k, v)| (k.to_string(), OsString::from(v))));
        env
    }

    /// `program` (typically a Python interpreter) set up to run on the
    /// simulated `preset`; add its arguments and run it.
    pub fn command(&self, program: impl AsRef<OsStr>, preset: &Preset) -> Command {
        let mut command = Command::new(program);
        command.envs(self.env(preset));
        command
    }
}

/// `paths` joined with `:`, then what was there before.
fn prepend(paths: &[PathBuf], before: Option<OsString>) -> OsString {
    let mut joined = OsString::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            joined.push(":");
        }
        joined.push(p);
    }
    if let Some(rest) = before.filter(|r| !r.is_empty()) {
        joined.push(":");
        joined.push(rest);
    }
    joined
}

/// The C compiler: `$CC`, else `cc`, if it runs.
fn compiler() -> Result<String, Unavailable> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        Ok(cc)
    } else {
        Err(Unavailable::Here(format!("no C compiler `{cc}` (install gcc or set CC)")))
    }
}

//! A stack shipped prebuilt, as the vramkit Python wheel carries it, and
//! made usable again on the user's machine.
//!
//! A wheel is a zip archive: it holds no symbolic links, and the runtime's
//! other names ([`RUNTIME_ALIASES`]) must be links. The dynamic linker takes
//! a link for the file it already preloaded (the same inode); a copy would be
//! loaded as a second runtime with a device of its own, and `cudarc` or
//! NVML would then see memory the runtime never handed out. So a stack is
//! shipped as its plain files ([`Stack::ship`]) and, the first time it is
//! used, installed into the user's cache with the links made again
//! ([`Stack::install`]):
//!
//! ```text
//!  <shipped>/cuda<major>/lib/lib*.so.*   the libraries, files only
//!  <shipped>/cuda<major>/stamp           the build's stamp
//!     --install-->  <user cache>/simgpu/cuda<major>-<stamp>/   what Stack::open takes
//! ```
//!
//! The copy is named by the stamp, so two vramkit versions never share one,
//! and it is made in a temporary sibling and renamed into place, so a
//! program never preloads a library another process is still writing.

use crate::build::{is_stamped, make_in_place, symlink, RUNTIME_ALIASES};
use crate::stack::Stack;
use std::path::{Path, PathBuf};

/// Names the directory that holds the stacks shipped with the vramkit
/// Python package (`cuda12/`, `cuda13/`, each written by [`Stack::ship`]).
/// The package's `vramkit` command sets it.
pub const SHIPPED_ENV: &str = "VRAMKIT_SIMGPU_SHIPPED";

impl Stack {
    /// Writes this stack's libraries (the files, not the links) and its
    /// stamp into `dir`, replacing what was there: the form a wheel ships
    /// and [`Stack::install`] takes.
    pub fn ship(&self, dir: &Path) -> Result<(), String> {
        let lib = dir.join("lib");
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
        for file in self.preload() {
            copy_into(&file, &lib)?;
        }
        copy_into(&self.dir().join("stamp"), dir)
    }

    /// The stack shipped in `shipped` (see [`Stack::ship`]) installed into
    /// `dir`, its runtime's other names linked again; a copy already there
    /// from the same build is used as it is.
    pub fn install(shipped: &Path, dir: &Path) -> Result<Stack, String> {
        let stamp = std::fs::read_to_string(shipped.join("stamp")).map_err(|e| {
            format!("{} holds no shipped simulated CUDA stack ({e} reading its stamp): reinstall vramkit", shipped.display())
        })?;
        let stamp = stamp.trim();
        if !is_stamped(dir, stamp) {
            let source = Stack::open(shipped)?;
            let runtime = format!("libcudart.so.{}", source.cuda_major());
            make_in_place(dir, stamp, |tmp| {
                let lib = tmp.join("lib");
                std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
                for file in source.preload() {
                    copy_into(&file, &lib)?;
                }
                RUNTIME_ALIASES.iter().try_for_each(|alias| symlink(&runtime, &lib.join(alias)))
            })?;
        }
        Stack::open(dir)
    }

    /// The stack of `cuda_major` shipped in `shipped_root` (a directory
    /// holding `cuda12/`, `cuda13/`), installed into
    /// `<user cache>/simgpu/cuda<major>-<stamp>`.
    pub fn install_shipped(shipped_root: &Path, cuda_major: u32) -> Result<Stack, String> {
        let shipped = shipped_root.join(format!("cuda{cuda_major}"));
        let stamp = std::fs::read_to_string(shipped.join("stamp")).map_err(|_| {
            format!(
                "{} holds no simulated CUDA {cuda_major} stack: this vramkit was packaged without it (reinstall vramkit; \
                 the wheel build compiles it with a C compiler)",
                shipped_root.display()
            )
        })?;
        let dir = user_cache_dir().join("simgpu").join(format!("cuda{cuda_major}-{}", stamp.trim()));
        Stack::install(&shipped, &dir)
    }

    /// The stack to run programs of `cuda_major` on: the one shipped with
    /// the Python package when [`SHIPPED_ENV`] names it (no compiler
    /// needed), else [`Stack::cached`] (built once with a C compiler).
    pub fn find(cuda_major: u32) -> Result<Option<Stack>, String> {
        match std::env::var_os(SHIPPED_ENV).filter(|v| !v.is_empty()) {
            Some(root) => Stack::install_shipped(Path::new(&root), cuda_major).map(Some),
            None => Stack::cached(cuda_major),
        }
    }
}

/// Where shipped stacks are installed: `$XDG_CACHE_HOME/vramkit`, else
/// `~/.cache/vramkit`, else `vramkit-cache` in the temporary directory.
pub fn user_cache_dir() -> PathBuf {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| std::env::var_os("HOME").and_then(absolute).map(|home| home.join(".cache")))
        .map(|cache| cache.join("vramkit"))
        .unwrap_or_else(|| std::env::temp_dir().join("vramkit-cache"))
}

/// Copies `file` into the directory `dir` under its own name, keeping its
/// permissions.
fn copy_into(file: &Path, dir: &Path) -> Result<(), String> {
    let name = file.file_name().ok_or_else(|| format!("{} names no file", file.display()))?;
    std::fs::copy(file, dir.join(name)).map(drop).map_err(|e| format!("cannot copy {} into {}: {e}", file.display(), dir.display()))
}

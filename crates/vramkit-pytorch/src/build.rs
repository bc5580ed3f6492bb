//! Building the harness for one release: download, extract, compile.
//!
//! Everything goes to [`cache_dir`]: `wheels/` (what pip downloaded),
//! `torch-<version>/` and `cuda-<version>/` (the few files taken out of the
//! wheels: two libraries and the headers), `harness-<version>-<hash>/` (the
//! fake runtime and the driver program, rebuilt when the sources change).
//! Each step writes to a temporary name and renames, so test processes
//! running at once never see half a step.

use crate::release::Release;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set to `1` to turn "cannot build the harness here" from a skip into a
/// failure (CI sets it).
pub const REQUIRE_ENV: &str = "VRAMKIT_REQUIRE_PYTORCH";

/// Where wheels and builds are kept: `$VRAMKIT_PYTORCH_CACHE`, else
/// `pytorch-harness/` in the workspace's target directory.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VRAMKIT_PYTORCH_CACHE") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("pytorch-harness")
}

const CUDART: &str = include_str!("../c/cudart.c");
const NVML: &str = include_str!("../c/nvml.c");
const HARNESS: &str = include_str!("../c/harness.cpp");

/// The harness built for one release.
#[derive(Clone, Debug)]
pub struct Harness {
    release: &'static Release,
    dir: PathBuf,
}

/// Why a build could not happen on this machine (a skip) or failed (an error).
enum Failure {
    Skip(String),
    Error(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Error(e)
    }
}

impl Harness {
    /// Builds (or finds, already built) the harness for `release` in
    /// [`cache_dir`].
    ///
    /// `Ok(None)` when this machine cannot (no python3 with pip, no C++
    /// compiler, no network to the package index), after printing why, unless
    /// [`REQUIRE_ENV`] is `1`: then that is an error. `Err` when a step fails
    /// for another reason (a compiler error, a wheel without the library).
    pub fn build(release: &'static Release) -> Result<Option<Harness>, String> {
        Self::build_in(release, &cache_dir())
    }

    /// [`build`](Harness::build) into `cache`.
    pub fn build_in(release: &'static Release, cache: &Path) -> Result<Option<Harness>, String> {
        match build(release, cache) {
            Ok(dir) => Ok(Some(Harness { release, dir })),
            Err(Failure::Error(e)) => Err(format!("building the PyTorch harness for {release}: {e}")),
            Err(Failure::Skip(why)) => {
                if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
                    Err(format!("the PyTorch harness for {release} cannot be built here ({why}), and {REQUIRE_ENV}=1 requires it"))
                } else {
                    eprintln!("skipped: the PyTorch harness for {release} cannot be built here: {why}");
                    Ok(None)
                }
            }
        }
    }

    /// The release it was built for.
    pub fn release(&self) -> &'static Release {
        self.release
    }

    /// The driver program.
    pub fn executable(&self) -> PathBuf {
        self.dir.join("harness")
    }

    /// The directory holding the fake runtime (and its other names,
    /// `libcuda.so.1` and `libnvidia-ml.so.1`).
    pub fn runtime_dir(&self) -> &Path {
        &self.dir
    }
}

fn build(release: &Release, cache: &Path) -> Result<PathBuf, Failure> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for tool in [&cxx, &cc] {
        if !Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Err(Failure::Skip(format!("no compiler `{tool}` (set CC and CXX)")));
        }
    }
    if !python(&["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success()) {
        return Err(Failure::Skip("no `python3 -m pip`".into()));
    }
    create_dir(cache)?;
    let hash = fnv(&[CUDART, NVML, HARNESS, release.version, release.cuda, &cxx, &cc, "3"]);
    let dir = cache.join(format!("harness-{}-{hash:016x}", release.version));
    if dir.join("harness").is_file() {
        return Ok(dir);
    }

    let torch = extracted(
        cache,
        &format!("torch-{}", release.version),
        &[&format!("torch=={}", release.version)],
        &["torch/lib/libc10.so", "torch/lib/libc10_cuda.so", "torch/include/c10/", "torch/include/torch/headeronly/"],
    )?;
    let major = release.cuda_major();
    // The runtime headers of the wheel's CUDA version. The CUDA 12 runtime
    // wheels lack crt/host_defines.h (macros only), so it comes from the
    // CUDA 13 crt wheel, searched last.
    let (runtime_spec, include) = if major >= 13 {
        (format!("nvidia-cuda-runtime=={}.*", release.cuda), "nvidia/cu13/include/")
    } else {
        (format!("nvidia-cuda-runtime-cu{major}=={}.*", release.cuda), "nvidia/cuda_runtime/include/")
    };
    let cuda = extracted(cache, &format!("cuda-{}", release.cuda), &[&runtime_spec], &[include])?;
    let crt = extracted(cache, "cuda-crt-13", &["nvidia-cuda-crt==13.2.*"], &["nvidia/cu13/include/crt/"])?;
    let cuda_include = cuda.join(include);
    let crt_include = crt.join("nvidia/cu13/include");

    let tmp = temporary(&dir);
    create_dir(&tmp)?;
    let lib = format!("libcudart.so.{major}");
    write(&tmp.join("cudart.c"), CUDART)?;
    write(&tmp.join("nvml.c"), NVML)?;
    write(&tmp.join("harness.cpp"), HARNESS)?;
    write(&tmp.join("cudart.map"), &format!("{lib} {{ global: *; }};\n"))?;
    compile(
        Command::new(&cc)
            .args(["-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(&cuda_include)
            .arg("-idirafter")
            .arg(&crt_include)
            .arg(format!("-Wl,--version-script={}", tmp.join("cudart.map").display()))
            .arg(format!("-Wl,-soname,{lib}"))
            .arg("-o")
            .arg(tmp.join(&lib))
            .arg(tmp.join("cudart.c"))
            .arg(tmp.join("nvml.c"))
            .arg("-lpthread"),
    )?;
    // One simulated device behind every name PyTorch loads: torch 2.1 to 2.6
    // dlopen the driver for expandable segments, and every release NVML.
    for alias in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        symlink(&lib, &tmp.join(alias))?;
    }
    let torch_lib = torch.join("torch/lib");
    compile(
        Command::new(&cxx)
            .arg(format!("-std={}", release.cpp_std()))
            .args(["-O2", "-g"])
            .arg(format!("-DVK_TORCH={}", release.code()))
            .arg(format!("-D_GLIBCXX_USE_CXX11_ABI={}", u8::from(release.cxx11_abi)))
            .arg("-I")
            .arg(torch.join("torch/include"))
            .arg("-I")
            .arg(&cuda_include)
            .arg("-idirafter")
            .arg(&crt_include)
            .arg(tmp.join("harness.cpp"))
            .arg("-o")
            .arg(tmp.join("harness"))
            .arg("-L")
            .arg(&torch_lib)
            .arg("-L")
            .arg(&tmp)
            .args(["-lc10_cuda", "-lc10", &format!("-l:{lib}")])
            .arg(format!("-Wl,-rpath,{}", torch_lib.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display())),
    )?;
    publish(&tmp, &dir)?;
    Ok(dir)
}

/// `cache/name`, holding the files under `members` of the wheels `specs`
/// (downloaded first when not in `cache/wheels`).
fn extracted(cache: &Path, name: &str, specs: &[&str], members: &[&str]) -> Result<PathBuf, Failure> {
    let dest = cache.join(name);
    if dest.join(".complete").is_file() {
        return Ok(dest);
    }
    let tmp = temporary(&dest);
    create_dir(&tmp)?;
    for spec in specs {
        let wheel = wheel(cache, spec)?;
        let script = "import sys, zipfile\n\
                      z = zipfile.ZipFile(sys.argv[1])\n\
                      names = [n for n in z.namelist() if any(n.startswith(p) for p in sys.argv[3:])]\n\
                      if not names: sys.exit('nothing under ' + ' '.join(sys.argv[3:]) + ' in ' + sys.argv[1])\n\
                      z.extractall(sys.argv[2], names)\n";
        let out = python(&["-c", script])
            .arg(&wheel)
            .arg(&tmp)
            .args(members)
            .output()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        if !out.status.success() {
            return Err(Failure::Error(format!("extracting {}: {}", wheel.display(), String::from_utf8_lossy(&out.stderr).trim())));
        }
    }
    write(&tmp.join(".complete"), "")?;
    publish(&tmp, &dest)?;
    Ok(dest)
}

/// The wheel for `spec` (`name==version`, the version may end in `.*`) in
/// `cache/wheels`, downloaded with `pip download --no-deps` when missing.
fn wheel(cache: &Path, spec: &str) -> Result<PathBuf, Failure> {
    let wheels = cache.join("wheels");
    create_dir(&wheels)?;
    let (name, version) = spec.split_once("==").unwrap_or((spec, ""));
    let stem = name.replace('-', "_");
    let version = version.trim_end_matches('*').trim_end_matches('.');
    let find = |dir: &Path| -> Option<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let file = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
                let rest = file.strip_prefix(&format!("{stem}-")).unwrap_or("");
                file.ends_with(".whl")
                    && (rest.starts_with(&format!("{version}-")) || rest.starts_with(&format!("{version}.")))
            })
            .collect();
        found.sort();
        found.pop()
    };
    if let Some(w) = find(&wheels) {
        return Ok(w);
    }
    let tmp = temporary(&wheels.join("download"));
    create_dir(&tmp)?;
    let out = python(&["-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check", "-d"])
        .arg(&tmp)
        .arg(spec)
        .output()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(Failure::Skip(format!("`pip download --no-deps {spec}` failed: {why}")));
    }
    let got = find(&tmp).ok_or_else(|| format!("pip downloaded no wheel for {spec} into {}", tmp.display()))?;
    let file = got.file_name().map(PathBuf::from).unwrap_or_default();
    let dest = wheels.join(file);
    // Another process may have put the same wheel there meanwhile: either copy will do.
    std::fs::rename(&got, &dest).map_err(|e| format!("cannot move {} to {}: {e}", got.display(), dest.display()))?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(dest)
}

fn python(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
    c.args(args);
    c
}

fn compile(command: &mut Command) -> Result<(), Failure> {
    let out = command.output().map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    if !out.status.success() {
        return Err(Failure::Error(format!(
            "{:?} failed:\n{}",
            command.get_program(),
            String::from_utf8_lossy(&out.stderr).lines().take(40).collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(())
}

/// A fresh temporary sibling of `dest`, unique to this process and call.
fn temporary(dest: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = dest.file_name().and_then(|f| f.to_str()).unwrap_or("x");
    dest.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Renames the finished `tmp` to `dest`; if another process got there
/// first, keeps theirs.
fn publish(tmp: &Path, dest: &Path) -> Result<(), Failure> {
    match std::fs::rename(tmp, dest) {
        Ok(()) => Ok(()),
        Err(_) if dest.exists() => {
            let _ = std::fs::remove_dir_all(tmp);
            Ok(())
        }
        Err(e) => Err(Failure::Error(format!("cannot rename {} to {}: {e}", tmp.display(), dest.display()))),
    }
}

fn create_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::Error(format!("cannot create {}: {e}", dir.display())))
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|e| Failure::Error(format!("cannot write {}: {e}", path.display())))
}

fn symlink(target: &str, link: &Path) -> Result<(), Failure> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(target, link)
            .map_err(|e| Failure::Error(format!("cannot link {} to {target}: {e}", link.display())))
    }
    #[cfg(not(unix))]
    {
        let _ = (target, link);
        Err(Failure::Skip("the fake CUDA runtime is built for Linux only".into()))
    }
}

/// FNV-1a over the parts (with separators): names a build by its inputs.
fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

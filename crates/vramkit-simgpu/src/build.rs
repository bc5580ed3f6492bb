//! Compiling the stack: sources and generated stubs to shared libraries.
//!
//! ```text
//!  <dir>/src/   every source as compiled, and src/gen/ (stubs, version scripts)
//!  <dir>/lib/   libcudart.so.<major>  (runtime.c + device.c + generated)
//!               libcuda.so.1, libcuda.so, libnvidia-ml.so.1 -> libcudart.so.<major>
//!               lib<x>.so.<n>         (c/lib/<x>.c + generated), one per library
//!  <dir>/stamp  the hash of every input: a matching stamp means built
//! ```
//!
//! A build happens in a temporary sibling and is renamed into place, so
//! processes building at once never see half a stack.

use crate::fetch::Headers;
use crate::sources::{self, SOURCES};
use crate::symbols::{self, Library};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The names the runtime library also answers to: the driver (torch's own
/// link, and cudarc's `dlopen("libcuda.so")`) and NVML.
pub const RUNTIME_ALIASES: &[&str] = &["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"];

/// Builds the stack of `cuda_major` into `dir` with `headers`, unless the
/// stamp there says it is built from these very inputs. `cc` is the C
/// compiler.
pub(crate) fn build(cuda_major: u32, dir: &Path, headers: &Headers, cc: &str) -> Result<(), String> {
    let libraries = symbols::libraries(cuda_major)?;
    let stamp = format!("{:016x}", stamp(cuda_major, headers, cc));
    if is_stamped(dir, &stamp) {
        return Ok(());
    }
    make_in_place(dir, &stamp, |tmp| compile_into(tmp, cuda_major, &libraries, headers, cc))
}

/// Whether `dir` holds a stack made from the inputs `stamp` names.
pub(crate) fn is_stamped(dir: &Path, stamp: &str) -> bool {
    std::fs::read_to_string(dir.join("stamp")).is_ok_and(|s| s.trim() == stamp)
}

/// Makes `dir` by `fill`ing a temporary sibling, writing `stamp` there last
/// and renaming it into place (an older `dir` moved aside first). Another
/// process having put a stack there meanwhile counts as success.
pub(crate) fn make_in_place(dir: &Path, stamp: &str, fill: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    let tmp = sibling(dir, "tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    let result = fill(&tmp).and_then(|()| write(&tmp.join("stamp"), stamp));
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dir.exists() {
        let old = sibling(dir, "old");
        std::fs::rename(dir, &old).map_err(|e| format!("cannot move the old stack {} aside: {e}", dir.display()))?;
        let _ = std::fs::remove_dir_all(&old);
    }
    match std::fs::rename(&tmp, dir) {
        Ok(()) => Ok(()),
        // Another process put the same stack there meanwhile.
        Err(_) if dir.join("stamp").is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => Err(format!("cannot rename {} to {}: {e}", tmp.display(), dir.display())),
    }
}

fn compile_into(dir: &Path, major: u32, libraries: &[Library], headers: &Headers, cc: &str) -> Result<(), String> {
    let src = dir.join("src");
    let gen = src.join("gen");
    let lib = dir.join("lib");
    for d in [&gen, &src.join("lib"), &lib] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    for source in SOURCES {
        write(&src.join(source.path), source.text)?;
    }
    let flags = ["-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"];
    let major_flag = format!("-DSIMGPU_CUDA_MAJOR={major}");
    let mut jobs = Vec::new();

    let runtime = format!("libcudart.so.{major}");
    let (runtime_libs, stubs): (Vec<&Library>, Vec<&Library>) = libraries.iter().partition(|l| l.is_runtime());
    write(&gen.join("runtime.c"), &sources::generated_stubs(&runtime_libs))?;
    write(&gen.join("runtime.map"), &sources::version_script(&runtime))?;
    let mut command = Command::new(cc);
    command
        .args(flags)
        .arg(&major_flag)
        .arg("-I")
        .arg(&src)
        .arg("-I")
        .arg(&headers.include)
        .arg("-idirafter")
        .arg(&headers.crt)
        .arg(format!("-Wl,--version-script={}", gen.join("runtime.map").display()))
        .arg(format!("-Wl,-soname,{runtime}"))
        .arg("-o")
        .arg(lib.join(&runtime))
        .args(sources::RUNTIME_UNITS.iter().map(|u| src.join(u)))
        .arg(gen.join("runtime.c"))
        .arg("-lpthread");
    jobs.push((runtime.clone(), command));

    for library in stubs {
        let generated = gen.join(format!("{}.c", library.soname));
        write(&generated, &sources::generated_stubs(&[library]))?;
        let mut command = Command::new(cc);
        // Stubs ignore most of their arguments by design.
        command.args(flags).arg("-Wno-unused-parameter").arg(&major_flag);
        if let Some(node) = &library.version_node {
            let script = gen.join(format!("{}.map", library.soname));
            write(&script, &sources::version_script(node))?;
            command.arg(format!("-Wl,--version-script={}", script.display()));
        }
        command.arg(format!("-Wl,-soname,{}", library.soname)).arg("-o").arg(lib.join(&library.soname));
        if let Some(path) = sources::handwritten(library.family()) {
            command.arg(src.join(path));
        }
        command.arg(&generated);
        jobs.push((library.soname.clone(), command));
    }
    run_all(jobs)?;
    for alias in RUNTIME_ALIASES {
        symlink(&runtime, &lib.join(alias))?;
    }
    Ok(())
}

/// Runs the compiler jobs, as many at once as there are cores.
fn run_all(jobs: Vec<(String, Command)>) -> Result<(), String> {
    let width = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut pending = jobs.into_iter();
    let mut running: Vec<(String, Child)> = Vec::new();
    let mut failures = Vec::new();
    loop {
        while running.len() < width {
            let Some((name, mut command)) = pending.next() else { break };
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            let child = command.spawn().map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
            running.push((name, child));
        }
        if running.is_empty() {
            break;
        }
        let (name, child) = running.remove(0);
        let out = child.wait_with_output().map_err(|e| format!("compiling {name}: {e}"))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            failures.push(format!("compiling {name} failed:\n{}", text.lines().take(30).collect::<Vec<_>>().join("\n")));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// FNV-1a over everything a build depends on.
fn stamp(major: u32, headers: &Headers, cc: &str) -> u64 {
    let symbols = match major {
        12 => include_str!("../symbols/cuda12.txt"),
        _ => include_str!("../symbols/cuda13.txt"),
    };
    let major = major.to_string();
    let include = headers.include.display().to_string();
    let crt = headers.crt.display().to_string();
    let mut parts: Vec<&str> = SOURCES.iter().flat_map(|s| [s.path, s.text]).collect();
    parts.extend([symbols, major.as_str(), include.as_str(), crt.as_str(), cc, "1"]);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// A fresh hidden sibling of `dir`, unique to this process and call.
fn sibling(dir: &Path, what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("stack");
    dir.with_file_name(format!(".{name}.{what}-{}-{n}", std::process::id()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(unix)]
pub(crate) fn symlink(target: &str, link: &Path) -> Result<(), String> {
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("cannot link {} to {target}: {e}", link.display()))
}

#[cfg(not(unix))]
pub(crate) fn symlink(target: &str, link: &Path) -> Result<(), String> {
    Err(format!("cannot link {} to {target}: the simulated GPU is built for Linux only", link.display()))
}

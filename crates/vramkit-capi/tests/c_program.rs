//! Compiles `tests/c/abi_test.c` with the system C compiler against the
//! generated header and the cdylib cargo built for these tests, runs it on
//! the simulated backend and on the CUDA backend over the fake driver, and
//! checks what it printed. Skips (with a
//! message) when there is no C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `libvramkit_capi.so`. The test binary lives in
/// `<target>/<profile>/deps/`, where `cargo test` builds the library beside
/// it (fresh for this run); `cargo build` also copies it one level up, but
/// `cargo test` alone does not, so `deps/` comes first.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("<target>/<profile>/deps").to_path_buf();
    if deps.join(library_file()).exists() {
        return deps;
    }
    deps.parent().expect("<target>/<profile>").to_path_buf()
}

fn library_file() -> &'static str {
    if cfg!(target_os = "macos") {
        "libvramkit_capi.dylib"
    } else {
        "libvramkit_capi.so"
    }
}

fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| cc)
}

/// Compiles one C file against the header and the library; `None` (after
/// printing why) where there is no C compiler.
fn build(source: &Path, work: &Path) -> Option<PathBuf> {
    if cfg!(windows) {
        eprintln!("skipped: the C program tests run on Unix");
        return None;
    }
    let Some(cc) = compiler() else {
        eprintln!("skipped: no C compiler (set CC or install cc)");
        return None;
    };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = library_dir();
    assert!(
        lib_dir.join(library_file()).exists(),
        "{} not found in {}: cargo builds it with the tests",
        library_file(),
        lib_dir.display()
    );
    std::fs::create_dir_all(work).unwrap();
    let program = work.join(source.file_stem().unwrap());
    let compiled = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(source)
        .arg("-o")
        .arg(&program)
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lvramkit_capi")
        .output()
        .expect("run the C compiler");
    assert!(compiled.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&compiled.stderr));
    Some(program)
}

fn work_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vramkit-capi-{test}-{}", std::process::id()))
}

/// Runs `abi_test.c` (compiled into `work`) with the settings and the
/// backend the command carries, and checks everything it printed.
fn run_abi_test(mut command: Command, work: &Path) {
    let run = command
        .env("VRAMKIT_ALLOC_CONF", "max_split_size_mb:5") // refused: defaults, one line
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let _ = std::fs::remove_dir_all(work);
    assert!(run.status.success() && stdout.contains("ALL CHECKS PASSED"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("boundary errors: 7"), "{stdout}");

    // Each misuse: exactly one line naming the pointer and the mistake.
    let lines: Vec<&str> = stderr.lines().collect();
    let one = |needle: &str| {
        let hits = lines.iter().filter(|l| l.contains(needle)).count();
        assert_eq!(hits, 1, "{needle:?} on {hits} lines of stderr:\n{stderr}");
    };
    one("vramkit: vramkit_free: double free of 0x");
    one("vramkit: vramkit_free: 0x1234 was never handed out by vramkit on device 0");
    one("vramkit: vramkit_free: free of a null pointer with size 16");
    one("with size 5, but it was allocated with size 3145728; freed it anyway");
    one("on device 0, but it was allocated on device 1; freed it on device 1");
    one("vramkit: vramkit_record_stream: record_stream of 0x99: not a live block");
    one("is not a string vramkit handed out, or it was given back already");
    // The OOM: PyTorch's message, then vramkit's diagnosis.
    one("vramkit: vramkit_malloc(2147483648 bytes, device 0) returns NULL: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 1024.00 MiB");
    one("vramkit: the request needed a block of 2.00 GiB");
    one("vramkit: vramkit_set_settings: ");
    one("vramkit: vramkit_set_memory_fraction: invalid memory fraction 2");
    one("vramkit: ignoring VRAMKIT_ALLOC_CONF=\"max_split_size_mb:5\": ");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Nothing the driver refused (the fake driver prints each refusal).
    assert!(!stderr.contains("fake-cuda: refused"), "{stderr}");
}

#[test]
fn a_c_program_uses_the_library_through_the_header() {
    let work = work_dir("abi");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/abi_test.c");
    let Some(program) = build(&source, &work) else { return };
    let mut command = Command::new(&program);
    command.env("VRAMKIT_DEVICE", "sim:1GiB");
    run_abi_test(command, &work);
}

/// The same program on the CUDA backend: `CudaDevice` under the fake
/// driver of `crates/vramkit-fake-cuda`, two GPUs of 1 GiB. Every check
/// holds as on the simulated device, and at exit no device memory is left
/// (the per-device allocators live as long as the process, so their
/// contexts and pooled events do too).
#[test]
fn the_c_program_passes_on_the_cuda_backend_over_the_fake_driver() {
    let work = work_dir("abi-cuda");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/abi_test.c");
    let Some(program) = build(&source, &work) else { return };
    let driver_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vramkit-capi-fake-driver");
    let Some(driver) = vramkit_fake_cuda::FakeDriver::build(&driver_dir).unwrap_or_else(|e| panic!("{e}")) else { return };
    let mut command = driver.command(&program);
    command.env_remove("VRAMKIT_DEVICE").env("FAKE_CUDA_DEVICES", "2").env("FAKE_CUDA_TOTAL_MB", "1024");
    run_abi_test(command, &work);
    let report = driver.report().expect("the fake driver's report");
    assert_eq!(report.get("context_retains"), 2, "one allocator per device used:\n{report}");
    assert!(report.get("allocations_made") >= 3 && report.get("out_of_memory") >= 1, "{report}");
    for key in ["live_allocations", "live_mappings", "live_handles", "live_reservations", "used_bytes", "refusals"] {
        assert_eq!(report.get(key), 0, "{key} at exit:\n{report}");
    }
}

#[test]
fn without_a_driver_or_sim_malloc_returns_null_and_says_why_once() {
    if vramkit_cuda::driver_available() {
        eprintln!("skipped: a CUDA driver is present here");
        return;
    }
    let work = work_dir("nodriver");
    std::fs::create_dir_all(&work).unwrap();
    let source = work.join("no_driver.c");
    std::fs::write(
        &source,
        r#"#include "vramkit.h"
#include <stdio.h>
int main(void) {
    void *a = vramkit_malloc(1000, 0, NULL);
    void *b = vramkit_malloc(1000, 0, NULL);
    vramkit_free(a, 1000, 0, NULL);
    printf("%s\n", a == NULL && b == NULL ? "null" : "not null");
    return 0;
}
"#,
    )
    .unwrap();
    let Some(program) = build(&source, &work) else { return };
    let run = Command::new(&program).env_remove("VRAMKIT_DEVICE").output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let _ = std::fs::remove_dir_all(&work);
    assert!(run.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "null");
    let reason = stderr.lines().filter(|l| l.starts_with("vramkit: cannot use device 0: ")).count();
    assert_eq!(reason, 1, "the reason once:\n{stderr}");
    assert!(stderr.contains("VRAMKIT_DEVICE=sim"), "{stderr}");
}

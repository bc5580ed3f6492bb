//! The GPU tests of this binary, run again on the fake CUDA driver
//! (`crates/vramkit-fake-cuda`): a child process of this same test binary
//! finds the fake `libcuda.so` first on `LD_LIBRARY_PATH`, so every
//! `CudaDevice` call goes through cudarc to a driver that refuses misuse
//! and reports leaks at exit. On a machine without a GPU this is what
//! exercises the CUDA code; with a GPU the tests also run on the real one.

use std::path::Path;
use std::sync::OnceLock;
use vramkit_fake_cuda::{FakeDriver, Report};

/// Set in the child, so the tests here do not run again inside it.
const CHILD: &str = "VRAMKIT_FAKE_CUDA_CHILD";

/// Whether this process is a child running on the fake driver.
pub fn in_fake_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// The fake driver, compiled once per test binary; `None` where there is
/// no C compiler (printed).
fn driver() -> Option<&'static FakeDriver> {
    static DRIVER: OnceLock<Option<FakeDriver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vramkit-cuda-fake-driver");
            FakeDriver::build(&dir).unwrap_or_else(|error| panic!("{error}"))
        })
        .as_ref()
}

/// Runs the tests matching `filter` in a child on the fake driver with the
/// given `FAKE_CUDA_*` knobs; returns its output and the driver's report.
/// Fails the calling test if any child test failed.
fn run_child(filter: &str, knobs: &[(&str, &str)]) -> Option<(String, Report)> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let driver = driver()?;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("this test binary");
    let mut command = driver.command(exe);
    command
        .env(CHILD, "1")
        .args([filter, "--test-threads=1", "--nocapture"]);
    for (key, value) in knobs {
        command.env(key, value);
    }
    let output = command.output().expect("run the tests in a child process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "tests failed on the fake driver:\n{text}"
    );
    let report = driver.report().unwrap_or_else(|e| panic!("{e}\n{text}"));
    Some((text, report))
}

/// The driver calls that were refused, as "call: why" lines.
fn refusals(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("fake-cuda: refused "))
        .collect()
}

fn passed(text: &str) -> usize {
    let summary = text
        .lines()
        .find(|l| l.starts_with("test result: ok."))
        .expect("libtest summary");
    summary
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .expect("passed count")
}

#[test]
fn the_gpu_tests_pass_on_the_fake_driver_and_give_everything_back() {
    if in_fake_child() {
        return;
    }
    let Some((text, report)) = run_child("::", &[]) else {
        return;
    };
    // Every GPU test ran: none found "no usable GPU" or lacked VMM.
    assert!(!text.contains("no usable GPU"), "{text}");
    assert!(!text.contains("has no virtual memory management"), "{text}");
    assert!(passed(&text) >= 12, "{text}");
    // The only refusal is the one a test asks for (mapping over a mapping).
    assert_eq!(
        refusals(&text),
        vec!["cuMemMap: range overlaps a mapping"],
        "{text}"
    );
    assert!(
        report.get("allocations_made") > 0 && report.get("mappings_made") > 0,
        "{report}"
    );
    assert!(
        report.get("events_made") > 0 && report.get("out_of_memory") > 0,
        "{report}"
    );
    assert_eq!(
        report.leaks(),
        vec![],
        "left alive at exit:\n{report}\n{text}"
    );
}

#[test]
fn knobs_force_pending_events_no_vmm_and_two_devices() {
    if in_fake_child() {
        return;
    }
    for (test, knob, value) in [
        (
            "fake_only::a_block_waits_for_its_event",
            "FAKE_CUDA_EVENT_LAG",
            "1",
        ),
        (
            "fake_only::without_virtual_memory_expandable_segments_fall_back",
            "FAKE_CUDA_VMM",
            "0",
        ),
        (
            "fake_only::two_devices_are_independent",
            "FAKE_CUDA_DEVICES",
            "2",
        ),
    ] {
        let Some((text, report)) = run_child(test, &[(knob, value)]) else {
            return;
        };
        assert_eq!(passed(&text), 1, "{test} did not run:\n{text}");
        assert_eq!(refusals(&text), Vec::<&str>::new(), "{test}:\n{text}");
        assert_eq!(
            report.leaks(),
            vec![],
            "{test} left alive at exit:\n{report}\n{text}"
        );
    }
}

//! The Rust face of the process-wide state (`vramkit_capi::process`) sees
//! what the C entry points did, in the same process. Device indices 30-33
//! are this file's (the state is shared by every test in the binary).

use std::ffi::c_void;
use vramkit_capi::ffi::{vramkit_free, vramkit_malloc, vramkit_select_backend};
use vramkit_capi::{process, Backend, Error};

fn sim() {
    // SAFETY: a NUL-terminated literal.
    assert_eq!(unsafe { vramkit_select_backend(c"sim:4GiB".as_ptr()) }, 0);
}

const STREAM: *mut c_void = std::ptr::null_mut();

#[test]
fn stats_and_summary_of_what_the_c_calls_allocated() {
    sim();
    let d = 30;
    assert_eq!(process::backend(), Backend::Sim { capacity_bytes: 4 << 30 });
    assert!(process::select_backend(Backend::Cuda).is_err(), "the backend is fixed");
    assert_eq!(process::memory_stats(d).unwrap()["allocated_bytes.all.current"], 0);
    let p = vramkit_malloc(3 << 20, d, STREAM);
    assert!(!p.is_null());
    assert!(process::devices_in_use().contains(&d));
    let stats = process::memory_stats(d).unwrap();
    assert_eq!(stats["allocated_bytes.all.current"], 3 << 20);
    assert_eq!(stats["requested_bytes.all.current"], 3 << 20);
    assert!(process::memory_summary(d, false).unwrap().contains(&format!("device ID {d}")));
    vramkit_free(p, 3 << 20, d, STREAM);
    process::reset_peak_stats(d).unwrap();
    assert_eq!(process::memory_stats(d).unwrap()["allocated_bytes.all.peak"], 0);
    // (`process::empty_cache` would empty other tests' devices too; the
    // Python tests cover it in a process of their own.)
}

#[test]
fn bad_device_indices_and_settings_are_errors_not_lines() {
    sim();
    assert!(matches!(process::memory_stats(-1), Err(Error::NoDevice { device: -1, .. })));
    assert!(process::memory_summary(64, true).is_err());
    let error = process::update_settings("max_split_size_mb:10").unwrap_err();
    assert!(error.to_string().contains("max_split_size_mb"), "{error}");
    assert!(process::update_settings("no_such_key:1").is_err());
}

#[test]
fn history_shows_in_the_snapshot() {
    sim();
    let d = 32;
    process::record_history(d, true, Some(100)).unwrap();
    let p = vramkit_malloc(1000, d, STREAM);
    vramkit_free(p, 1000, d, STREAM);
    let snapshot = process::snapshot();
    let trace = snapshot["device_traces"][d as usize].as_array().unwrap();
    let actions: Vec<&str> = trace.iter().map(|e| e["action"].as_str().unwrap()).collect();
    // Taking a snapshot is itself recorded, as in PyTorch.
    assert_eq!(actions, ["segment_alloc", "alloc", "free_requested", "free_completed", "snapshot"]);
    process::record_history(d, false, None).unwrap();
    assert!(process::snapshot()["device_traces"][d as usize].as_array().unwrap().is_empty());
}

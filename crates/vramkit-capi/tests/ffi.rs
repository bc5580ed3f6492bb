//! The C entry points called in-process on the simulated backend. The
//! library's state is process-wide, so each test uses its own device index
//! and reads the misuse counter as a lower bound (tests run in parallel).

use std::ffi::{c_void, CStr};
use vramkit_capi::ffi::*;

fn sim() {
    // SAFETY: a NUL-terminated literal.
    assert_eq!(unsafe { vramkit_select_backend(c"sim:4GiB".as_ptr()) }, 0);
}

fn take_string(ptr: *mut std::ffi::c_char) -> String {
    assert!(!ptr.is_null());
    // SAFETY: a NUL-terminated string from vramkit, given back right after.
    let text = unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_owned();
    vramkit_free_string(ptr);
    text
}

fn stats(device: i32) -> serde_json::Map<String, serde_json::Value> {
    let text = take_string(vramkit_memory_stats(device));
    match serde_json::from_str(&text).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

const STREAM: *mut c_void = std::ptr::null_mut();

#[test]
fn malloc_free_and_stats_through_the_c_abi() {
    sim();
    let d = 10;
    assert!(vramkit_malloc(0, d, STREAM).is_null());
    let a = vramkit_malloc(1000, d, STREAM);
    let b = vramkit_malloc(3 << 20, d, STREAM);
    assert!(!a.is_null() && !b.is_null() && a != b);
    assert_eq!(a as usize % 512, 0);
    let s = stats(d);
    assert_eq!(s["allocation.all.current"], 2);
    assert_eq!(s["allocated_bytes.all.current"], 1024 + (3 << 20));
    assert_eq!(s["max_split_size"], -1);
    vramkit_free(a, 1000, d, STREAM);
    vramkit_free(b, 3 << 20, d, STREAM);
    assert_eq!(stats(d)["allocation.all.current"], 0);
    vramkit_empty_cache();
    assert_eq!(stats(d)["reserved_bytes.all.current"], 0);
}

#[test]
fn misuse_is_counted_and_harmless() {
    sim();
    let d = 11;
    let before = vramkit_boundary_errors();
    let a = vramkit_malloc(4096, d, STREAM);
    vramkit_free(a, 4096, d, STREAM);
    vramkit_free(a, 4096, d, STREAM); // double free
    vramkit_free(0x1234 as *mut c_void, 8, d, STREAM); // never handed out
    vramkit_free(std::ptr::null_mut(), 16, d, STREAM); // null with a size
    vramkit_free(std::ptr::null_mut(), 0, d, STREAM); // the null of a 0-byte malloc: fine
    vramkit_record_stream(0x5678 as *mut c_void, 0x2 as *mut c_void); // unknown pointer
    vramkit_free_string(0x9999 as *mut std::ffi::c_char); // not our string
    vramkit_free(0x1234 as *mut c_void, 8, 999, STREAM); // no such device
    assert!(vramkit_boundary_errors() >= before + 6);
    let s = stats(d);
    assert_eq!(s["allocation.all.current"], 0);
    assert_eq!(s["allocation.all.allocated"], 1);
}

#[test]
fn a_wrong_size_or_device_still_frees_the_block() {
    sim();
    let before = vramkit_boundary_errors();
    let a = vramkit_malloc(5000, 12, STREAM);
    vramkit_free(a, 4000, 12, STREAM);
    assert_eq!(stats(12)["allocation.all.current"], 0);
    let b = vramkit_malloc(5000, 13, STREAM);
    vramkit_free(b, 5000, 14, STREAM); // device 14 was never used
    assert_eq!(stats(13)["allocation.all.current"], 0);
    let c = vramkit_malloc(5000, 13, STREAM);
    let e = vramkit_malloc(5000, 12, STREAM);
    vramkit_free(c, 5000, 12, STREAM); // device 12 exists, c lives on 13
    assert_eq!(stats(13)["allocation.all.current"], 0);
    assert_eq!(stats(12)["allocation.all.current"], 1);
    vramkit_free(e, 5000, 12, STREAM);
    assert!(vramkit_boundary_errors() >= before + 3);
}

#[test]
fn out_of_memory_returns_null() {
    sim();
    let d = 15;
    assert!(vramkit_malloc(8 << 30, d, STREAM).is_null());
    let s = stats(d);
    assert_eq!(s["num_ooms"], 1);
    assert!(!vramkit_malloc(1 << 30, d, STREAM).is_null(), "the device still serves what fits");
}

#[test]
fn summary_snapshot_history_and_settings() {
    sim();
    let d = 16;
    assert_eq!(vramkit_record_history(d, 1, 0), 0);
    let a = vramkit_malloc(2 << 20, d, STREAM);
    vramkit_record_stream(a, 0x2 as *mut c_void);
    vramkit_free(a, 2 << 20, d, STREAM);

    let summary = take_string(vramkit_memory_summary(d, 0));
    assert!(summary.contains(&format!("PyTorch CUDA memory summary, device ID {d}")), "{summary}");
    let unused = take_string(vramkit_memory_summary(40, 1));
    assert!(unused.contains("device ID 40"), "{unused}");
    assert!(vramkit_memory_summary(-1, 0).is_null());

    let snapshot: serde_json::Value = serde_json::from_str(&take_string(vramkit_snapshot())).unwrap();
    let traces = snapshot["device_traces"].as_array().unwrap();
    assert!(traces.len() > d as usize);
    let actions: Vec<&str> =
        traces[d as usize].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(&actions[..3], ["segment_alloc", "alloc", "free_requested"], "{actions:?}");
    assert!(snapshot["segments"].as_array().unwrap().iter().any(|s| s["device"] == d));
    assert!(snapshot["allocator_settings"]["roundup_power2_divisions"].is_object());

    // SAFETY: NUL-terminated literals; NULL is allowed.
    unsafe {
        assert_eq!(vramkit_set_settings(c"max_split_size_mb:10".as_ptr()), -1);
        assert_eq!(vramkit_set_settings(std::ptr::null()), -1);
        assert_eq!(vramkit_set_settings(c"roundup_power2_divisions:4".as_ptr()), 0);
        assert_eq!(vramkit_select_backend(c"cuda".as_ptr()), -1, "the backend is fixed at first use");
        assert_eq!(vramkit_select_backend(c"gpu".as_ptr()), -1);
    }
    vramkit_set_memory_fraction(0.5, d);
    vramkit_set_memory_fraction(7.0, d); // refused, printed
    vramkit_reset_peak_stats(d);
    vramkit_reset_accumulated_stats(d);
    assert_eq!(stats(d)["allocation.all.allocated"], 0);
    // SAFETY: a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(vramkit_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

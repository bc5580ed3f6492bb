//! The runtime library alone, driven from Python's ctypes: one device
//! behind the runtime, driver and NVML names, with the preset's properties.

use crate::support::{number, preset, run, scripts, stack};

#[test]
fn runtime_driver_and_nvml_are_one_device_with_the_presets_properties() {
    for (major, card) in [(12, "l4"), (13, "h100"), (13, "t4")] {
        let Some(stack) = stack(major) else { return };
        let preset = preset(card);
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let mut command = stack.command(&python, &preset);
        command.arg(scripts().join("runtime_probe.py")).arg(major.to_string());
        let report = run(&mut command).report();
        let context = format!("CUDA {major}, {card}: {report}");
        assert_eq!(report["one_library"], true, "{context}");
        assert_eq!(report["primary_context_is_current"], true, "{context}");
        // cudaMalloc granularity is 2 MiB: 64 MiB is taken as it is.
        assert_eq!(number(&report, "used_after_cuMemAlloc"), 64 << 20, "{context}");
        assert_eq!(number(&report, "pointer_type"), 2, "cudaMemoryTypeDevice: {context}");
        assert_eq!(report["read_back"], "00".repeat(16), "a device read gives zeros: {context}");
        assert_eq!(number(&report, "used_after_cuMemFree"), 0, "{context}");
        assert_eq!(number(&report, "used_while_mapped"), 2 << 20, "{context}");
        assert_eq!(number(&report, "total_bytes"), preset.total_bytes, "{context}");
        assert_eq!(number(&report, "oversized_cuMemAlloc"), 2, "CUDA_ERROR_OUT_OF_MEMORY: {context}");
        assert_eq!(number(&report, "sm_count"), u64::from(preset.sm_count), "{context}");
        assert_eq!(number(&report, "cc_major"), u64::from(preset.compute_capability.0), "{context}");
        assert_eq!(number(&report, "cc_minor"), u64::from(preset.compute_capability.1), "{context}");
        assert_eq!(number(&report, "l2_bytes"), u64::from(preset.l2_bytes), "{context}");
        assert_eq!(number(&report, "threads_per_sm"), u64::from(preset.max_threads_per_sm), "{context}");
        assert_eq!(number(&report, "bus_width"), u64::from(preset.memory_bus_width_bits), "{context}");
        assert_eq!(report["name"], preset.device_name.as_ref(), "{context}");
        assert_eq!(report["nvml_name"], preset.device_name.as_ref(), "{context}");
    }
}

#[test]
fn misuse_still_aborts_with_cudarts_message() {
    let Some(stack) = stack(13) else { return };
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let mut command = stack.command(&python, &preset("a100-80gb"));
    command.args(["-c", "import ctypes; ctypes.CDLL('libcuda.so').cuMemFree_v2(ctypes.c_ulonglong(0x1234000))"]);
    let out = run(&mut command);
    assert!(!out.success, "freeing an address never handed out must abort");
    assert!(out.stderr.contains("fakecudart: misuse: cudaFree of an address cudaMalloc did not return"), "{}", out.tail());
}

//! What `vramkit run` prints for small programs on torch's newest release: the fit line with the
//! headroom, PyTorch's own message and the program's line when it runs out, the best settings
//! checked by a second run, --reserve, --json and -o, --batch values reaching the program, a
//! failing program, the user's own sitecustomize, and the CUDA 12 stack for an older torch.

use super::support::{line_of, newest, number, program, python, scratch, vramkit_run};
use std::ffi::OsStr;
use std::path::Path;

/// `python grow.py <args>`: holds that many 1 GiB tensors.
fn grow<'a>(python: &'a Path, grow: &'a Path, args: &'a [&'a str]) -> Vec<&'a OsStr> {
    let mut command = vec![python.as_os_str(), grow.as_os_str()];
    command.extend(args.iter().map(OsStr::new));
    command
}

#[test]
fn a_run_that_fits_shows_the_doctor_the_headroom_and_the_default_gpu() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    let ran = vramkit_run(&[], &grow(&python, &script, &["--gib", "2"]), &[]);
    ran.expect(0)
        .says("  GPU: NVIDIA A100-SXM4-80GB, 79.26 GiB (simulated; the default GPU: choose another with --gpu)\n")
        .says("  torch 2.15.0+cu132, settings: PyTorch's defaults\n")
        .says("What `vramkit doctor` finds in the snapshot:\nDevice 0: PyTorch holds 2.00 GiB of GPU memory (reserved); tensors use 2.00 GiB of it (100.0%).")
        .says("On the NVIDIA A100-SXM4-80GB: 79.26 GiB usable (the card's 79.26 GiB, nothing reserved outside PyTorch):\n")
        .says("  It fits: peak reserved 2.00 GiB (peak allocated 2.00 GiB), with 77.26 GiB of headroom (97.5% of usable memory).\n")
        .says("  Best PYTORCH_CUDA_ALLOC_CONF for this GPU: your settings (PyTorch's defaults); no setting tried does better.\n")
        .says("What the simulation cannot know: kernels do not run, so tensors hold zeros");
    assert!(ran.stdout.starts_with("holding 2 GiB\nvramkit run: "), "the program's output comes first: {}", ran.stdout);
}

#[test]
fn running_out_shows_pytorchs_message_and_the_programs_line() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    let line = line_of(&script, "held = [");
    let ran = vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &["--gib", "20"]), &[]);
    ran.expect(1)
        .says("  It ran out of memory (peak reserved 14.00 GiB): CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 14.76 GiB of which 773.75 MiB is free.")
        .says(&format!("  Where: {}:{line} in ", script.display()))
        .says(": held = [torch.empty(1 << 30, dtype=torch.uint8, device=\"cuda\") for _ in range(args.gib)]\n")
        .says("Out of memory at trace entry");
}

#[test]
fn reserved_memory_is_taken_off_the_card() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &["--gib", "5"]), &[]).expect(0);
    vramkit_run(&["--gpu", "t4", "--reserve", "10GiB"], &grow(&python, &script, &["--gib", "5"]), &[])
        .expect(1)
        .says("On the Tesla T4: 4.76 GiB usable (the card's 14.76 GiB, less 10.00 GiB reserved outside PyTorch):\n")
        .says("  It ran out of memory (peak reserved 4.00 GiB): CUDA out of memory.");
}

#[test]
fn the_best_setting_for_a_fragmented_cache_is_checked_by_running_again() {
    let Some(python) = newest() else { return };
    let script = program("fragment.py");
    let ran = vramkit_run(&["--gpu", "1.5GiB"], &[python.as_os_str(), script.as_os_str()], &[]);
    ran.expect(1)
        .says(&format!("  Where: {}:{} in <module>: wide = torch.empty(", script.display(), line_of(&script, "wide = ")))
        .says("  Best PYTORCH_CUDA_ALLOC_CONF for this GPU: \"expandable_segments:True\" (replayed: peak reserved 1.07 GiB, ")
        .says("  Checked by running the program again with it: it fits: peak reserved 1.07 GiB (peak allocated 1.07 GiB), with 436.00 MiB of headroom");
    let ran = vramkit_run(&["--gpu", "1.5GiB", "--conf", "expandable_segments:True"], &[python.as_os_str(), script.as_os_str()], &[]);
    ran.expect(0).says("  torch 2.15.0+cu132, settings: PYTORCH_CUDA_ALLOC_CONF=\"expandable_segments:True\"\n");
}

#[test]
fn json_goes_alone_to_stdout_and_the_snapshot_is_kept() {
    let Some(python) = newest() else { return };
    let dir = scratch("json");
    let snapshot = dir.join("snap.pickle");
    let script = program("grow.py");
    let ran = vramkit_run(&["--json", "--gpu", "l4", "-o", snapshot.to_str().unwrap()], &grow(&python, &script, &["--gib", "3"]), &[]);
    let v = ran.expect(0).json();
    assert!(ran.stderr.contains("holding 3 GiB"), "the program's stdout goes to stderr: {}", ran.stderr);
    assert_eq!((v["fits"].as_bool(), v["gpu"]["key"].as_str(), v["gpu"]["default"].as_bool()), (Some(true), Some("l4"), Some(false)));
    assert_eq!(number(&v["runs"][0]["peak_reserved_bytes"]), 3 << 30);
    assert_eq!(number(&v["headroom_bytes"]), number(&v["gpu"]["usable_bytes"]) - (3 << 30));
    assert_eq!(v["diagnosis"]["allocation_events"], 3);
    assert_eq!(v["snapshot"].as_str(), snapshot.to_str());
    let kept = vramkit_trace::read_snapshot(&snapshot).unwrap_or_else(|e| panic!("{e}"));
    let allocs = kept.snapshot.device_traces.iter().flatten().filter(|e| e.action == vramkit_core::TraceAction::Alloc).count();
    assert_eq!(allocs, 3);
}

#[test]
fn batch_values_reach_the_program_in_its_arguments_and_environment() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    // {N} in the arguments: 14 GiB fit on a T4, 15 do not.
    let ran = vramkit_run(&["--json", "--gpu", "t4", "--batch", "N=1..32", "--max-candidates", "1"], &grow(&python, &script, &["--gib", "{N}"]), &[]);
    let v = ran.expect(0).json();
    assert_eq!((v["batch"]["largest_fit"].as_u64(), v["batch"]["smallest_oom"].as_u64()), (Some(14), Some(15)), "{v}");
    // The environment variable GIB, over a list: the largest listed value that fits.
    let ran = vramkit_run(&["--gpu", "t4", "--batch", "GIB=2,4,8,16", "--max-candidates", "1"], &grow(&python, &script, &[]), &[]);
    ran.expect(0)
        .says("  note: {GIB} does not appear in the command: the program must read the environment variable GIB\n")
        .says("  With your settings (PyTorch's defaults): GIB=8 fits, with 6.76 GiB of headroom (45.8% of usable memory); GIB=16 runs out of memory.\n")
        .says("What `vramkit doctor` finds in the snapshot of GIB=8:\n")
        .says("  It ran out of memory at GIB=16 (peak reserved 14.00 GiB): CUDA out of memory.");
}

#[test]
fn a_program_that_fails_otherwise_is_not_called_out_of_memory() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &["--exit", "3"]), &[])
        .expect(1)
        .says("  The program failed: the program exited with status 3, not from an out-of-memory error.\n");
    let ran = vramkit_run(&["--gpu", "t4", "--batch", "GIB=1..4"], &grow(&python, &script, &["--exit", "3"]), &[]);
    ran.expect(1).says("  The search stopped: at GIB=1 the program exited with status 3, not from an out-of-memory error.\n");
    assert!(ran.stderr.contains("the end of its output:\nholding 1 GiB"), "{}", ran.stderr);
}

#[test]
fn a_crash_after_the_program_finished_does_not_fail_the_run() {
    let Some(python) = newest() else { return };
    let script = program("grow.py");
    let teardown = "after its code had finished (Python was exiting): the run is counted as complete\n";
    vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &["--abort-at-exit"]), &[])
        .expect(0)
        .says("  note: the program was killed by signal 6 (SIGABRT) ")
        .says(teardown)
        .says("  It fits: peak reserved 1024.00 MiB");
    let ran = vramkit_run(&["--json", "--gpu", "t4", "--batch", "GIB=13..15"], &grow(&python, &script, &["--abort-at-exit"]), &[]);
    let v = ran.expect(0).json();
    assert_eq!(v["batch"]["largest_fit"], 14, "{v}");
    assert!(v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("at 13, the program was killed by signal 6")), "{v}");
    // Killed before its end, it failed.
    let dir = scratch("abort-in-program");
    let script = dir.join("abort.py");
    std::fs::write(&script, "import os\nimport torch\nx = torch.empty(1 << 30, device='cuda')\nos.abort()\n").unwrap();
    vramkit_run(&["--gpu", "t4"], &[python.as_os_str(), script.as_os_str()], &[])
        .expect(1)
        .says("  The program failed: the program was killed by signal 6 (SIGABRT), not from an out-of-memory error.\n");
}

#[test]
fn the_users_own_sitecustomize_still_runs() {
    let Some(python) = newest() else { return };
    let dir = scratch("sitecustomize");
    let marker = dir.join("ran");
    std::fs::write(dir.join("sitecustomize.py"), format!("open({:?}, 'w').write('yes')\n", marker.to_str().unwrap())).unwrap();
    let script = program("grow.py");
    vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &[]), &[("PYTHONPATH", dir.as_os_str())]).expect(0).says("  It fits: ");
    assert_eq!(std::fs::read_to_string(&marker).ok().as_deref(), Some("yes"));
}

#[test]
fn a_cuda_12_torch_runs_on_the_cuda_12_stack() {
    let Some(python) = python("2.10.0") else { return };
    let script = program("grow.py");
    vramkit_run(&["--gpu", "t4"], &grow(&python, &script, &["--gib", "4"]), &[])
        .expect(0)
        .says("  torch 2.10.0+cu128, settings: PyTorch's defaults\n")
        .says("  It fits: peak reserved 4.00 GiB");
}

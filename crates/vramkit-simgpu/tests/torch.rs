//! Real torch wheels on the stack: what torch sees of the card, the stubs
//! winning over NVIDIA libraries a user has installed, and a pluggable
//! allocator that allocates through the driver API, as vramkit's does.

use crate::support::{number, preset, python, releases, run, scratch, scripts, simulated};
use std::path::Path;
use std::process::Command;
use vramkit_simgpu::{Stack, TorchEnv};

const DESCRIBE: &str = "import json, torch\n\
p = torch.cuda.get_device_properties(0)\n\
print(json.dumps({'available': torch.cuda.is_available(), 'name': torch.cuda.get_device_name(0), \
'total_memory': p.total_memory, 'capability': list(torch.cuda.get_device_capability(0)), \
'sm_count': p.multi_processor_count, 'mem_get_info_total': torch.cuda.mem_get_info()[1], \
'cudnn': torch.backends.cudnn.is_available() and torch.backends.cudnn.version(), 'cuda': torch.version.cuda}))";

#[test]
fn torch_sees_the_card_of_the_preset() {
    for release in releases() {
        let Some((stack, env)) = simulated(release) else { return };
        for card in ["rtx4090", "h200", "24GiB"] {
            let preset = preset(card);
            let mut command = python(&stack, &env, &preset);
            command.args(["-c", DESCRIBE]);
            let report = run(&mut command).report();
            let context = format!("{release} on {card}: {report}");
            assert_eq!(report["available"], true, "{context}");
            assert_eq!(report["name"], preset.device_name.as_ref(), "{context}");
            assert_eq!(number(&report, "total_memory"), preset.total_bytes, "{context}");
            assert_eq!(number(&report, "mem_get_info_total"), preset.total_bytes, "{context}");
            let (major, minor) = preset.compute_capability;
            assert_eq!(report["capability"], serde_json::json!([major, minor]), "{context}");
            assert_eq!(number(&report, "sm_count"), u64::from(preset.sm_count), "{context}");
            let pinned: u64 = env.library_env().iter().find(|(k, _)| *k == "FAKECUDA_CUDNN_VERSION").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
            assert!(pinned >= 90000, "{release} pins a cuDNN 9");
            assert_eq!(number(&report, "cudnn"), pinned, "torch reports the cuDNN its wheel pins: {context}");
            assert!(report["cuda"].as_str().is_some_and(|v| v.starts_with(&stack.cuda_major().to_string())), "{context}");
        }
    }
}

/// Installs poisoned NVIDIA libraries where torch looks for the real ones
/// (its RPATH, `$ORIGIN/../../nvidia/<x>/lib`, and the `nvidia/` packages
/// `torch/__init__.py` preloads) beside a copy of the environment's torch
/// made of links. `torch/lib` is a real directory, so `$ORIGIN/../..` is the
/// overlay and not where the links point.
fn poisoned_overlay(env: &TorchEnv, stack: &Stack) -> std::path::PathBuf {
    let overlay = scratch(&format!("overlay-{}", env.release().version));
    let site = run(Command::new(env.python()).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]));
    let torch = Path::new(site.stdout.trim()).join("torch");
    link_tree(&torch, &overlay.join("torch"), &["lib"]);
    let major = stack.cuda_major();
    let (dir, cublas) = if major >= 13 { ("nvidia/cu13/lib", "libcublas.so.13") } else { ("nvidia/cublas/lib", "libcublas.so.12") };
    let lib = overlay.join(dir);
    std::fs::create_dir_all(&lib).unwrap_or_else(|e| panic!("{e}"));
    let source = overlay.join("poison.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <stdlib.h>\n\
         int cublasCreate_v2(void **h) { fputs(\"REAL NVIDIA LIBRARY CALLED\\n\", stderr); abort(); }\n\
         int cublasSetStream_v2(void *h, void *s) { fputs(\"REAL NVIDIA LIBRARY CALLED\\n\", stderr); abort(); }\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let script = overlay.join("poison.map");
    std::fs::write(&script, format!("{cublas} {{ global: *; }};\n")).unwrap_or_else(|e| panic!("{e}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = run(Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(lib.join(cublas))
        .arg(&source)
        .arg(format!("-Wl,-soname,{cublas}"))
        .arg(format!("-Wl,--version-script={}", script.display())));
    assert!(built.success, "{}", built.tail());
    overlay
}

/// `to` as a directory of links to what `from` holds, the entries named in
/// `real` made real directories of links in turn.
fn link_tree(from: &Path, to: &Path, real: &[&str]) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{e}"));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())).flatten() {
        let name = entry.file_name();
        if real.iter().any(|r| name == *r) {
            link_tree(&entry.path(), &to.join(&name), &[]);
        } else {
            std::os::unix::fs::symlink(entry.path(), to.join(&name)).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn the_stubs_win_over_nvidia_libraries_a_user_has_installed() {
    let matmul = "import torch; x = torch.randn(64, 64, device='cuda'); print('matmul', (x @ x).shape)";
    for release in releases() {
        let Some((stack, env)) = simulated(release) else { return };
        let overlay = poisoned_overlay(&env, &stack);
        let mut preloaded = python(&stack, &env, &preset("a100-80gb"));
        preloaded.env("PYTHONPATH", &overlay).args(["-c", matmul]);
        let out = run(&mut preloaded);
        assert!(out.success && out.stdout.contains("matmul torch.Size([64, 64])"), "{release}: {}", out.tail());
        assert!(!out.stderr.contains("REAL NVIDIA"), "{release}: {}", out.tail());
        // The same with the stack on LD_LIBRARY_PATH only: torch's RPATH
        // finds the installed library first. This is why the stack is
        // preloaded.
        let mut path_only = python(&stack, &env, &preset("a100-80gb"));
        path_only.env_remove("LD_PRELOAD").env("PYTHONPATH", &overlay).args(["-c", matmul]);
        let out = run(&mut path_only);
        assert!(!out.success, "{release}: the poisoned library was expected to win without LD_PRELOAD:\n{}", out.tail());
        assert!(out.stderr.contains("REAL NVIDIA") || out.stderr.contains("libcublas"), "{release}: {}", out.tail());
    }
}

#[test]
fn a_pluggable_allocator_allocating_through_the_driver_trains() {
    for release in releases() {
        let Some((stack, env)) = simulated(release) else { return };
        let dir = scratch(&format!("pluggable-{}", release.version));
        let library = dir.join("libdriver_allocator.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/driver_allocator.c");
        let built = run(Command::new(cc).args(["-shared", "-fPIC", "-O1", "-o"]).arg(&library).arg(&source).arg("-ldl"));
        assert!(built.success, "{}", built.tail());
        let mut command = python(&stack, &env, &preset("a100-80gb"));
        command.arg(scripts().join("pluggable.py")).arg(&library);
        let report = run(&mut command).report();
        assert!(number(&report, "allocations") >= 6, "{release}: every tensor through the driver: {report}");
        assert_eq!(report["weight_sum_after_copy_back"], 0.0, "{release}: device reads give zeros: {report}");
    }
}

#[test]
fn recurrent_networks_lay_their_weights_out_in_cudnns_buffer() {
    for release in releases() {
        let Some((stack, env)) = simulated(release) else { return };
        let mut command = python(&stack, &env, &preset("l4"));
        command.arg(scripts().join("rnns.py"));
        let report = run(&mut command).report();
        assert_eq!(report["cudnn"], true, "{release}: {report}");
        for (name, outcome) in report.as_object().into_iter().flatten().filter(|(k, _)| *k != "cudnn") {
            assert_eq!(outcome, "ok", "{release}: {name}");
        }
    }
}

//! A stack as the Python wheel ships it (its plain files: a wheel holds no
//! links) and installed again on the user's machine, where the runtime's
//! other names must be links once more for runtime, driver and NVML to be
//! one device.

use crate::support::{preset, run, scratch, scripts, stack};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use vramkit_simgpu::{Stack, RUNTIME_ALIASES};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{e}")).file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_shipped_stack_installs_as_one_device_again_and_once() {
    for major in [12, 13] {
        let Some(stack) = stack(major) else { return };
        let dir = scratch(&format!("shipped-{major}"));
        let shipped = dir.join("shipped");
        stack.ship(&shipped).unwrap_or_else(|e| panic!("{e}"));
        let files: Vec<String> = stack.preload().iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
        assert_eq!(names(&shipped.join("lib")), files, "CUDA {major}: the libraries, no links");
        assert!(files.contains(&format!("libcudart.so.{major}")) && files.len() > 10, "{files:?}");
        assert!(std::fs::read_dir(shipped.join("lib")).into_iter().flatten().flatten().all(|e| e.file_type().is_ok_and(|t| t.is_file())));

        let installed = Stack::install(&shipped, &dir.join("installed")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(installed.cuda_major(), major);
        for alias in RUNTIME_ALIASES {
            let link = std::fs::read_link(installed.lib_dir().join(alias)).unwrap_or_else(|e| panic!("{alias}: {e}"));
            assert_eq!(link, Path::new(&format!("libcudart.so.{major}")), "CUDA {major}: {alias}");
        }
        assert_eq!(installed.preload().len(), files.len(), "the links are not preloaded");

        // Runtime, driver and NVML opened by their names are one library.
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let mut probe = installed.command(&python, &preset("l4"));
        probe.arg(scripts().join("runtime_probe.py")).arg(major.to_string());
        assert_eq!(run(&mut probe).report()["one_library"], true, "CUDA {major}");

        // Installing again keeps the copy a running program may have preloaded.
        let runtime = installed.lib_dir().join(format!("libcudart.so.{major}"));
        let inode = std::fs::metadata(&runtime).map(|m| m.ino()).unwrap_or_else(|e| panic!("{e}"));
        let again = Stack::install(&shipped, &dir.join("installed")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, installed);
        assert_eq!(std::fs::metadata(&runtime).map(|m| m.ino()).ok(), Some(inode));

        let missing = Stack::install(&dir.join("nothing"), &dir.join("other")).unwrap_err();
        assert!(missing.contains("nothing") && missing.contains("reinstall vramkit"), "{missing}");
    }
}

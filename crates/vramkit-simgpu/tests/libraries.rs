//! What the build produced, read back with binutils: every library torch
//! links, under its soname, exporting every symbol torch imports from it
//! under the right version node; the runtime answering for the driver.

use crate::support::{run, stack};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use vramkit_simgpu::{libraries, RUNTIME_ALIASES};

/// Symbol name -> version node (empty when unversioned) of `library`'s
/// default-version dynamic exports; `None` when binutils are missing.
fn exports(library: &Path) -> Option<Vec<(String, String)>> {
    let out = run(Command::new("nm").args(["-D", "--defined-only", "--with-symbol-versions"]).arg(library));
    if !out.success && out.stderr.contains("No such file") {
        panic!("{} was not built", library.display());
    }
    if !out.success {
        eprintln!("skipped: `nm` cannot read {}: {}", library.display(), out.stderr.trim());
        return None;
    }
    Some(
        out.stdout
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .map(|s| match s.split_once("@@") {
                Some((name, node)) => (name.to_string(), node.to_string()),
                None => (s.split('@').next().unwrap_or(s).to_string(), String::new()),
            })
            .collect(),
    )
}

fn soname(library: &Path) -> String {
    let out = run(Command::new("readelf").arg("-d").arg(library));
    out.stdout
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| l.split('[').nth(1))
        .map(|s| s.trim_end_matches(']').to_string())
        .unwrap_or_default()
}

#[test]
fn every_library_torch_links_is_built_with_its_soname_version_node_and_symbols() {
    for major in [12, 13] {
        let Some(stack) = stack(major) else { return };
        for library in libraries(major).unwrap_or_else(|e| panic!("{e}")) {
            let path = stack.lib_dir().join(&library.soname);
            let Some(exported) = exports(&path) else { return };
            let runtime = format!("libcudart.so.{major}");
            let expected_soname = if library.is_runtime() { runtime.as_str() } else { library.soname.as_str() };
            assert_eq!(soname(&path), expected_soname, "{}", path.display());
            let exported: BTreeSet<(String, String)> = exported.into_iter().collect();
            let node = if library.is_runtime() { runtime.clone() } else { library.version_node.clone().unwrap_or_default() };
            let missing: Vec<&String> =
                library.symbols.iter().filter(|s| !exported.contains(&((*s).clone(), node.clone()))).collect();
            assert!(missing.is_empty(), "{} lacks (with version node {node:?}): {missing:?}", path.display());
        }
        for alias in RUNTIME_ALIASES {
            let target = std::fs::read_link(stack.lib_dir().join(alias)).unwrap_or_else(|e| panic!("{alias}: {e}"));
            assert_eq!(target, Path::new(&format!("libcudart.so.{major}")), "{alias}");
        }
        assert!(stack.preload().iter().all(|p| !RUNTIME_ALIASES.iter().any(|a| p.ends_with(a))), "aliases are not preloaded");
    }
}

/// The driver functions the project's fake driver implements are the ones
/// vramkit-cuda calls through cudarc; the runtime must export each.
#[test]
fn the_runtime_exports_every_driver_call_vramkits_allocator_makes() {
    let fake_driver = include_str!("../../vramkit-fake-cuda/libcuda.c");
    let wanted: BTreeSet<&str> = fake_driver
        .lines()
        .filter_map(|l| l.strip_prefix("CUresult "))
        .filter_map(|l| l.split('(').next())
        .map(str::trim)
        .filter(|name| name.starts_with("cu"))
        .collect();
    assert!(wanted.len() > 20 && wanted.contains("cuMemAlloc_v2"), "parsed {wanted:?}");
    for major in [12, 13] {
        let Some(stack) = stack(major) else { return };
        let Some(exported) = exports(&stack.lib_dir().join("libcuda.so.1")) else { return };
        let names: BTreeSet<&str> = exported.iter().map(|(n, _)| n.as_str()).collect();
        let missing: Vec<&&str> = wanted.iter().filter(|w| !names.contains(**w)).collect();
        assert!(missing.is_empty(), "CUDA {major}: the runtime lacks driver calls {missing:?}");
    }
}

#[test]
fn a_stack_is_reused_when_its_inputs_did_not_change() {
    let Some(stack) = stack(13) else { return };
    let runtime = stack.lib_dir().join("libcudart.so.13");
    let before = std::fs::metadata(&runtime).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
    let again = vramkit_simgpu::Stack::cached(13).unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|| panic!("built once"));
    assert_eq!(again, stack);
    let after = std::fs::metadata(&runtime).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(before, after, "rebuilt although nothing changed");
    assert_eq!(vramkit_simgpu::Stack::open(stack.dir()), Ok(stack.clone()));
    let empty = crate::support::scratch("empty-stack");
    assert!(vramkit_simgpu::Stack::open(&empty).unwrap_err().contains("build it first"));
}

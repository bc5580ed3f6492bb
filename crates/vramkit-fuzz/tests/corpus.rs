//! Every seed and every regression input through its target, as CI runs
//! them where cargo-fuzz is not installed; and the small real traces
//! through the snapshot targets (they seed those corpora too).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use vramkit_fuzz::targets::{self, Target, TARGETS};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

/// Runs `target` on each file; panics naming every file that failed.
fn replay(target: Target, files: &[PathBuf]) {
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = std::fs::read(path).expect("readable");
            catch_unwind(AssertUnwindSafe(|| target(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failed.is_empty(), "inputs that fail their target:\n{}", failed.join("\n"));
}

#[test]
fn every_target_has_seeds_and_they_pass() {
    for (name, target) in TARGETS {
        let seeds = files_in(&repo().join("fuzz/seeds").join(name));
        assert!(!seeds.is_empty(), "no seeds for {name}");
        replay(target, &seeds);
    }
}

#[test]
fn every_regression_input_passes() {
    let dir = repo().join("fuzz/regressions");
    let mut count = 0;
    for entry in files_in(&dir).into_iter().chain(std::fs::read_dir(&dir).into_iter().flatten().map(|e| e.unwrap().path())) {
        if !entry.is_dir() {
            continue;
        }
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        let target = targets::by_name(&name).unwrap_or_else(|| panic!("fuzz/regressions/{name} names no target"));
        let files = files_in(&entry);
        count += files.len();
        replay(target, &files);
    }
    eprintln!("{count} regression inputs replayed");
}

#[test]
fn small_real_traces_pass_the_snapshot_targets() {
    let files: Vec<PathBuf> = files_in(&repo().join("data/traces/pytorch_snapshots"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "pickle"))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() < 128 << 10))
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    replay(targets::snapshot, &files);
    replay(targets::pickle, &files);
}

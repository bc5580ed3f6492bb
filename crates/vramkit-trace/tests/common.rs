//! Paths to the real traces shipped in `data/traces/`.

use std::path::PathBuf;

/// `data/traces/` at the repository root.
pub fn traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces")
}

/// Every real pickle, sorted by name.
pub fn snapshot_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(traces_dir().join("pytorch_snapshots"))
        .expect("data/traces/pytorch_snapshots exists")
        .map(|entry| entry.expect("readable dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "pickle"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "expected the 9 real snapshots, found {}", files.len());
    files
}

/// `EXPECTED.json`, computed independently with CPython.
pub fn expected() -> serde_json::Value {
    let text = std::fs::read_to_string(traces_dir().join("EXPECTED.json")).expect("EXPECTED.json");
    serde_json::from_str(&text).expect("EXPECTED.json parses")
}

/// A fresh temporary path (the test process id and a tag keep them apart).
pub fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vramkit-trace-{}-{tag}", std::process::id()))
}

/// The bytes of a small real snapshot with segments and a trace.
pub fn small_snapshot() -> Vec<u8> {
    std::fs::read(traces_dir().join("pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle")).expect("readable")
}

/// `python3`, if this machine has it (else the test says it skips).
pub fn python3() -> Option<&'static str> {
    let ok = std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: python3 is not available");
    }
    ok.then_some("python3")
}

//! No input makes a reader panic: truncated real files, corrupted real
//! files, and random bytes all end in `Ok` or a clean error.

use crate::common::{snapshot_files, traces_dir};
use proptest::prelude::*;
use vramkit_trace::pickle::read::read_value;
use vramkit_trace::read_snapshot_bytes;

#[test]
fn every_truncation_of_a_real_file_is_a_clean_error() {
    for path in snapshot_files() {
        let bytes = std::fs::read(&path).expect("readable");
        // Every offset in the first 2 KiB of every file (cheap: parsing
        // stops at the cut), and ~150 offsets spread over the small files.
        let spread = if bytes.len() < 100_000 { (bytes.len() / 150).max(1) } else { bytes.len() };
        let offsets = (0..bytes.len().min(2048)).chain((2048..bytes.len()).step_by(spread));
        for cut in offsets {
            let result = read_snapshot_bytes(&bytes[..cut]);
            assert!(result.is_err(), "{}: a prefix of {cut} bytes read as a whole snapshot", path.display());
        }
        // The last bytes, where a cut drops only STOP or the final items.
        for cut in bytes.len().saturating_sub(16)..bytes.len() {
            assert!(read_snapshot_bytes(&bytes[..cut]).is_err(), "{}: prefix of {cut} bytes", path.display());
        }
    }
}

#[test]
fn truncated_json_is_a_clean_error() {
    let text = std::fs::read(traces_dir().join("json/cs336_silmont2000__mem_snapshot.json")).expect("readable");
    for cut in (0..text.len() - 1).step_by(997) {
        let trimmed = &text[..cut];
        // A cut that happens to end a JSON value is fine; nothing may panic.
        let _ = read_snapshot_bytes(trimmed);
    }
}

fn small_real_file() -> Vec<u8> {
    std::fs::read(traces_dir().join("pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle")).expect("readable")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut data = vec![0x80, 4];
        data.extend_from_slice(&body);
        let _ = read_value(&data);
        let _ = read_snapshot_bytes(&data);
        let _ = read_snapshot_bytes(&body);
    }

    #[test]
    fn random_opcode_soup_never_panics(ops in proptest::collection::vec(
        prop_oneof![
            Just(b'('), Just(b'.'), Just(b'}'), Just(b']'), Just(b')'), Just(b'a'), Just(b'e'), Just(b's'), Just(b'u'),
            Just(b'd'), Just(b'l'), Just(b't'), Just(0x85u8), Just(0x86), Just(0x87), Just(b'N'), Just(0x88),
            Just(0x89), Just(0x94), Just(b'0'), Just(b'1'), Just(b'2'), any::<u8>(),
        ],
        0..300,
    )) {
        let mut data = vec![0x80, 4];
        data.extend_from_slice(&ops);
        data.push(b'.');
        let _ = read_value(&data);
        let _ = read_snapshot_bytes(&data);
    }

    #[test]
    fn corrupted_real_files_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut data = small_real_file();
        for (index, byte) in &edits {
            let at = index.index(data.len());
            data[at] = *byte;
        }
        let _ = read_snapshot_bytes(&data);
    }
}

#[test]
fn corrupting_bytes_near_the_start_never_panics() {
    let original = small_real_file();
    let mut data = original.clone();
    for at in (0..original.len().min(1500)).step_by(7) {
        for byte in [0x00, 0xff, b'e'] {
            data[at] = byte;
            let _ = read_snapshot_bytes(&data);
        }
        data[at] = original[at];
    }
}

#[test]
fn retargeted_memo_references_never_panic() {
    // Point BINGETs (0x68 + index) at other memoized objects, so objects
    // appear in roles they were not made for (a frame where a frames list
    // belongs, a key string where a dict belongs, ...).
    let original = small_real_file();
    let positions: Vec<usize> =
        original.windows(2).enumerate().filter(|(_, w)| w[0] == b'h').map(|(i, _)| i + 1).collect();
    let step = (positions.len() / 200).max(1);
    let mut data = original.clone();
    for &at in positions.iter().step_by(step) {
        for delta in [1u8, 7, 100] {
            data[at] = original[at].wrapping_add(delta);
            let _ = read_snapshot_bytes(&data);
        }
        data[at] = original[at];
    }
}

#[test]
fn corrupting_entries_read_on_the_straight_path_never_panics() {
    // Entries after the first have memoized keys, actions and stacks, so
    // they take the columns' straight path: corrupt every byte of some.
    use std::sync::Arc;
    use vramkit_core::snapshot::{Frame, Snapshot, TraceAction, TraceEntry};
    let stack: vramkit_core::snapshot::Frames = Arc::from(vec![Frame { filename: "m.py".into(), line: 3, name: "f".into() }]);
    let trace: Vec<TraceEntry> = (0..200u64)
        .map(|i| {
            let mut e = TraceEntry::new(TraceAction::ALL[(i % 10) as usize], (1 << 40) + i * 512, i << (i % 40), i % 3);
            e.time_us = (i % 7 != 0).then_some(i * 1000);
            e.frames = (i % 2 == 0).then(|| stack.clone());
            e
        })
        .collect();
    let file = vramkit_trace::SnapshotFile::from_snapshot(Snapshot { segments: Vec::new(), device_traces: vec![trace] });
    let mut original = Vec::new();
    vramkit_trace::write_pickle(&file, &mut original).expect("writes");
    let middle = original.len() / 2;
    let mut data = original.clone();
    for at in middle..(middle + 1200).min(original.len()) {
        for byte in [0x00, 0xff, b'h', b'j', b'K', b'J', 0x8a, b'u', b'}', b'(', 0x95] {
            data[at] = byte;
            let _ = read_snapshot_bytes(&data);
        }
        data[at] = original[at];
    }
}

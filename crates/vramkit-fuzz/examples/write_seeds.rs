//! Writes the seed corpora under `fuzz/seeds/<target>/` (checked in; run
//! this again only to regenerate them):
//!
//! ```text
//! cargo run -p vramkit-fuzz --example write_seeds
//! ```
//!
//! The snapshot seeds are the real traces in `data/traces`, cut down to a
//! few segments and trace entries so that the fuzzer mutates kilobytes,
//! not megabytes, and written in each encoding the readers take. The
//! other seeds are small inputs of each shape the tests use. `fuzz/run.sh`
//! adds the small real traces themselves to the pickle and snapshot corpora.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use vramkit_core::{Frame, Frames};
use vramkit_trace::{read_snapshot, write_json, write_pickle_protocol, SnapshotFile};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = repo().join("fuzz/seeds").join(target);
    std::fs::create_dir_all(&dir).expect("create the seed directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

/// Most segments, blocks per segment, entries per trace and frames per
/// stack a seed keeps.
const SEGMENTS: usize = 3;
const BLOCKS: usize = 8;
const ENTRIES: usize = 24;
const FRAMES: usize = 6;

/// The file cut down to the first few of everything. Stacks shared in the
/// file stay shared (the writers write a shared stack once).
fn cut(mut file: SnapshotFile) -> SnapshotFile {
    let mut shortened: HashMap<*const Frame, Frames> = HashMap::new();
    let mut short = |frames: &mut Option<Frames>| {
        if let Some(f) = frames {
            let key = f.as_ptr();
            *f = shortened.entry(key).or_insert_with(|| f.iter().take(FRAMES).cloned().collect()).clone();
        }
    };
    file.snapshot.segments.truncate(SEGMENTS);
    for segment in &mut file.snapshot.segments {
        segment.blocks.truncate(BLOCKS);
        short(&mut segment.frames);
        for block in &mut segment.blocks {
            short(&mut block.frames);
        }
    }
    for trace in &mut file.snapshot.device_traces {
        trace.truncate(ENTRIES);
        for entry in trace {
            short(&mut entry.frames);
        }
    }
    if let Some(history) = &mut file.legacy_history {
        history.blocks.truncate(SEGMENTS);
        for blocks in &mut history.blocks {
            blocks.truncate(BLOCKS);
            for entry in blocks.iter_mut().flatten() {
                short(&mut entry.frames);
            }
        }
    }
    file.skipped_entries.retain(|s| s.index < ENTRIES);
    file
}

fn snapshots() {
    let dir = repo().join("data/traces/pytorch_snapshots");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("data/traces/pytorch_snapshots")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle"))
        .collect();
    paths.sort();
    for path in paths {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let file = cut(read_snapshot(&path).expect("a real trace reads"));
        for protocol in [2, 4] {
            let mut out = Vec::new();
            write_pickle_protocol(&file, protocol, &mut out).expect("writes");
            write("snapshot", &format!("{stem}.p{protocol}.pickle"), &out);
            if protocol == 4 {
                write("pickle", &format!("{stem}.pickle"), &out);
            }
        }
        let mut out = Vec::new();
        write_json(&file, &mut out).expect("writes");
        write("json", &format!("{stem}.json"), &out);
    }
}

fn pickles() {
    // CPython-made: {'a': [1, 'x'], 'b': <the same list>} at protocol 2, and
    // {1: [1, 2.5, 2**70, None, True]} at protocol 0.
    write("pickle", "cpython_p2_shared.pickle", b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01X\x01\x00\x00\x00xq\x03eX\x01\x00\x00\x00bq\x04h\x02u.");
    write("pickle", "cpython_p0_text.pickle", b"(dp0\nI1\n(lp1\nI1\naF2.5\naL1180591620717411303424L\naNaI01\nas.");
    // Protocol 5 with a FRAME, MEMOIZE, tuples, LONG1, BINFLOAT, NEWTRUE.
    let mut p5 = vec![0x80, 5, 0x95];
    let body: &[u8] = b"]\x94(K\x07\x85\x94K\x01K\x02\x86\x8a\x01\xffG?\xf8\x00\x00\x00\x00\x00\x00\x88N\x8c\x01s\x94h\x01e.";
    p5.extend_from_slice(&(body.len() as u64).to_le_bytes());
    p5.extend_from_slice(body);
    write("pickle", "p5_frame.pickle", &p5);
}

fn confs() {
    let confs = [
        "",
        "max_split_size_mb:128",
        "expandable_segments:True,max_split_size_mb:32",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
        "max_non_split_rounding_mb:64,large_segment_size_mb:32",
        "backend:cudaMallocAsync",
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
        " max_split _size_mb : 1 28 ,\texpandable_segments:\nTrue ",
        "release_lock_on_cudamalloc:True,graph_capture_record_stream_reuse:True",
    ];
    for (i, conf) in confs.iter().enumerate() {
        write("alloc_conf", &format!("conf{i:02}"), conf.as_bytes());
    }
}

fn rmm_logs() {
    write(
        "rmm",
        "time_of_day.csv",
        b"Thread,Time,Action,Pointer,Size,Stream\n140573312345856,23:59:59.999000,allocate,0x7f8a40000000,1024,0x0\n\
          140573312345856,23:59:59.999500,allocate failure,(nil),1099511627776,0x0\n\
          140573312345857,00:00:00.000250,free,0x7f8a40000000,1024,0x7f8a38001020\n",
    );
    write(
        "rmm",
        "epoch_reordered.csv",
        b"Action,Size,Pointer,Stream,Time\r\nallocate,16,7f00,0,1634567890.123456\r\n\r\ndeallocate,16,0x7f00,0,1634567890.5\r\n",
    );
}

fn action_bytes() {
    // Fixed pseudo-random bytes: `arbitrary` reads any bytes as actions.
    let mut rng = vramkit_sim::XorShift::new(0x9e37_79b9_7f4a_7c15);
    for i in 0..8 {
        let len = 64 << (i % 4);
        let bytes: Vec<u8> = (0..len)
            .map(|_| rng.next() as u8)
            .collect();
        write("actions", &format!("random{i}"), &bytes);
    }
}

fn main() {
    snapshots();
    pickles();
    confs();
    rmm_logs();
    action_bytes();
    println!("seeds written under {}", repo().join("fuzz/seeds").display());
}

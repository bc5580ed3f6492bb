//! Bad files at the command line: each exits 2 with one line on stderr
//! starting `vramkit: `, never a panic, within a memory limit (1 GiB of
//! address space, set with `ulimit -v` where there is a shell) and a time
//! limit. What the library does for every truncation of a real snapshot
//! is checked without spawning; the binary runs on a sample of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a bad file may keep the binary busy.
const TIME_LIMIT: Duration = Duration::from_secs(20);
/// Address space the binary may use, in KiB (`ulimit -v`).
const MEMORY_LIMIT_KIB: u64 = 1 << 20;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch directory for this test process.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("vramkit-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write a scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary under the memory and time limits; returns the exit code
/// and stderr.
fn run_bounded(args: &[&str]) -> (Option<i32>, String, String) {
    let exe = env!("CARGO_BIN_EXE_vramkit");
    let mut command = if cfg!(unix) && Path::new("/bin/sh").exists() {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(format!("ulimit -v {MEMORY_LIMIT_KIB} && exec \"$0\" \"$@\"")).arg(exe).args(args);
        c
    } else {
        let mut c = Command::new(exe);
        c.args(args);
        c
    };
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            panic!("{args:?} still running after {TIME_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `vramkit <command> <path>` exits 2 with one clear line; returns the line.
fn rejects(command: &str, path: &Path) -> String {
    let p = path.to_str().expect("a UTF-8 path");
    let args: Vec<&str> = match command {
        "convert" => vec!["convert", p, "/dev/null/never-written.json"],
        other => vec![other, p],
    };
    let (code, stdout, stderr) = run_bounded(&args);
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?} panicked:\n{stderr}");
    assert_eq!(code, Some(2), "{args:?}: exit {code:?}\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: not one line:\n{stderr}");
    assert!(stderr.starts_with("vramkit: "), "{args:?}: {stderr}");
    assert!(stderr.len() < 1000, "{args:?}: a line of {} bytes", stderr.len());
    assert!(stdout.is_empty(), "{args:?} printed to stdout:\n{stdout}");
    stderr
}

/// Every command rejects `path` the same way.
fn every_command_rejects(path: &Path) -> String {
    let line = rejects("summary", path);
    for command in ["replay", "verify", "convert"] {
        rejects(command, path);
    }
    line
}

fn small_real_snapshot() -> Vec<u8> {
    std::fs::read(repo().join("data/traces/pytorch_snapshots/cs336_silmont2000__mem_snapshot.pickle")).expect("readable")
}

#[test]
fn every_truncation_of_a_real_snapshot_is_one_clean_error() {
    let bytes = small_real_snapshot();
    // The reader the commands use, at every byte.
    for cut in 0..bytes.len() {
        match vramkit_trace::read_snapshot_bytes(&bytes[..cut]) {
            Ok(_) => panic!("a prefix of {cut} of {} bytes read as a whole snapshot", bytes.len()),
            Err(e) => {
                let message = e.to_string();
                assert!(!message.is_empty() && !message.contains('\n'), "prefix {cut}: {message:?}");
            }
        }
    }
    // The binary, on 50 of them: the first bytes, the last, and between.
    let scratch = Scratch::new("truncated");
    let n = bytes.len();
    let cuts: Vec<usize> = [0, 1, 2, 3, 11, 12, 13].into_iter().chain((1..37).map(|i| i * n / 37)).chain(n - 7..n).collect();
    assert_eq!(cuts.len(), 50);
    for cut in cuts {
        let path = scratch.file(&format!("cut{cut}.pickle"), &bytes[..cut]);
        rejects("summary", &path);
    }
}

#[test]
fn empty_random_and_missing_files() {
    let scratch = Scratch::new("random");
    every_command_rejects(&scratch.file("empty.pickle", b""));
    let line = every_command_rejects(&scratch.0.join("missing.pickle"));
    assert!(line.contains("missing.pickle"), "{line}");
    let line = every_command_rejects(&scratch.0);
    assert!(line.contains("directory"), "{line}");
    let mut rng = vramkit_sim::XorShift::new(0x2545_f491_4f6c_dd1d);
    for i in 0..24 {
        let mut bytes: Vec<u8> = (0..64 << (i % 8))
            .map(|_| rng.next() as u8)
            .collect();
        // A third each: a pickle's first bytes, JSON's, and anything.
        match i % 3 {
            0 => bytes[..2].copy_from_slice(&[0x80, 4]),
            1 => bytes[0] = b'{',
            _ => {}
        }
        rejects("summary", &scratch.file(&format!("random{i}"), &bytes));
    }
}

#[test]
fn a_pickle_that_imports_or_calls_is_refused_and_nothing_runs() {
    let scratch = Scratch::new("import");
    let marker = scratch.0.join("PWNED");
    let command = format!("touch {}", marker.display());
    let len = command.len() as u8;
    // pickle.dumps(os.system) at protocols 2 and 4, and an object whose
    // __reduce__ is (os.system, ("touch <marker>",)) at protocols 2 and 4.
    let mut reduce2 = b"\x80\x02cposix\nsystem\nq\x00X".to_vec();
    reduce2.extend_from_slice(&[len, 0, 0, 0]);
    reduce2.extend_from_slice(command.as_bytes());
    reduce2.extend_from_slice(b"q\x01\x85q\x02Rq\x03.");
    let mut reduce4 = b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c".to_vec();
    reduce4.push(len);
    reduce4.extend_from_slice(command.as_bytes());
    reduce4.extend_from_slice(b"\x94\x85\x94R\x94.");
    let pickles: [(&str, &[u8], &str); 5] = [
        ("global2.pickle", b"\x80\x02cposix\nsystem\nq\x00.", "GLOBAL"),
        ("global4.pickle", b"\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94.", "STACK_GLOBAL"),
        ("reduce2.pickle", &reduce2, "GLOBAL"),
        ("reduce4.pickle", &reduce4, "STACK_GLOBAL"),
        // Protocol 0 has no PROTO opcode: not taken for a snapshot at all.
        ("reduce0.pickle", b"cposix\nsystem\n(S'touch PWNED'\ntR.", "not a PyTorch memory snapshot"),
    ];
    for (name, bytes, says) in pickles {
        let line = every_command_rejects(&scratch.file(name, bytes));
        assert!(line.contains(says), "{name}: {line}");
        assert!(!marker.exists(), "{name} ran its command");
    }
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    let scratch = Scratch::new("deep");
    const DEPTH: usize = 100_000;
    // Lists in lists: EMPTY_LIST x N, then APPEND x (N - 1).
    let mut lists = vec![0x80, 4];
    lists.extend(std::iter::repeat_n(b']', DEPTH));
    lists.extend(std::iter::repeat_n(b'a', DEPTH - 1));
    lists.push(b'.');
    // The same under a key a snapshot may carry and vramkit keeps as it is:
    // {'segments': [], 'extra': <lists>}.
    let mut under_key = b"\x80\x04}(\x8c\x08segments]\x8c\x05extra".to_vec();
    under_key.extend_from_slice(&lists[2..lists.len() - 1]);
    under_key.extend_from_slice(b"u.");
    // Open MARKs that never close.
    let mut marks = vec![0x80, 4];
    marks.extend(std::iter::repeat_n(b'(', DEPTH));
    marks.push(b'.');
    // JSON arrays and objects.
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let objects = format!("{}1{}", "{\"a\":".repeat(DEPTH), "}".repeat(DEPTH));
    let nested_json = format!("{{\"segments\": [], \"extra\": {arrays}}}");
    for (name, bytes) in [
        ("lists.pickle", lists.as_slice()),
        ("under_key.pickle", &under_key),
        ("marks.pickle", &marks),
        ("arrays.json", arrays.as_bytes()),
        ("objects.json", objects.as_bytes()),
        ("nested.json", nested_json.as_bytes()),
    ] {
        rejects("summary", &scratch.file(name, bytes));
    }
}

#[test]
fn huge_declared_lengths_allocate_nothing() {
    let scratch = Scratch::new("huge");
    let with = |prefix: &[u8], len: &[u8], rest: &[u8]| [&[0x80, 4][..], prefix, len, rest].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("binunicode8", with(&[0x8d], &(1u64 << 62).to_le_bytes(), b"abc.")),
        ("binunicode8_max", with(&[0x8d], &u64::MAX.to_le_bytes(), b"abc.")),
        ("binunicode", with(b"X", &u32::MAX.to_le_bytes(), b"abc.")),
        ("frame", with(&[0x95], &(1u64 << 62).to_le_bytes(), b"N.")),
        ("long4", with(&[0x8b], &(i32::MAX as u32).to_le_bytes(), b"\x01.")),
        ("long4_negative", with(&[0x8b], &u32::MAX.to_le_bytes(), b"\x01.")),
        ("long_binput", with(b"N", b"r", &[0xff, 0xff, 0xff, 0xff, b'.'])),
        ("long_binget", with(b"", b"j", &[0xff, 0xff, 0xff, 0x7f, b'.'])),
        ("short_binunicode", with(&[0x8c], &[0xff], b"ab.")),
        ("binbytes8", with(&[0x8e], &u64::MAX.to_le_bytes(), b"ab.")),
    ];
    for (name, bytes) in &cases {
        rejects("summary", &scratch.file(&format!("{name}.pickle"), bytes));
    }
    // A memo index far beyond the memo: one entry, not a table of 2^32.
    let sparse = with(b"N", b"r", &[0xfe, 0xff, 0xff, 0xff, b'0', b'j', 0xfe, 0xff, 0xff, 0xff, b'.']);
    rejects("summary", &scratch.file("sparse_memo.pickle", &sparse));
}

#[test]
fn json_of_the_wrong_shape_names_the_place() {
    let scratch = Scratch::new("shape");
    let cases = [
        ("number_segments", r#"{"segments": 5, "device_traces": []}"#, "segments"),
        ("string_address", r#"{"segments": [{"address": "x", "total_size": 2097152, "blocks": []}], "device_traces": []}"#, "segments[0]"),
        ("trace_not_a_list", r#"{"segments": [], "device_traces": {"0": []}}"#, "device_traces"),
        ("entry_action_number", r#"{"segments": [], "device_traces": [[{"action": 7, "addr": 0, "size": 1, "stream": 0}]]}"#, "device_traces[0][0]"),
        ("list_of_numbers", "[1, 2, 3]", "[0]"),
        ("negative_size", r#"{"segments": [{"device": 0, "address": 0, "total_size": -1, "allocated_size": 0, "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large", "blocks": []}], "device_traces": []}"#, "total_size"),
        ("not_json", "{segments: []}", "JSON"),
        ("trailing", r#"{"segments": [], "device_traces": []} {"#, "JSON"),
    ];
    for (name, text, says) in cases {
        let line = every_command_rejects(&scratch.file(&format!("{name}.json"), text.as_bytes()));
        assert!(line.contains(says), "{name}: {line}");
    }
    // A JSON string at the top: not sniffed as a snapshot at all.
    let line = rejects("summary", &scratch.file("string.json", br#""segments""#));
    assert!(line.contains("not a PyTorch memory snapshot"), "{line}");
}

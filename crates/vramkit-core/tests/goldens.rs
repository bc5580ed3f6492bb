//! Byte-exact checks against text real PyTorch releases printed
//! (`tests/data/goldens/`, described in its README).
//!
//! Each table is read back into statistics and printed again; each OOM
//! message has its figures read out here, independently of the library, and
//! is printed again from an [`OomMessage`]. Either way the whole text must
//! come back byte for byte.

use std::fs;
use std::path::PathBuf;
use vramkit_core::{
    format_size, memory_summary, parse_memory_summary, DeviceStats, MessageStyle, OomMessage,
    Platform, ProcessMemory, SummaryLayout,
};

fn goldens() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/goldens")
}

fn summary_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = fs::read_dir(goldens().join("memory_summary"))
        .expect("golden tables are in the repository")
        .map(|entry| {
            let path = entry.expect("readable directory").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&path).expect("UTF-8 golden"))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_memory_summary_golden_round_trips_byte_for_byte() {
    let files = summary_files();
    assert_eq!(files.len(), 13);
    for (name, text) in files {
        // The file name starts with the layout generation (goldens README).
        let layout = if name.contains("_v1.4-1.9_") {
            SummaryLayout::V1_4
        } else if name.contains("_v1.10-1.13_") {
            SummaryLayout::V1_10
        } else {
            assert!(name.contains("_v2."), "{name}");
            SummaryLayout::V2_0
        };
        let parsed = parse_memory_summary(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(parsed.layout, layout, "{name}");
        assert_eq!(parsed.abbreviated, name.contains("abbreviated"), "{name}");
        let rendered = memory_summary(
            &parsed.stats,
            parsed.device,
            parsed.abbreviated,
            parsed.layout,
        );
        assert_eq!(rendered, text, "{name}");
    }
}

#[test]
fn header_counters_are_read_from_the_table() {
    let files = summary_files();
    let find = |prefix: &str| {
        let (_, text) = files.iter().find(|(n, _)| n.starts_with(prefix)).unwrap();
        parse_memory_summary(text).unwrap()
    };
    let fairseq = find("01_");
    assert_eq!(
        (fairseq.stats.num_ooms, fairseq.stats.num_alloc_retries),
        (58, 66)
    );
    // A KiB aggregate cell means that many KiB.
    let evofill = find("07_");
    assert_eq!(evofill.stats.allocated_bytes.all.current, 682_537 * 1024);
    // Pool cells take the aggregate's unit: "0 GiB" under "3115 GiB".
    assert_eq!(evofill.stats.allocated_bytes.all.allocated, 3115 << 30);
    assert_eq!(evofill.stats.allocated_bytes.small_pool.allocated, 0);
    let unsloth = find("10_");
    assert_eq!(unsloth.stats.allocation.large_pool.allocated, 2_812_000);
}

#[test]
fn an_all_zero_table_is_golden_12() {
    let files = summary_files();
    let (_, text) = files.iter().find(|(n, _)| n.starts_with("12_")).unwrap();
    let fresh = memory_summary(&DeviceStats::default(), 0, false, SummaryLayout::V2_0);
    assert_eq!(&fresh, text);
}

// --- OOM messages -------------------------------------------------------------

use MessageStyle::*;

/// The wording of each block of `oom_messages.txt`, in file order, from the
/// version its `# source` line gives. `None` is left out of the comparison:
///
/// - block 28 is the `backend:cudaMallocAsync` allocator's message, not the
///   caching allocator's, and the golden keeps only its first 21 bytes
///   (`Allocation on device `), so it could not check a rendering anyway.
const EXPECTED: [Option<(MessageStyle, Platform)>; 28] = [
    Some((V1_0, Platform::Cuda)),
    Some((V1_0, Platform::Cuda)),
    Some((V1_0, Platform::Cuda)),
    Some((V1_4, Platform::Cuda)),
    Some((V1_4, Platform::Cuda)),
    Some((V1_4, Platform::Cuda)),
    Some((V1_4, Platform::Cuda)),
    Some((V1_10, Platform::Cuda)),
    Some((V1_10, Platform::Cuda)),
    Some((V1_10, Platform::Cuda)),
    Some((V1_10, Platform::Cuda)),
    Some((V2_1, Platform::Cuda)),
    Some((V2_1, Platform::Cuda)),
    Some((V2_1, Platform::Cuda)),
    Some((V2_1, Platform::Cuda)),
    Some((V2_2, Platform::Cuda)),
    Some((V2_3, Platform::Cuda)),
    Some((V2_4, Platform::Cuda)),
    Some((V2_4, Platform::Cuda)),
    Some((V2_4, Platform::Cuda)),
    Some((V2_4, Platform::Cuda)),
    Some((V2_4, Platform::RocmHipAllocConf)),
    Some((V2_6, Platform::Rocm)),
    Some((V2_10, Platform::Cuda)),
    Some((V2_10, Platform::Cuda)),
    Some((V2_11, Platform::Cuda)),
    Some((V2_11, Platform::Cuda)),
    None,
];

/// The message lines of `oom_messages.txt`, without their `# source` lines.
fn oom_lines() -> Vec<String> {
    let text = fs::read_to_string(goldens().join("oom_messages.txt")).unwrap();
    text.trim_end_matches('\n')
        .split("\n----\n")
        .map(|block| {
            let mut lines = block.lines();
            assert!(lines.next().unwrap().starts_with("# source:"), "{block}");
            let line = lines.next().unwrap().to_owned();
            assert!(lines.next().is_none(), "{block}");
            line
        })
        .collect()
}

/// Bytes that `format_size` prints as `number unit`: the nearest multiple of
/// the unit's hundredth, kept above the previous unit's range and within u64
/// (NVML's 2^64 - 1 prints as 17179869184.00 GiB).
fn bytes_of(number: &str, unit: &str) -> u64 {
    let bytes = if unit == "bytes" {
        number.parse().unwrap()
    } else {
        let shift = match unit {
            "KiB" => 10,
            "MiB" => 20,
            "GiB" => 30,
            _ => panic!("unit {unit:?}"),
        };
        let (whole, fraction) = number.split_once('.').unwrap();
        assert_eq!(fraction.len(), 2, "{number}");
        let hundredths = whole.parse::<u128>().unwrap() * 100 + fraction.parse::<u128>().unwrap();
        let nearest = ((hundredths << shift) + 50) / 100;
        nearest.max((1 << shift) + 1).min(u64::MAX as u128) as u64
    };
    assert_eq!(format_size(bytes), format!("{number} {unit}"));
    bytes
}

fn unit_word(text: &str) -> &str {
    let end = text
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    &text[..end]
}

/// The size printed right after `anchor`.
fn size_after(message: &str, anchor: &str) -> u64 {
    let rest = &message[message
        .find(anchor)
        .unwrap_or_else(|| panic!("{anchor:?} in {message}"))
        + anchor.len()..];
    let (number, rest) = rest.split_once(' ').unwrap();
    bytes_of(number, unit_word(rest))
}

/// The size printed right before `anchor`.
fn size_before(message: &str, anchor: &str) -> u64 {
    let head = &message[..message
        .find(anchor)
        .unwrap_or_else(|| panic!("{anchor:?} in {message}"))];
    let mut words = head.rsplitn(3, ' ');
    let unit = words.next().unwrap();
    let number = words.next().unwrap();
    bytes_of(number, unit)
}

fn optional_size_before(message: &str, anchor: &str) -> Option<u64> {
    message
        .contains(anchor)
        .then(|| size_before(message, anchor))
}

fn device_after(message: &str, anchor: &str) -> i64 {
    let rest = &message[message.find(anchor).unwrap() + anchor.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().unwrap()
}

/// Reads the figures out of an allocator message of a known style.
fn parse_oom(message: &str, style: MessageStyle, platform: Platform) -> OomMessage {
    let mut oom = OomMessage {
        style,
        platform,
        alloc_size_bytes: size_after(message, "Tried to allocate "),
        ..OomMessage::default()
    };
    match style {
        V1_0 | V1_4 | V1_10 => {
            oom.device = device_after(message, "(GPU ");
            oom.total_capacity_bytes = size_before(message, " total capacity;");
            oom.allocated_bytes = size_before(message, " already allocated;");
            oom.device_free_bytes = size_before(message, " free;");
            oom.allowed_bytes = optional_size_before(message, " allowed;");
            oom.reserved_bytes = if style == V1_0 {
                oom.allocated_bytes + size_before(message, " cached)")
            } else {
                size_before(message, " reserved in total by PyTorch)")
            };
        }
        // The golden stops at the NUL written for device 0.
        V2_3 => oom.device = 0,
        _ => {
            oom.device = device_after(message, ". GPU ");
            oom.total_capacity_bytes = if style == V2_1 {
                size_after(message, " total capacty of ")
            } else {
                size_after(message, " total capacity of ")
            };
            oom.device_free_bytes = size_after(message, " of which ");
            for sentence in message.split(". ") {
                let pid = if let Some(rest) = sentence.strip_prefix("Process ") {
                    Some(rest.split(' ').next().unwrap().parse().unwrap())
                } else if sentence.starts_with("Including non-PyTorch memory, this process has ") {
                    None
                } else {
                    continue;
                };
                let used_bytes = size_after(sentence, " has ");
                oom.processes.push(ProcessMemory { pid, used_bytes });
            }
            oom.allowed_bytes = optional_size_before(message, " allowed;");
            // "Of the allocated memory" counts private pools' cached blocks
            // (from 2.4), and "unallocated" is what is left of reserved.
            let shown_allocated = size_after(message, "Of the allocated memory ");
            let private = optional_size_before(message, " allocated in private pools").unwrap_or(0);
            let unallocated = size_before(message, " is reserved by PyTorch but unallocated");
            oom.private_pool_cached_bytes = private;
            oom.allocated_bytes = shown_allocated - private;
            oom.reserved_bytes = shown_allocated + unallocated;
        }
    }
    oom
}

#[test]
fn every_oom_message_golden_is_reprinted_byte_for_byte() {
    let lines = oom_lines();
    assert_eq!(lines.len(), EXPECTED.len());
    let mut compared = 0;
    for (index, (line, expected)) in lines.iter().zip(EXPECTED).enumerate() {
        let block = index + 1;
        let Some((style, platform)) = expected else {
            assert!(
                line.ends_with("Allocation on device "),
                "block {block}: {line}"
            );
            continue;
        };
        // Everything before the allocator's text is the caller's prefix.
        let start = line
            .find("CUDA out of memory.")
            .or_else(|| line.find("HIP out of memory."))
            .unwrap_or_else(|| panic!("block {block}: {line}"));
        let golden = &line[start..];
        let rendered = parse_oom(golden, style, platform).to_string();
        if style == V2_3 {
            // Python cuts the C string at the NUL that stands for GPU 0. The
            // text before it ends in "GPU "; the golden, pasted into a GitHub
            // issue, lost that trailing space (the cudaMallocAsync golden,
            // cut by the same bug, kept its own).
            let (before_nul, _) = rendered.split_once('\0').expect("device 0 is a NUL");
            assert_eq!(before_nul, format!("{golden} "), "block {block}");
        } else {
            assert_eq!(rendered, golden, "block {block}");
        }
        compared += 1;
    }
    assert_eq!(compared, 27);
}

#[test]
fn oom_golden_figures_are_read_as_printed() {
    let lines = oom_lines();
    let message = |block: usize| {
        let line = &lines[block - 1];
        let start = line
            .find("CUDA out of memory.")
            .or_else(|| line.find("HIP out of memory."))
            .unwrap();
        line[start..].to_owned()
    };
    // Own process after another one, in NVML's order.
    let fuzz = parse_oom(&message(15), V2_1, Platform::Cuda);
    assert_eq!(
        fuzz.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [Some(2_006_998), None]
    );
    // Fraction limit and private pools, ROCm wording.
    let rocm = parse_oom(&message(23), V2_6, Platform::Rocm);
    assert_eq!(rocm.allowed_bytes, Some(bytes_of("1.05", "GiB")));
    assert_eq!(rocm.private_pool_cached_bytes, 17 << 20);
    // NVML's "not available".
    let nvml = parse_oom(&message(27), V2_11, Platform::Cuda);
    assert_eq!(
        nvml.processes,
        [ProcessMemory {
            pid: None,
            used_bytes: u64::MAX
        }]
    );
}

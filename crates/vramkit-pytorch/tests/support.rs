//! What the sweeps share: the harnesses, the settings swept, reading
//! PyTorch's recordings, and running the same program on vramkit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, Error, StreamId};
use vramkit_pytorch::{Harness, Op, Program, Release, Setup, Shape, RELEASES};
use vramkit_sim::{EventMode, SimDevice};
use vramkit_trace::SnapshotFile;

/// The releases to test: `$VRAMKIT_PYTORCH_RELEASES` (`all`, or versions
/// separated by commas), else the newest and the oldest.
pub fn releases() -> Vec<&'static Release> {
    match std::env::var("VRAMKIT_PYTORCH_RELEASES") {
        Ok(list) if list == "all" => RELEASES.iter().collect(),
        Ok(list) => list
            .split(',')
            .map(|v| Release::find(v.trim()).unwrap_or_else(|| panic!("VRAMKIT_PYTORCH_RELEASES: no release {v:?}")))
            .collect(),
        Err(_) => vec![Release::newest(), RELEASES.last().expect("releases")],
    }
}

/// vramkit's rules for `release`.
pub fn rules(release: &Release) -> vramkit_core::PytorchRelease {
    vramkit_core::PytorchRelease::parse(release.version).expect("release versions parse")
}

/// Seeds per case: `$VRAMKIT_SWEEP_SEEDS`, else `default`.
pub fn seeds(default: u64) -> u64 {
    std::env::var("VRAMKIT_SWEEP_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The harness for `release`, built once per test process; `None` (a skip,
/// already explained on stderr) where this machine cannot build it.
pub fn harness(release: &'static Release) -> Option<Harness> {
    static BUILT: OnceLock<Mutex<HashMap<&'static str, Option<Harness>>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    built
        .entry(release.version)
        .or_insert_with(|| Harness::build(release).unwrap_or_else(|e| panic!("{e}")))
        .clone()
}

/// Samples vramkit's invariant checker for this test process
/// ([`vramkit_core::InvariantChecks::Sampled`]) instead of running it after
/// every operation, which `cargo test --workspace` turns on: the sweeps
/// hold vramkit to PyTorch's numbers, and vramkit-core's own tests check
/// every operation. [`run_on_vramkit`] still checks each program's end.
pub fn sampled_invariant_checks() {
    vramkit_core::set_invariant_checks(vramkit_core::InvariantChecks::Sampled);
}

/// The settings swept: PyTorch's defaults, each key alone, and pairs.
pub const SETTINGS: &[&str] = &[
    "",
    "max_split_size_mb:64",
    "max_split_size_mb:300",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "expandable_segments:True",
    "garbage_collection_threshold:0.6",
    "max_split_size_mb:128,roundup_power2_divisions:8",
    "expandable_segments:True,max_split_size_mb:256",
    "expandable_segments:True,roundup_power2_divisions:2",
    "garbage_collection_threshold:0.8,max_split_size_mb:100",
];

/// Writes a recording to `$VK_KEEP_RECORDINGS` (a directory), if set, as
/// `<what>.json` (spaces and punctuation made `_`), to look at with
/// `vramkit verify`.
pub fn keep_recording(what: &str, json: &str) {
    if let Some(dir) = std::env::var_os("VK_KEEP_RECORDINGS") {
        let name: String = what.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '+' || c == '-' { c } else { '_' }).collect();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.json")), json).expect("VK_KEEP_RECORDINGS is a writable directory");
    }
}

/// A recording of PyTorch's, read as `vramkit verify` reads a file.
pub fn read_recording(json: &str) -> SnapshotFile {
    vramkit_trace::read_snapshot_bytes(json.as_bytes()).unwrap_or_else(|e| panic!("vramkit cannot read PyTorch's recording: {e}"))
}

/// What vramkit's allocator did with a program.
#[derive(Debug, Default)]
pub struct VramkitRun {
    /// The message of each out-of-memory error, with its program line.
    pub ooms: Vec<(usize, String)>,
    /// `memory_stats()` at each `p`, with its line.
    pub stats: Vec<(usize, BTreeMap<String, i64>)>,
}

/// Runs `program` on a `CachingAllocator<SimDevice>` set up as `setup`
/// sets up PyTorch, with PyTorch's stream handles (`streams`, from the
/// harness's run of the same program) and OOM messages in `release`'s
/// wording. The device hands out addresses as the fake runtime does (first
/// fit), since releases that break size ties by address place blocks by
/// them. `record_stream` is passed on only where the harness's reaches
/// PyTorch's allocator (`records_streams`).
pub fn run_on_vramkit(
    program: &Program,
    setup: &Setup,
    config: AllocatorConfig,
    streams: &[(u32, i64)],
    release: vramkit_core::PytorchRelease,
    records_streams: bool,
) -> VramkitRun {
    let capacity = setup.capacity.unwrap_or(80 << 30);
    let mode = if setup.manual_events { EventMode::Manual } else { EventMode::Immediate };
    let mut alloc = CachingAllocator::new(SimDevice::new(capacity).with_first_fit().with_event_mode(mode), config);
    let stream = |i: u32| StreamId(if i == 0 { 0 } else { streams.iter().find(|s| s.0 == i).map_or(0, |s| s.1 as u64) });
    let mut live: HashMap<u64, DeviceAddr> = HashMap::new();
    let mut out = VramkitRun::default();
    for (i, op) in program.ops.iter().enumerate() {
        let line = i + 1;
        match op {
            Op::Malloc { id, size, stream: s } => match alloc.malloc(*size, stream(*s)) {
                Ok(p) => {
                    live.insert(*id, p);
                }
                Err(Error::OutOfMemory(oom)) => out.ooms.push((line, oom.pytorch_message_as(release.message_style()))),
                Err(e) => panic!("line {line} ({op}): vramkit failed: {e}"),
            },
            Op::Free { id } => {
                if let Some(p) = live.remove(id) {
                    alloc.free(p).unwrap_or_else(|e| panic!("line {line} ({op}): {e}"));
                }
            }
            Op::RecordStream { id, stream: s } if records_streams => {
                if let Some(&p) = live.get(id) {
                    alloc.record_stream(p, stream(*s)).unwrap_or_else(|e| panic!("line {line} ({op}): {e}"));
                }
            }
            Op::CompleteEvents => alloc.device_mut().complete_all_events(),
            Op::EmptyCache => alloc.empty_cache(),
            Op::SetFraction(f) => alloc.set_memory_fraction(*f).unwrap_or_else(|e| panic!("line {line} ({op}): {e}")),
            Op::SetSettings(conf) => {
                let mut config = alloc.config().clone();
                config.set_allocator_settings_pytorch(conf).unwrap_or_else(|e| panic!("line {line} ({op}): {e}"));
                alloc.set_config(config).unwrap_or_else(|e| panic!("line {line} ({op}): {e}"));
            }
            Op::BeginPool { pool, stream: s } => alloc
                .begin_allocate_to_pool((0, *pool), vramkit_core::StreamFilter::Stream(stream(*s)))
                .unwrap_or_else(|e| panic!("line {line} ({op}): {e}")),
            Op::EndPool { pool } => alloc.end_allocate_to_pool((0, *pool)).unwrap_or_else(|e| panic!("line {line} ({op}): {e}")),
            Op::ReleasePool { pool } => alloc.release_pool((0, *pool)).unwrap_or_else(|e| panic!("line {line} ({op}): {e}")),
            Op::ResetPeakStats => alloc.reset_peak_stats(),
            Op::Stats => out.stats.push((line, alloc.memory_stats())),
            Op::RecordStream { .. } | Op::Snapshot(_) | Op::TimePairs { .. } => {}
        }
    }
    if let Err(violation) = alloc.check_invariants() {
        panic!("after the program's last operation: allocator invariant broken: {violation}");
    }
    out
}

/// One kind of program and device, under one setting.
#[derive(Clone, Debug)]
pub struct Case {
    /// What it exercises, for reports.
    pub label: String,
    /// The programs.
    pub shape: Shape,
    /// The device and PyTorch's settings.
    pub setup: Setup,
    /// A memory fraction the programs set first (not in the recording: a
    /// replay is told).
    pub fraction: Option<f64>,
}

/// The kinds of program swept under `conf`: with and without
/// `empty_cache()`, side streams with deferred frees, a tight capacity
/// (device refusals and the retry ladder), a fraction with garbage
/// collection, private pools.
pub fn cases(conf: &str) -> Vec<Case> {
    let with = |extra: &str| if conf.is_empty() { extra.to_string() } else if extra.is_empty() { conf.to_string() } else { format!("{conf},{extra}") };
    let case = |label: &str, shape: Shape, setup: Setup, fraction: Option<f64>| Case { label: format!("{label} {conf:?}"), shape, setup, fraction };
    let setup = Setup { conf: Some(conf.to_string()), ..Setup::default() };
    let tight = Setup { capacity: Some(6 << 30), ..setup.clone() };
    let mut out = vec![
        case("plain", Shape::default(), setup.clone(), None),
        case(
            "streams",
            Shape { streams: true, empty_cache: false, ..Shape::default() },
            Setup { manual_events: true, ..setup.clone() },
            None,
        ),
        case("tight", Shape { largest: 2 << 30, ..Shape::default() }, tight.clone(), None),
        case(
            "tight+streams",
            Shape { largest: 2 << 30, streams: true, ..Shape::default() },
            Setup { manual_events: true, ..tight.clone() },
            None,
        ),
        case("pools", Shape { pools: true, streams: true, ..Shape::default() }, Setup { manual_events: true, ..setup.clone() }, None),
    ];
    if !conf.contains("garbage_collection_threshold") {
        out.push(case(
            "fraction+gc",
            Shape { largest: 1536 << 20, fraction: Some(0.5), ..Shape::default() },
            Setup { conf: Some(with("garbage_collection_threshold:0.7")), capacity: Some(8 << 30), ..Setup::default() },
            Some(0.5),
        ));
    }
    out
}

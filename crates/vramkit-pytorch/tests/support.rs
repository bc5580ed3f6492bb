//! What the sweeps share: the harnesses, the settings swept, reading
//! PyTorch's recordings, and running the same program on vramkit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use vramkit_core::{AllocatorConfig, CachingAllocator, DeviceAddr, Error, StreamId};
use vramkit_pytorch::{Harness, Op, Program, Release, Setup, RELEASES};
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
/// harness's run of the same program).
pub fn run_on_vramkit(program: &Program, setup: &Setup, config: AllocatorConfig, streams: &[(u32, i64)]) -> VramkitRun {
    let capacity = setup.capacity.unwrap_or(80 << 30);
    let mode = if setup.manual_events { EventMode::Manual } else { EventMode::Immediate };
    let mut alloc = CachingAllocator::new(SimDevice::new(capacity).with_event_mode(mode), config);
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
                Err(Error::OutOfMemory(oom)) => out.ooms.push((line, oom.pytorch_message())),
                Err(e) => panic!("line {line} ({op}): vramkit failed: {e}"),
            },
            Op::Free { id } => {
                if let Some(p) = live.remove(id) {
                    alloc.free(p).unwrap_or_else(|e| panic!("line {line} ({op}): {e}"));
                }
            }
            Op::RecordStream { id, stream: s } => {
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
            Op::Snapshot(_) | Op::TimePairs { .. } => {}
        }
    }
    out
}

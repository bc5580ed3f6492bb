//! Device faults: the simulated device refuses mallocs and maps at random
//! (1% to 50% of calls) while random programs run, under every preset.
//!
//! The shadow model (`vramkit_fuzz::model`) checks after every step that
//! the invariants hold, that an out-of-memory error is one PyTorch would
//! raise (the segment does not fit even after releasing the cache, or the
//! device refused by a fault), that the bytes the device holds equal the
//! allocator's reserved bytes, and that `empty_cache` with nothing live
//! returns the device to zero; at the end that nothing leaked. Memory
//! comes and goes (`SetCapacity`) and faults stop and start again, so the
//! runs also recover from pressure.
//!
//! CI runs a few thousand actions; the soak (`#[ignore]`) runs millions:
//!
//! ```text
//! cargo test -p vramkit-core --release --test tests faults::soak -- --ignored --nocapture
//! ```
//!
//! (`VRAMKIT_SOAK_ACTIONS` sets the actions per rate and preset.)

use crate::support::{GIB, MIB, S0};
use vramkit_core::{DeviceAddr, Error, StreamId};
use vramkit_fuzz::model::{preset, Action, ModelCounts, Shadow, PRESETS};
use vramkit_sim::{EventMode, SimDevice};
use vramkit_sim::XorShift;

/// The fault rates of the runs, in percent.
const RATES: [u8; 5] = [1, 5, 10, 25, 50];


/// A size with the property test's mix: both pools, the boundaries,
/// oversize blocks, and requests of gigabytes.
fn size(rng: &mut XorShift) -> u64 {
    match rng.below(14) {
        0..=2 => 1 + rng.below(4096),
        3..=5 => 4097 + rng.below(MIB - 4096),
        6 => 1,
        7 => [MIB, MIB + 1, MIB - 1, 10 * MIB, 10 * MIB - 1, 10 * MIB + 1, 20 * MIB, 20 * MIB + 1][rng.below(8) as usize],
        8..=10 => MIB + 1 + rng.below(63 * MIB),
        11 => 64 * MIB + rng.below(448 * MIB),
        _ => GIB + rng.below(2 * GIB),
    }
}

/// One action of a program running at fault rate `percent`: mostly
/// mallocs and frees; now and then memory leaves or returns, the faults
/// stop for a while, or the cache is emptied.
fn action(rng: &mut XorShift, percent: u8) -> Action {
    let stream = rng.below(3) as u8;
    match rng.below(40) {
        0..=17 => Action::Malloc { size: size(rng), stream },
        18..=31 => Action::Free { index: rng.next() as usize },
        32 => Action::BadFree { index: rng.next() as usize },
        33 => Action::RecordStream { index: rng.next() as usize, stream },
        34 => Action::CompleteStream { stream },
        35 => Action::EmptyCache,
        36 => Action::UpdateSettings { which: rng.below(7) as u8 },
        37 => Action::SetCapacity { gib: rng.below(8) as u8 },
        // Faults stop (a quarter of the time) or resume at the run's rate.
        _ => Action::SetFaultRate { percent: if rng.below(4) == 0 { 0 } else { percent } },
    }
}

/// Runs `actions` random actions at fault rate `percent` under `preset_name`.
/// Returns what the model did and how many device calls failed by a fault.
fn faulty_run(preset_name: &str, percent: u8, actions: u64, seed: u64) -> (ModelCounts, u64) {
    let device = SimDevice::new(8 * GIB).with_event_mode(EventMode::Manual);
    let mut shadow = Shadow::on(device, preset(preset_name));
    shadow.apply(&Action::SetFaultRate { percent });
    let mut rng = XorShift::new(seed | 1);
    for _ in 0..actions {
        shadow.apply(&action(&mut rng, percent));
    }
    let injected = shadow.allocator().device().counters().injected_failures;
    (shadow.finish(), injected)
}

#[test]
fn random_faults_keep_every_invariant_under_every_preset() {
    let mut total = ModelCounts::default();
    let mut injected = 0;
    for (p, name) in PRESETS.iter().enumerate() {
        for (r, &percent) in RATES.iter().enumerate() {
            let seed = 0x5eed_0000 + (p * RATES.len() + r) as u64;
            let (counts, faults) = faulty_run(name, percent, 400, seed);
            total.actions += counts.actions;
            total.mallocs += counts.mallocs;
            total.ooms += counts.ooms;
            injected += faults;
        }
    }
    // The runs must have exercised both outcomes of a faulty device.
    assert!(injected > 100, "only {injected} faults injected");
    assert!(total.ooms > 10 && total.mallocs > 1000, "{total:?}");
}

#[test]
fn memory_returns_and_the_same_request_succeeds() {
    for name in ["default", "expandable"] {
        let device = SimDevice::new(8 * GIB).with_event_mode(EventMode::Manual);
        let mut shadow = Shadow::on(device, preset(name));
        // 6 GiB live, then other processes take all but 6.5 GiB.
        for _ in 0..3 {
            shadow.apply(&Action::Malloc { size: 2 * GIB, stream: 0 });
        }
        shadow.apply(&Action::SetCapacity { gib: 5 }); // 6 GiB
        shadow.apply(&Action::Malloc { size: GIB, stream: 0 });
        assert_eq!(shadow.counts().ooms, 1, "{name}: 1 GiB does not fit in 6 GiB with 6 GiB live");
        // Memory returns, but every call fails: still out of memory.
        shadow.apply(&Action::SetCapacity { gib: 7 });
        shadow.apply(&Action::InjectFailures { n: 255 });
        shadow.apply(&Action::Malloc { size: GIB, stream: 0 });
        assert_eq!(shadow.counts().ooms, 2, "{name}");
        // The faults stop: the same request succeeds.
        shadow.apply(&Action::InjectFailures { n: 0 });
        shadow.apply(&Action::Malloc { size: GIB, stream: 0 });
        assert_eq!((shadow.counts().ooms, shadow.counts().mallocs), (2, 4), "{name}");
        let stats = shadow.allocator().stats();
        assert_eq!(stats.num_ooms, 2, "{name}");
        assert_eq!(stats.reserved_bytes.all.current as u64, shadow.allocator().device().used_bytes());
        shadow.finish();
    }
}

#[test]
fn a_fault_on_the_retry_frees_the_cache_and_is_reported_once() {
    // A cached 20 MiB segment, then a request that needs a new one: the
    // first cudaMalloc fails (fault), the ladder frees the cached segment
    // and retries; a second fault makes it an OOM with nothing left cached.
    let mut alloc = crate::support::allocator_on(SimDevice::new(8 * GIB), "");
    let p = alloc.malloc(20 * MIB, S0).unwrap();
    alloc.free(p).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all.current, 20 << 20);
    alloc.device_mut().fail_next_mallocs(2);
    match alloc.malloc(40 * MIB, S0) {
        Err(Error::OutOfMemory(oom)) => {
            assert_eq!(oom.reserved_bytes, 0, "the ladder released the cached segment");
            assert_eq!(oom.alloc_size_bytes, 40 * MIB);
        }
        other => panic!("expected an OOM, got {other:?}"),
    }
    assert_eq!(alloc.stats().num_ooms, 1);
    assert_eq!(alloc.stats().num_alloc_retries, 1);
    assert_eq!(alloc.device().used_bytes(), 0);
    assert_eq!(alloc.device().counters().injected_failures, 2);
    // One fault only: the retry succeeds and no OOM is reported.
    alloc.device_mut().fail_next_mallocs(1);
    let q = alloc.malloc(40 * MIB, StreamId(1)).unwrap();
    assert_eq!(alloc.stats().num_ooms, 1);
    alloc.free(q).unwrap();
    alloc.free(DeviceAddr(0)).unwrap();
    alloc.empty_cache();
    assert_eq!(alloc.device().used_bytes(), 0);
}

/// The long run: every preset at every rate, `VRAMKIT_SOAK_ACTIONS`
/// actions each (default 200 000), figures printed.
#[test]
#[ignore = "minutes; run in release (see the module docs)"]
fn soak() {
    let actions: u64 = std::env::var("VRAMKIT_SOAK_ACTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let start = std::time::Instant::now();
    let mut total = ModelCounts::default();
    let mut injected_total = 0;
    for (p, name) in PRESETS.iter().enumerate() {
        for (r, &percent) in RATES.iter().enumerate() {
            let seed = 0x50a4_0000 + (p * RATES.len() + r) as u64;
            let (counts, injected) = faulty_run(name, percent, actions, seed);
            println!(
                "{name:24} {percent:3}%: {} actions, {} mallocs, {} OOMs, {} frees, {injected} faults injected, 0 violations",
                counts.actions, counts.mallocs, counts.ooms, counts.frees
            );
            total.actions += counts.actions;
            total.mallocs += counts.mallocs;
            total.ooms += counts.ooms;
            total.frees += counts.frees;
            injected_total += injected;
        }
    }
    println!(
        "total: {} actions, {} mallocs, {} OOMs, {} frees, {injected_total} faults injected, 0 violations, {:.1} s",
        total.actions,
        total.mallocs,
        total.ooms,
        total.frees,
        start.elapsed().as_secs_f64()
    );
}

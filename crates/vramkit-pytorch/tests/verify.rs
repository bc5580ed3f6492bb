//! `vramkit verify` on PyTorch's own recordings: every placement, segment
//! event and end state exact, for every release built, every setting, and
//! every kind of program (`support::cases`).

use crate::support::{cases, harness, keep_recording, read_recording, releases, rules, seeds, SETTINGS};
use vramkit_pytorch::random_program;
use vramkit_replay::DeviceTrace;

/// The share (percent) of recordings with private pools and expandable
/// segments that may diverge.
const POOL_GAP_PERCENT: u64 = 3;

/// Private pools with expandable segments (see `pool_gap_divergences`).
fn known_pool_gap(label: &str) -> bool {
    label.starts_with("pools") && label.contains("expandable_segments:True")
}

/// The share (percent) of private-pool recordings of torch 2.10–2.12 that
/// may diverge: PyTorch itself does not repeat those runs (blocks whose
/// events were deferred past an allocate-to-pool are freed in hash-map
/// order; the stats test shows it too), and one such order is not yet
/// replayed (2.12 pools roundup_power2_divisions:4 seed 12 in the long
/// sweep: 1 of 432). A ratchet.
const UNREPEATED_POOL_GAP_PERCENT: u64 = 1;

/// Private pools under torch 2.10–2.12 (see `UNREPEATED_POOL_GAP_PERCENT`).
fn unrepeated_pool_gap(version: &str, label: &str) -> bool {
    label.starts_with("pools") && ["2.10.0", "2.11.0", "2.12.0"].contains(&version)
}

#[test]
fn recordings_verify_exactly() {
    crate::support::sampled_invariant_checks();
    let mut failures = Vec::new();
    let mut report = Vec::new();
    let mut recordings = 0u64;
    let mut pytorch_errors = std::collections::BTreeSet::new();
    // Private pools under expandable segments: torch 2.12 completes the
    // events of a `c` in an order that varies from run to run, and one such
    // order (1 of 48 recordings with 2 seeds, all releases; not every run)
    // is not yet replayed. A ratchet. Private pools with classic segments
    // are held exact.
    let (mut pool_gap_divergences, mut pool_gap_recordings) = (0u64, 0u64);
    // Expandable segments on a tight device are held exact like every
    // other case: torch 2.4.1's requests that die at its own assert
    // (#119452) leave what their first attempt did, which verify repeats.
    let (mut unrepeated_divergences, mut unrepeated_recordings) = (0u64, 0u64);
    for release in releases() {
        let Some(h) = harness(release) else { continue };
        for conf in SETTINGS {
            for case in cases(conf) {
                let mut bad = Vec::new();
                let n = seeds(2);
                for seed in 0..n {
                    let program = random_program(seed, &case.shape);
                    if std::env::var_os("VK_TRACE_CASES").is_some() { eprintln!("case {release} {} seed {seed}", case.label); }
                    let out = h.record(&program, &case.setup).unwrap_or_else(|e| panic!("{e}"));
                    // PyTorch's own internal errors (2.4 asserts when the targeted
                    // release meets an expandable block) are part of what it did.
                    if let Some((line, e)) = out.errors.first() {
                        pytorch_errors.insert(format!("{release} {}: line {line}: {}", case.label, e.lines().next().unwrap_or("")));
                    }
                    let file = read_recording(out.snapshot.as_deref().unwrap());
                    // What the keys PyTorch wrote say of the release includes the truth.
                    let range = file.release_range().expect("allocator_settings recorded");
                    assert!(range.oldest <= rules(release) && rules(release) <= range.newest, "{release}: the keys say {range}");
                    let mut config = file.recorded_config(Some(rules(release)));
                    if let Some(f) = case.fraction {
                        config.per_process_memory_fraction = f;
                    }
                    recordings += 1;
                    pool_gap_recordings += u64::from(known_pool_gap(&case.label));
                    let unrepeated = unrepeated_pool_gap(release.version, &case.label) && !known_pool_gap(&case.label);
                    unrepeated_recordings += u64::from(unrepeated);
                    for trace in DeviceTrace::split(&file.snapshot) {
                        // The device's memory, as a user knows their GPU's: it sizes
                        // expandable reservations, which the trace does not record.
                        let capacity = case.setup.capacity.unwrap_or(vramkit_pytorch::DEFAULT_CAPACITY);
                        let v = vramkit_replay::verify_with_capacity(&trace, &config, Some(capacity))
                            .unwrap_or_else(|e| panic!("{release} {} seed {seed}: {e}", case.label));
                        if !v.passed() {
                            bad.push(seed);
                            keep_recording(&format!("{} {} {seed}", release.version, case.label), out.snapshot.as_deref().unwrap());
                            if known_pool_gap(&case.label) {
                                pool_gap_divergences += 1;
                            } else if unrepeated {
                                unrepeated_divergences += 1;
                            } else if bad.len() == 1 {
                                failures.push(format!("{release} {} seed {seed}: {:?}", case.label, v.first_divergence));
                            }
                        }
                    }
                }
                if !bad.is_empty() {
                    report.push(format!("{release} {}: {} of {n} diverge (seeds {bad:?})", case.label, bad.len()));
                }
            }
        }
    }
    println!("{recordings} recordings verified\n{}", report.join("\n"));
    println!("PyTorch raised internal errors in {} cases:\n{}", pytorch_errors.len(), pytorch_errors.iter().cloned().collect::<Vec<_>>().join("\n"));
    println!("{pool_gap_divergences} of {pool_gap_recordings} recordings with private pools and expandable segments diverge");
    println!("{unrepeated_divergences} of {unrepeated_recordings} recordings of torch 2.10–2.12 with private pools diverge");
    assert!(
        pool_gap_divergences * 100 <= pool_gap_recordings * POOL_GAP_PERCENT,
        "{pool_gap_divergences} of {pool_gap_recordings} recordings with private pools and expandable segments diverge (ratchet: at most {POOL_GAP_PERCENT}%)"
    );
    assert!(
        unrepeated_divergences * 100 <= unrepeated_recordings * UNREPEATED_POOL_GAP_PERCENT,
        "{unrepeated_divergences} of {unrepeated_recordings} recordings of torch 2.10–2.12 with private pools diverge (ratchet: at most {UNREPEATED_POOL_GAP_PERCENT}%)"
    );
    assert!(failures.is_empty(), "{} cases diverge:\n{}", failures.len(), failures.join("\n"));
}

/// Recordings of the long sweep that once diverged: (release, case, setting,
/// seed), verified wherever the release is among those tested.
const PINNED: &[(&str, &str, &str, u64)] = &[
    // A held block whose free_completed came just before a new segment (no
    // retry ladder ran): freed at the next malloc instead of right after
    // that one, it merged after its neighbour's free, not before.
    ("2.12.0", "tight+streams", "roundup_power2_divisions:4", 14),
    // Held blocks completing in one malloc, freed newest hold first.
    ("2.12.0", "streams", "roundup_power2_divisions:4", 6),
    ("2.12.0", "tight+streams", "max_split_size_mb:128,roundup_power2_divisions:8", 6),
    // Held blocks freed by a synchronisation that released nothing (only
    // their free_completed entries show, every held block's, no request
    // after): freed at the next malloc instead, after a neighbour's free,
    // the other block survived the merge (issue 12).
    ("2.12.0", "pools", "roundup_power2_divisions:4", 12),
    // Private pools, every release to 2.12 (2.13 and 2.15 verified).
    ("2.4.1", "pools", "", 11),
    ("2.4.1", "pools", "roundup_power2_divisions:4", 11),
    ("2.12.0", "pools", "", 11),
    ("2.4.1", "pools", "", 8),
    // Expandable segments with private pools under 2.4, which gives the
    // pools classic segments: a classic segment is a pool's.
    ("2.4.1", "pools", "expandable_segments:True", 3),
    ("2.4.1", "pools", "expandable_segments:True", 9),
    // `empty_cache()` just before a request that needed what it released,
    // under expandable segments on a full device: read as the retry
    // ladder, whose refused first attempt leaves a new reservation that
    // its retry maps, it went there instead of into the unmapped hole.
    ("2.15.0", "tight", "expandable_segments:True,max_split_size_mb:256", 15),
    // Torch 2.4.1 requests that died at its targeted release's assert
    // (#119452) with no trace entry: one left the range its first attempt
    // reserved, which a later request maps at its base; others left pages
    // their first attempt mapped before the next map was refused (no
    // request follows; the request that follows is served from the cache).
    ("2.4.1", "tight", "expandable_segments:True,max_split_size_mb:256", 0),
    ("2.4.1", "tight+streams", "expandable_segments:True,max_split_size_mb:256", 8),
    ("2.4.1", "tight+streams", "expandable_segments:True,max_split_size_mb:256", 14),
];

#[test]
fn pinned_recordings_verify_exactly() {
    crate::support::sampled_invariant_checks();
    let mut failures = Vec::new();
    for &(version, kind, conf, seed) in PINNED {
        let Some(release) = releases().into_iter().find(|r| r.version == version) else { continue };
        let Some(h) = harness(release) else { continue };
        let label = format!("{kind} {conf:?}");
        let case = cases(conf).into_iter().find(|c| c.label == label).unwrap_or_else(|| panic!("no case {label}"));
        let out = h.record(&random_program(seed, &case.shape), &case.setup).unwrap_or_else(|e| panic!("{e}"));
        keep_recording(&format!("{version}-{label}-{seed}"), out.snapshot.as_deref().unwrap());
        let file = read_recording(out.snapshot.as_deref().unwrap());
        let config = file.recorded_config(Some(rules(release)));
        let capacity = case.setup.capacity.unwrap_or(vramkit_pytorch::DEFAULT_CAPACITY);
        for trace in DeviceTrace::split(&file.snapshot) {
            let v = vramkit_replay::verify_with_capacity(&trace, &config, Some(capacity)).unwrap_or_else(|e| panic!("{e}"));
            if !v.passed() {
                failures.push(format!("{version} {label} seed {seed}: {:?}", v.first_divergence));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

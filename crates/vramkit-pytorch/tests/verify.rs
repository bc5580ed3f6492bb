//! `vramkit verify` on PyTorch's own recordings: every placement, segment
//! event and end state exact.

use crate::support::{harness, read_recording, releases, seeds, SETTINGS};
use vramkit_pytorch::{random_program, Setup, Shape};
use vramkit_replay::DeviceTrace;

#[test]
fn recordings_verify_exactly() {
    let mut report = Vec::new();
    for release in releases() {
        let Some(h) = harness(release) else { continue };
        for conf in SETTINGS {
            let mut bad = 0;
            let n = seeds(4);
            for seed in 0..n {
                let shape = Shape { ops: 1200, ..Shape::default() };
                let program = random_program(seed, &shape);
                let setup = Setup { conf: Some(conf.to_string()), ..Setup::default() };
                let out = h.record(&program, &setup).unwrap_or_else(|e| panic!("{e}"));
                assert!(out.errors.is_empty(), "{release} {conf:?} seed {seed}: {:?}", out.errors);
                let file = read_recording(out.snapshot.as_deref().unwrap());
                let config = file.recorded_config(None);
                for trace in DeviceTrace::split(&file.snapshot) {
                    let v = vramkit_replay::verify(&trace, &config).unwrap_or_else(|e| panic!("{e}"));
                    if !v.passed() {
                        bad += 1;
                        if bad == 1 {
                            report.push(format!("{release} {conf:?} seed {seed}: {:?}", v.first_divergence));
                        }
                    }
                }
            }
            report.push(format!("{release} {conf:?}: {bad} of {n} diverge"));
        }
    }
    println!("{}", report.join("\n"));
}

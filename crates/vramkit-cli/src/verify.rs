//! `vramkit verify`: does vramkit's allocator make PyTorch's decisions?
//!
//! The allocator rules follow the release that wrote the snapshot: the one
//! `--pytorch` names, else the releases the snapshot's keys allow; where
//! those differ in rules, each is tried, newest first, and the first that
//! verifies is kept (the output says which).

use crate::cli::VerifyArgs;
use crate::input::{given_release, load_traces, parse_size, print_devices, CliError};
use std::io::Write;
use std::process::ExitCode;
use vramkit_core::PytorchRelease;
use vramkit_replay::{DeviceTrace, PreparedTrace, VerifyReport};
use vramkit_trace::TraceFile;

pub fn run(args: VerifyArgs) -> Result<ExitCode, CliError> {
    let file = load_traces(&args.snapshot)?;
    let capacity = args.capacity.as_deref().map(parse_size).transpose()?;
    if let Some(f) = args.fraction {
        if !(f > 0.0 && f <= 1.0) {
            return Err(CliError::new(format!("--fraction {f}: a memory fraction is above 0 and at most 1, e.g. 0.5")));
        }
    }
    // The release is checked after the devices (a file without events says so first).
    let given = given_release(&args.rules);
    let (candidates, why) = candidates(&file, given.as_ref().ok().copied().flatten());
    let configs: Vec<_> = candidates.iter().map(|&release| file.recorded_config(release)).collect();
    let devices: Vec<DeviceTrace> = DeviceTrace::split_file(file).into_iter().filter(DeviceTrace::has_events).collect();
    if devices.is_empty() {
        return Err(CliError::new(format!(
            "{}: the snapshot has no allocation events to verify (record it with torch.cuda.memory._record_memory_history(enabled=\"all\"))",
            args.snapshot.display()
        )));
    }
    given?;
    let mut chosen = None;
    for (&release, mut config) in candidates.iter().zip(configs) {
        if let Some(f) = args.fraction {
            config.per_process_memory_fraction = f;
        }
        let mut reports = Vec::new();
        for d in &devices {
            let verified = PreparedTrace::new(d, config.clone(), capacity).and_then(|p| p.verify());
            reports.push(verified.map_err(|e| CliError::new(format!("{}: {e}", args.snapshot.display())))?);
        }
        let passed = reports.iter().all(VerifyReport::passed);
        if chosen.is_none() || passed {
            chosen = Some((release, reports));
        }
        if passed {
            break;
        }
    }
    let (release, reports) = chosen.expect("at least one candidate");
    let rules = describe(release, &candidates, &why);
    let passed = reports.iter().all(|r| r.passed());
    if args.json {
        let values = reports
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).expect("serialisable");
                v["pytorch_rules"] = serde_json::Value::String(release.map_or("default".into(), |r| r.to_string()));
                v["rules"] = serde_json::Value::String(rules.clone());
                v
            })
            .collect();
        print_devices(values)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{rules}")?;
        for r in &reports {
            writeln!(
                out,
                "device {}: {}/{} allocations placed where PyTorch placed them ({:.2}%), segment events {} ({} recorded, {} predicted), end state {}",
                r.device,
                r.placed_same,
                r.alloc_events,
                100.0 * r.match_rate,
                if r.segment_events_identical { "identical" } else { "differ" },
                r.segment_events_recorded,
                r.segment_events_predicted,
                if r.end_state_identical { "identical" } else { "differs" },
            )?;
            if r.trace_cut {
                writeln!(out, "  the trace stops before the snapshot's state; allocations it never frees were freed before comparing")?;
            }
            if let Some(d) = &r.first_divergence {
                writeln!(out, "  first divergence ({}): PyTorch {}, vramkit {}", d.kind, d.expected, d.got)?;
                for line in &d.context {
                    writeln!(out, "    {line}")?;
                }
            }
        }
        writeln!(out, "{}", if passed { "verify: PASS" } else { "verify: FAIL" })?;
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The releases whose rules to try, newest first (`None`: vramkit's
/// defaults), and what chose them.
fn candidates(file: &TraceFile, given: Option<PytorchRelease>) -> (Vec<Option<PytorchRelease>>, String) {
    if let Some(r) = given {
        return (vec![Some(r)], "--pytorch".into());
    }
    match file.release_range() {
        Some(range) => {
            let why = format!("the snapshot's keys say {range}");
            (range.distinct_rules().into_iter().map(Some).collect(), why)
        }
        None => (vec![None], "the snapshot does not say which release wrote it; --pytorch names one".into()),
    }
}

fn describe(release: Option<PytorchRelease>, candidates: &[Option<PytorchRelease>], why: &str) -> String {
    let rules = release.unwrap_or(PytorchRelease::DEFAULT_RULES).rules();
    match release {
        None => format!("rules: torch {}'s, vramkit's default ({why}): {rules}", PytorchRelease::DEFAULT_RULES),
        Some(r) if candidates.len() > 1 => {
            let others: Vec<String> = candidates.iter().flatten().filter(|&&c| c != r).map(|c| c.to_string()).collect();
            format!("rules: torch {r}'s ({why}; also tried {}'s): {rules}", others.join(", "))
        }
        Some(r) => format!("rules: torch {r}'s ({why}): {rules}"),
    }
}

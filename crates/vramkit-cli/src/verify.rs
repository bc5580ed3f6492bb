//! `vramkit verify`: does vramkit's allocator make PyTorch's decisions?

use crate::cli::VerifyArgs;
use crate::input::{load, print_devices, recorded_config, CliError};
use std::io::Write;
use std::process::ExitCode;
use vramkit_replay::{verify, DeviceTrace};

pub fn run(args: VerifyArgs) -> Result<ExitCode, CliError> {
    let file = load(&args.snapshot)?;
    let config = recorded_config(&file);
    let devices: Vec<DeviceTrace> = DeviceTrace::split(&file.snapshot).into_iter().filter(DeviceTrace::has_events).collect();
    if devices.is_empty() {
        return Err(CliError::new(format!(
            "{}: the snapshot has no allocation events to verify (record it with torch.cuda.memory._record_memory_history(enabled=\"all\"))",
            args.snapshot.display()
        )));
    }
    let mut reports = Vec::new();
    for d in &devices {
        reports.push(verify(d, &config).map_err(|e| CliError::new(format!("{}: {e}", args.snapshot.display())))?);
    }
    let passed = reports.iter().all(|r| r.passed());
    if args.json {
        print_devices(reports.iter().map(|r| serde_json::to_value(r).expect("serialisable")).collect())?;
    } else {
        let mut out = std::io::stdout().lock();
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

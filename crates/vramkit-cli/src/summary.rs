//! `vramkit summary`: PyTorch's memory_summary() for the snapshot's state.

use crate::cli::SummaryArgs;
use crate::input::{load_traces, print_devices, recorded_config, CliError};
use std::io::Write;
use std::process::ExitCode;
use vramkit_core::{memory_summary, SummaryLayout};
use vramkit_replay::{stats_from_segments, DeviceTrace};

pub fn run(args: SummaryArgs) -> Result<ExitCode, CliError> {
    let file = load_traces(&args.snapshot)?;
    let config = recorded_config(&file, &Default::default())?;
    let devices = DeviceTrace::split_file(file);
    if devices.is_empty() {
        return Err(CliError::new(format!("{}: the snapshot has no segments and no trace", args.snapshot.display())));
    }
    if args.json {
        let values = devices
            .iter()
            .map(|d| {
                let stats = stats_from_segments(&d.end_segments, config.max_split_size_bytes);
                serde_json::json!({ "device": d.device, "memory_stats": stats.to_map() })
            })
            .collect();
        print_devices(values)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    for d in &devices {
        let stats = stats_from_segments(&d.end_segments, config.max_split_size_bytes);
        write!(out, "{}", memory_summary(&stats, d.device, args.abbreviated, SummaryLayout::default()))?;
    }
    writeln!(out, "(State at snapshot time: peak and total columns count only what the snapshot holds.)")?;
    Ok(ExitCode::SUCCESS)
}

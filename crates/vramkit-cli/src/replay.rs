//! `vramkit replay`: peak memory under any settings (or as recorded).

use crate::cli::ReplayArgs;
use crate::input::{capacity_for, load_traces, parse_size, prepare, print_devices, recorded_config, CliError};
use std::io::Write;
use std::process::ExitCode;
use vramkit_core::AllocatorConfig;
use vramkit_replay::{DeviceTrace, Metrics};

pub fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    let file = load_traces(&args.snapshot)?;
    let recorded = recorded_config(&file, &args.rules)?;
    let (conf, config) = match &args.conf {
        Some(c) => (c.clone(), AllocatorConfig::parse(c).map_err(|e| CliError::new(format!("--conf {c:?}: {e}")))?),
        None => (recorded.to_conf_string(), recorded.clone()),
    };
    if args.oracle && args.conf.is_some() {
        return Err(CliError::new("--oracle follows what PyTorch did under the recorded settings; leave out --conf"));
    }
    let given = args.capacity.as_deref().map(parse_size).transpose()?;
    let devices: Vec<DeviceTrace> = DeviceTrace::split_file(file).into_iter().filter(DeviceTrace::has_events).collect();
    if devices.is_empty() {
        return Err(CliError::new(format!(
            "{}: the snapshot has no allocation events to replay (record it with torch.cuda.memory._record_memory_history(enabled=\"all\")); `vramkit summary` reads state-only snapshots",
            args.snapshot.display()
        )));
    }
    let mut values = Vec::new();
    let mut human = Vec::new();
    for d in &devices {
        let fail = |e: vramkit_replay::ReplayError| CliError::new(format!("{}: {e}", args.snapshot.display()));
        let prepared = prepare(d, &recorded, &args.snapshot)?;
        let (capacity, source) = capacity_for(&prepared, given);
        let spinner = crate::progress::spinner(&format!("replaying {} events", d.events.len()));
        let m: Metrics = if args.oracle {
            prepared.oracle_replay(0)
        } else {
            // What `vramkit tune` evaluates each candidate with.
            prepared.model_replay(&config, capacity, 0).map_err(fail)?
        };
        spinner.finish_and_clear();
        let mut v = serde_json::json!({
            "device": d.device,
            "conf": conf,
            "mode": if args.oracle { "oracle" } else { "model" },
            "events": m.events,
            "peak_reserved_bytes": m.peak_reserved_bytes,
            "peak_allocated_bytes": m.peak_allocated_bytes,
            "peak_requested_bytes": m.peak_requested_bytes,
            "lower_bound_bytes": m.lower_bound_bytes,
            "utilization": m.utilization,
            "device_mallocs": m.device_mallocs,
            "device_frees": m.device_frees,
            "first_oom_event": m.first_oom_event,
            "oom_count": m.oom_count,
            "peak_inactive_split_bytes": m.peak_inactive_split_bytes,
            "waste_bytes_at_peak": m.waste_bytes_at_peak,
            "capacity_bytes": capacity,
            "capacity_source": source,
        });
        if args.oracle {
            v["capacity_bytes"] = serde_json::Value::Null;
            v["capacity_source"] = "not used by the oracle".into();
        }
        human.push((d.device, m, capacity, source));
        values.push(v);
    }
    if args.json {
        print_devices(values)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    for (device, m, capacity, source) in human {
        writeln!(
            out,
            "device {device}: {} replay of {} events under PYTORCH_CUDA_ALLOC_CONF={:?}",
            if args.oracle { "oracle" } else { "model" },
            m.events,
            conf
        )?;
        writeln!(out, "  peak reserved   {:>10.3} GiB", gib(m.peak_reserved_bytes))?;
        writeln!(out, "  peak allocated  {:>10.3} GiB  (utilization {:.1}%)", gib(m.peak_allocated_bytes), 100.0 * m.utilization)?;
        writeln!(out, "  peak requested  {:>10.3} GiB", gib(m.peak_requested_bytes))?;
        writeln!(out, "  lower bound     {:>10.3} GiB  (peak of live bytes; no setting can reserve less)", gib(m.lower_bound_bytes))?;
        writeln!(out, "  device calls    {} mallocs, {} frees", m.device_mallocs, m.device_frees)?;
        match (capacity, m.first_oom_event) {
            (Some(c), Some(e)) => writeln!(out, "  capacity {:.3} GiB ({source}): first out-of-memory at event {e} ({} in all)", gib(c), m.oom_count)?,
            (Some(c), None) => writeln!(out, "  capacity {:.3} GiB ({source}): fits", gib(c))?,
            (None, _) => writeln!(out, "  capacity: unlimited")?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

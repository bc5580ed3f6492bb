//! `vramkit run`'s output for people: the program and card, what `doctor` says, then whether it
//! fits, where it ran out, the best settings for the card, the `--batch` table, and the limits.

use super::result::{Batch, Run, RunReport};
use std::fmt;
use vramkit_core::format_size;
use vramkit_replay::tune::{describe_conf, show_conf};

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gpu = &self.gpu;
        writeln!(f, "vramkit run: {}", self.command.join(" "))?;
        writeln!(
            f,
            "  GPU: {}, {} (simulated{})",
            gpu.name,
            format_size(gpu.total_bytes),
            if gpu.default { "; the default GPU: choose another with --gpu" } else { "" }
        )?;
        writeln!(f, "  torch {}, settings: {}", self.torch, describe_conf(&self.conf))?;
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        if let Some(d) = &self.diagnosis {
            writeln!(f)?;
            match (&self.batch, self.runs[self.reported_run].value) {
                (Some(b), Some(v)) => writeln!(f, "What `vramkit doctor` finds in the snapshot of {}={v}:", b.variable)?,
                _ => writeln!(f, "What `vramkit doctor` finds in the snapshot:")?,
            }
            write!(f, "{d}")?;
        }
        writeln!(f)?;
        let reserve = match gpu.reserve_bytes {
            0 => "nothing reserved outside PyTorch".to_string(),
            r => format!("less {} reserved outside PyTorch", format_size(r)),
        };
        writeln!(f, "On the {}: {} usable (the card's {}, {reserve}):", gpu.name, format_size(gpu.usable_bytes), format_size(gpu.total_bytes))?;
        match &self.batch {
            Some(b) => self.fmt_batch(f, b)?,
            None => self.fmt_single(f)?,
        }
        match &self.snapshot {
            Some(p) => writeln!(f, "  Snapshot: {} (open it in https://pytorch.org/memory_viz, or `vramkit report`)", p.display())?,
            None => writeln!(f, "  (pass -o snap.pickle to keep the snapshot)")?,
        }
        writeln!(f)?;
        writeln!(f, "What the simulation cannot know: {}.", self.limits)
    }
}

impl RunReport {
    fn fmt_single(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let run = &self.runs[self.reported_run];
        match run.result {
            "fits" => writeln!(f, "  It fits: {}.", self.peak_words(run))?,
            "out of memory" => self.fmt_oom(f)?,
            _ => writeln!(f, "  The program failed: {}.", run.failure.as_deref().unwrap_or("?"))?,
        }
        let Some(r) = &self.recommended else {
            if self.diagnosis.is_some() {
                writeln!(f, "  Best PYTORCH_CUDA_ALLOC_CONF for this GPU: your settings ({}); no setting tried does better.", describe_conf(&self.conf))?;
            }
            return Ok(());
        };
        writeln!(
            f,
            "  Best PYTORCH_CUDA_ALLOC_CONF for this GPU: \"{}\" (replayed: peak reserved {}, {}).",
            r.conf,
            format_size(r.predicted_peak_reserved_bytes),
            self.headroom_words(r.predicted_peak_reserved_bytes)
        )?;
        if let Some(checked) = r.checked_run.map(|i| &self.runs[i]) {
            match checked.result {
                "fits" => writeln!(f, "  Checked by running the program again with it: it fits: {}.", self.peak_words(checked))?,
                "out of memory" => writeln!(f, "  Checked by running the program again with it: it still runs out of memory (the replay covered the program only up to the error).")?,
                _ => writeln!(f, "  Running the program again with it failed: {}.", checked.failure.as_deref().unwrap_or("?"))?,
            }
        }
        Ok(())
    }

    fn fmt_batch(&self, f: &mut fmt::Formatter<'_>, b: &Batch) -> fmt::Result {
        let rows: Vec<&Run> = self.runs.iter().filter(|r| !r.recorded).collect();
        let width = rows.iter().map(|r| show_conf(&r.conf).len()).max().unwrap_or(0).max("PYTORCH_CUDA_ALLOC_CONF".len());
        writeln!(f, "  {:>8}  {:<width$}  {:>13}  result", b.variable, "PYTORCH_CUDA_ALLOC_CONF", "peak reserved")?;
        for run in rows {
            let value = run.value.map_or("-".to_string(), |v| v.to_string());
            writeln!(f, "  {value:>8}  {:<width$}  {:>13}  {}", show_conf(&run.conf), format_size(run.peak_reserved_bytes), run.result)?;
        }
        let largest = |fit: Option<u64>, oom: Option<u64>, conf: &str| -> Option<String> {
            let var = &b.variable;
            let run = fit.and_then(|v| self.runs.iter().find(|r| r.value == Some(v) && r.conf == conf && r.fits()));
            let headroom = run.map_or(String::new(), |r| format!(", {}", self.headroom_words(r.peak_reserved_bytes)));
            Some(match (fit, oom) {
                (None, Some(o)) => format!("even {var}={o} runs out of memory"),
                (Some(v), Some(o)) => format!("{var}={v} fits{headroom}; {var}={o} runs out of memory"),
                (Some(v), None) => format!("{var}={v} fits{headroom}; it is the largest value tried: widen {} to look further", b.values),
                (None, None) => return None,
            })
        };
        if let Some(s) = largest(b.largest_fit, b.smallest_oom, &self.conf) {
            writeln!(f, "  With your settings ({}): {s}.", describe_conf(&self.conf))?;
        }
        match &b.best_conf {
            Some(best) => {
                if let Some(s) = largest(b.largest_fit_best.or(b.largest_fit), b.smallest_oom_best, best) {
                    writeln!(f, "  With the best settings for this GPU, PYTORCH_CUDA_ALLOC_CONF=\"{best}\": {s}.")?;
                }
            }
            None if self.diagnosis.is_some() => writeln!(f, "  Your settings are the best for this GPU of those vramkit tried.")?,
            None => {}
        }
        self.fmt_oom(f)?;
        if let Some(run) = self.runs.iter().find(|r| r.result == "failed") {
            writeln!(f, "  The search stopped: at {}={} {}.", b.variable, run.value.unwrap_or(0), run.failure.as_deref().unwrap_or("the run failed"))?;
        }
        Ok(())
    }

    /// PyTorch's message and the program's line.
    fn fmt_oom(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(o) = &self.oom else { return Ok(()) };
        let run = &self.runs[o.run];
        let at = run.value.map_or(String::new(), |v| format!(" at {}={v}", self.batch.as_ref().map_or("", |b| &b.variable)));
        writeln!(f, "  It ran out of memory{at} (peak reserved {}): {}", format_size(run.peak_reserved_bytes), o.message.as_deref().unwrap_or("(PyTorch's message was not raised into Python)"))?;
        match &o.location {
            Some(l) => writeln!(f, "  Where: {l}"),
            None => writeln!(f, "  Where: no Python frame recorded for the {} request", format_size(o.requested_bytes)),
        }
    }

    /// "peak reserved 3.48 GiB (peak allocated 3.35 GiB), with 75.78 GiB of headroom (95.6% of usable memory)"
    fn peak_words(&self, run: &Run) -> String {
        format!(
            "peak reserved {} (peak allocated {}), {}",
            format_size(run.peak_reserved_bytes),
            format_size(run.peak_allocated_bytes),
            self.headroom_words(run.peak_reserved_bytes)
        )
    }

    fn headroom_words(&self, peak_reserved: u64) -> String {
        let usable = self.gpu.usable_bytes;
        let left = usable.saturating_sub(peak_reserved);
        format!("with {} of headroom ({:.1}% of usable memory)", format_size(left), 100.0 * left as f64 / usable.max(1) as f64)
    }
}

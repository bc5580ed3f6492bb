//! The page: inline CSS, the SVG charts, tables and the doctor's text.

use super::escape::escape;
use super::svg::{self, Level, Series};
use super::{Report, Run};
use crate::doctor::Site;
use crate::tune::{describe_conf, show_conf, TABLE_ROWS};
use std::fmt::Write;
use vramkit_core::format_size;

const STYLE: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #111827; background: #f9fafb; }
header { background: #111827; color: white; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header p { margin: 0; color: #d1d5db; font-size: 13px; }
header code { background: #374151; color: #f9fafb; }
main { padding: 16px 32px 40px 32px; max-width: 1400px; }
section { background: white; border: 1px solid #e5e7eb; border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 17px; margin: 0 0 10px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; background: none; border: none; padding: 0; }
.card { background: white; border: 1px solid #e5e7eb; border-radius: 8px; padding: 12px 16px; min-width: 190px; }
.card .v { font-size: 22px; font-weight: 600; }
.card .k { font-size: 12px; color: #6b7280; }
.good { color: #047857; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #f3f4f6; text-align: left; vertical-align: top; }
th { color: #374151; background: #f9fafb; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.best td { background: #ecfdf5; }
tr.recorded td { background: #eff6ff; }
code { font-size: 12px; background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
pre { white-space: pre-wrap; font-size: 13px; line-height: 1.45; background: #f9fafb; padding: 12px; border-radius: 6px; }
.legend span { display: inline-block; margin-right: 16px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 5px; vertical-align: -2px; border-radius: 2px; }
.note { color: #6b7280; font-size: 12px; }
svg { max-width: 100%; height: auto; }
"#;

/// The whole page.
pub fn page(r: &Report) -> String {
    let mut out = String::with_capacity(256 << 10);
    let title = format!("vramkit report: {}", r.label);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{STYLE}</style></head><body>",
        escape(&title)
    );
    let recorded_conf = r.diagnosis.recorded_conf.as_str();
    let capacity = r.capacity_bytes.map_or("unlimited".to_string(), format_size);
    let _ = write!(
        out,
        "<header><h1>{}</h1><p>device {} &middot; {} trace entries &middot; recorded with PYTORCH_CUDA_ALLOC_CONF=<code>{}</code> &middot; capacity {} &middot; vramkit {}</p></header><main>",
        escape(&title),
        r.device,
        r.events,
        escape(show_conf(recorded_conf)),
        escape(&capacity),
        env!("CARGO_PKG_VERSION")
    );
    cards(&mut out, r);
    timeline(&mut out, r);
    maps(&mut out, r);
    sites(&mut out, r);
    tune_table(&mut out, r);
    let _ = write!(out, "<section id=\"doctor\"><h2>Doctor</h2><pre>{}</pre></section>", escape(&r.doctor_text));
    out.push_str("<p class=\"note\">Made by vramkit from the snapshot alone: the replays run vramkit's model of PyTorch's CUDA caching allocator. This page loads nothing from the network.</p></main></body></html>\n");
    out
}

fn card(out: &mut String, value: &str, key: &str, class: &str) {
    let _ = write!(out, "<div class=\"card\"><div class=\"v {class}\">{}</div><div class=\"k\">{}</div></div>", escape(value), escape(key));
}

fn cards(out: &mut String, r: &Report) {
    out.push_str("<section class=\"cards\">");
    let m = &r.diagnosis.memory;
    match (&r.recorded, &r.tune) {
        (Some(rec), Some(t)) => {
            card(out, &format_size(rec.metrics.peak_reserved_bytes), "peak reserved, recorded settings", "");
            card(out, &format_size(t.best.peak_reserved_bytes), "peak reserved, recommended settings", "good");
            card(out, &format!("{} ({:.1}%)", format_size(t.saving_bytes.unsigned_abs()), t.saving_percent), "saving at the peak", "good");
            card(out, &format_size(t.lower_bound_bytes), "lower bound (no setting reserves less)", "");
            card(out, &format_size(rec.metrics.peak_allocated_bytes), "peak allocated", "");
        }
        (Some(rec), None) => {
            card(out, &format_size(rec.metrics.peak_reserved_bytes), "peak reserved, recorded settings", "");
            card(out, &format_size(rec.metrics.peak_allocated_bytes), "peak allocated", "");
        }
        _ => {}
    }
    card(out, &format_size(m.reserved_bytes), "reserved at snapshot time", "");
    card(out, &format_size(m.allocated_bytes), "allocated at snapshot time", "");
    out.push_str("</section>");
    if let Some(t) = &r.tune {
        let _ = write!(
            out,
            "<section id=\"recommendation\"><h2>Recommendation</h2><p>{}</p><p class=\"note\">{} settings replayed; {}.</p></section>",
            if t.recommended.is_empty() {
                "Leave PYTORCH_CUDA_ALLOC_CONF unset (PyTorch's defaults).".to_string()
            } else {
                format!("PYTORCH_CUDA_ALLOC_CONF=<code>{}</code>", escape(&t.recommended))
            },
            t.candidates.len(),
            if t.recommended == t.recorded.conf {
                "the recorded settings are already the best of those tried".to_string()
            } else {
                format!("{} less at the peak than the recorded settings, {}", format_size(t.saving_bytes.unsigned_abs()), escape(&describe_conf(&t.recorded.conf)))
            }
        );
    }
}

fn series_of<'a>(run: &Run, which: &'a str, color: &'a str, reserved: bool, dashed: bool) -> Series<'a> {
    Series {
        name: which,
        color,
        dashed,
        points: run
            .metrics
            .timeline
            .iter()
            .map(|s| (s.event, if reserved { s.reserved_bytes } else { s.allocated_bytes }))
            .collect(),
    }
}

fn timeline(out: &mut String, r: &Report) {
    out.push_str("<section id=\"memory-over-time\"><h2>Memory over time</h2>");
    let Some(rec) = &r.recorded else {
        out.push_str("<p class=\"note\">The snapshot holds no allocation events (state only), so there is no timeline. Record with <code>torch.cuda.memory._record_memory_history(enabled=\"all\")</code> to get one.</p></section>");
        return;
    };
    let mut series = vec![
        series_of(rec, "reserved, recorded", "#1d4ed8", true, false),
        series_of(rec, "allocated, recorded", "#93c5fd", false, false),
    ];
    if let Some(b) = &r.recommended {
        series.push(series_of(b, "reserved, recommended", "#059669", true, false));
        series.push(series_of(b, "allocated, recommended", "#6ee7b7", false, true));
    }
    let mut levels = Vec::new();
    if let Some(t) = &r.tune {
        levels.push(Level { label: "lower bound", color: "#6b7280", bytes: t.lower_bound_bytes });
    }
    if let Some(c) = r.capacity_bytes {
        levels.push(Level { label: "capacity", color: "#dc2626", bytes: c });
    }
    out.push_str(&svg::line_chart("timeline", "Allocated and reserved bytes over the trace", &series, &levels, 1300, 420));
    let _ = write!(
        out,
        "<p class=\"note\">{} trace entries drawn as {} points per line; every bucket keeps its highest reserved and allocated sample, so no peak is dropped. Dots mark each line's peak.</p></section>",
        r.events,
        rec.metrics.timeline.len()
    );
}

fn legend(out: &mut String) {
    let _ = write!(
        out,
        "<p class=\"legend\"><span><i style=\"background:{}\"></i>allocated</span><span><i style=\"background:{}\"></i>freed, waiting on another stream</span><span><i style=\"background:{}\"></i>free inside a partly used segment</span><span><i style=\"background:{}\"></i>free segment (cached, empty)</span></p>",
        svg::ALLOCATED,
        svg::PENDING,
        svg::FREE_SPLIT,
        svg::FREE_SEGMENT
    );
}

/// One run's segment map at its peak, with its heading.
fn run_map(out: &mut String, label: &str, id: &str, run: &Run) {
    let _ = write!(
        out,
        "<h3>{label} settings (<code>{}</code>): {} in {} segments after trace entry {}</h3>",
        escape(show_conf(&run.conf)),
        format_size(run.metrics.peak_reserved_bytes),
        run.peak.segments.len(),
        run.peak.event
    );
    out.push_str(&svg::segment_map(id, &run.peak.segments, 1300));
}

fn maps(out: &mut String, r: &Report) {
    let heading = if r.recorded.is_some() { "Segments at the peak" } else { "Segments at snapshot time" };
    let _ = write!(out, "<section id=\"segments\"><h2>{heading}</h2>");
    legend(out);
    match &r.recorded {
        Some(rec) => {
            run_map(out, "Recorded", "segment-map-recorded", rec);
            if let Some(b) = &r.recommended {
                run_map(out, "Recommended", "segment-map-recommended", b);
            }
        }
        None => {
            let _ = write!(
                out,
                "<h3>No events, so no peak to find: {} in {} segments</h3>",
                format_size(r.diagnosis.memory.reserved_bytes),
                r.end_segments.len()
            );
            out.push_str(&svg::segment_map("segment-map-recorded", &r.end_segments, 1300));
        }
    }
    out.push_str("<p class=\"note\">Each segment is a box, in address order, drawn to scale; hover one for its address and size.</p></section>");
}

fn sites(out: &mut String, r: &Report) {
    let when = if r.sites_at_peak { "at the recorded peak" } else { "at snapshot time" };
    let _ = write!(out, "<section id=\"sites\"><h2>Top allocation sites {when}</h2>");
    if r.sites.is_empty() || r.sites.iter().all(|s| s.site.starts_with('(')) {
        out.push_str("<p class=\"note\">No stacks were recorded; record with <code>torch.cuda.memory._record_memory_history(enabled=\"all\", context=\"all\", stacks=\"python\")</code> to name the sites.</p>");
    }
    if !r.sites.is_empty() {
        out.push_str("<table><tr><th>bytes</th><th>requested</th><th>blocks</th><th>site</th></tr>");
        site_rows(out, &r.sites);
        out.push_str("</table>");
    }
    out.push_str("</section>");
}

fn site_rows(out: &mut String, sites: &[Site]) {
    for s in sites {
        let _ = write!(
            out,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            format_size(s.bytes),
            format_size(s.requested_bytes),
            s.block_count,
            escape(&s.site)
        );
    }
}

fn tune_table(out: &mut String, r: &Report) {
    out.push_str("<section id=\"tune\"><h2>Settings tried</h2>");
    let Some(t) = &r.tune else {
        out.push_str("<p class=\"note\">Settings can only be compared by replaying allocation events; this snapshot has none.</p></section>");
        return;
    };
    out.push_str("<table><tr><th>rank</th><th>peak reserved</th><th>vs recorded</th><th>device calls</th><th>OOM</th><th>PYTORCH_CUDA_ALLOC_CONF</th></tr>");
    // The rows `vramkit tune` lists (a stopped replay's figures are only
    // what it had reached; which replays beyond those rows ran to the end
    // depends on the threads' timing).
    for o in t.candidates.iter().filter(|o| t.shows(o, TABLE_ROWS)) {
        let class = if o.rank == 1 {
            " class=\"best\""
        } else if o.conf == t.recorded.conf {
            " class=\"recorded\""
        } else {
            ""
        };
        let versus = if t.recorded.peak_reserved_bytes == 0 || o.error.is_some() {
            "-".to_string()
        } else {
            format!("{:+.1}%", 100.0 * (o.peak_reserved_bytes as f64 / t.recorded.peak_reserved_bytes as f64 - 1.0))
        };
        let peak = if o.error.is_some() { "failed".to_string() } else { format_size(o.peak_reserved_bytes) };
        let _ = write!(
            out,
            "<tr{class}><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td><code>{}</code>{}</td></tr>",
            o.rank,
            peak,
            versus,
            o.device_calls,
            if o.oom { "yes" } else { "no" },
            escape(show_conf(&o.conf)),
            if o.conf == t.recorded.conf { " (recorded)" } else { "" }
        );
    }
    out.push_str("</table>");
    let more = t.candidates.iter().filter(|o| !t.shows(o, TABLE_ROWS)).count();
    if more > 0 {
        let _ = write!(
            out,
            "<p class=\"note\">{more} more settings rank below these (most replays stopped once they could no longer rank among them: they had reserved more than these did at their peaks). <code>vramkit tune --all</code> replays every one to the end.</p>"
        );
    }
    out.push_str("</section>");
}

//! `report`: one self-contained HTML page about a snapshot.
//!
//! # Architecture
//! [`build`] gathers the figures: a model replay under the recorded
//! settings and one under the recommended settings (from a `tune` result),
//! each keeping a downsampled timeline and the segments at its peak; the
//! allocation sites live at the recorded peak; the tune table and the
//! doctor text. [`Report::to_html`] renders them: `svg.rs` draws the charts
//! by hand, `html.rs` lays out the page. The page has no script and loads
//! nothing, so it opens anywhere, offline, and the drawing stays small on
//! traces of millions of entries (timelines keep about
//! [`TIMELINE_POINTS`] samples, always with each bucket's peaks).

mod escape;
mod html;
pub mod svg;

pub use escape::escape;

use crate::doctor::{site_name, Diagnosis, Site};
use crate::model::PeakState;
use crate::prepared::PreparedTrace;
use crate::tune::TuneResult;
use crate::{Metrics, ReplayError};
use std::collections::HashMap;
use vramkit_core::rounding::round_size;
use vramkit_core::{AllocatorConfig, Frame, Frames, SegmentInfo, TraceAction};

/// Samples kept per timeline (about).
pub const TIMELINE_POINTS: usize = 2000;
/// Sites listed.
const TOP_SITES: usize = 15;

/// What a report is about.
#[derive(Clone, Debug)]
pub struct ReportInput<'a> {
    /// The snapshot's name.
    pub label: String,
    /// The device trace (with or without events), prepared under its recorded settings.
    pub prepared: &'a PreparedTrace<'a>,
    /// The capacity replays ran against.
    pub capacity_bytes: Option<u64>,
    /// The tune result, when the trace has events.
    pub tune: Option<&'a TuneResult>,
    /// The doctor's diagnosis.
    pub diagnosis: &'a Diagnosis,
}

/// One replay drawn in the report.
#[derive(Clone, Debug)]
pub struct Run {
    /// The settings string.
    pub conf: String,
    /// Its figures, with the timeline.
    pub metrics: Metrics,
    /// The state at its peak.
    pub peak: PeakState,
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct Report {
    /// The snapshot's name.
    pub label: String,
    /// Device index.
    pub device: i64,
    /// Trace entries.
    pub events: u64,
    /// The capacity replays ran against.
    pub capacity_bytes: Option<u64>,
    /// Under the recorded settings (snapshots with events).
    pub recorded: Option<Run>,
    /// Under the recommended settings, when they differ.
    pub recommended: Option<Run>,
    /// The snapshot's own segments (what a state-only report maps).
    pub end_segments: Vec<SegmentInfo>,
    /// Sites live at the recorded peak (or at snapshot time without events).
    pub sites: Vec<Site>,
    /// Whether `sites` are at the peak (else at snapshot time).
    pub sites_at_peak: bool,
    /// The tune result.
    pub tune: Option<TuneResult>,
    /// The doctor's text.
    pub doctor_text: String,
    /// The diagnosis the text was written from.
    pub diagnosis: Diagnosis,
}

/// Runs the replays the page draws and collects the rest.
pub fn build(input: &ReportInput<'_>) -> Result<Report, ReplayError> {
    let (prepared, trace) = (input.prepared, input.prepared.trace());
    // The tune may have drawn it already (`TuneOptions::timeline_points`).
    let drawn = |config: &AllocatorConfig| {
        input.tune.filter(|t| t.capacity_bytes == input.capacity_bytes).and_then(|t| {
            t.drawn.iter().find(|d| d.config == *config && d.timeline_points == TIMELINE_POINTS)
        })
    };
    let replay = |conf: &str, config: AllocatorConfig| -> Result<Run, ReplayError> {
        let (metrics, peak) = match drawn(&config) {
            Some(d) => (d.metrics.clone(), d.peak.clone()),
            None => prepared.model_replay_at_peak(&config, input.capacity_bytes, TIMELINE_POINTS)?,
        };
        Ok(Run { conf: conf.to_string(), metrics, peak })
    };
    let (mut recorded, mut recommended, mut sites, mut sites_at_peak) = (None, None, input.diagnosis.top_sites_by_bytes.clone(), false);
    if trace.has_allocations() {
        // Judged once here, not in both replays at the same time.
        prepared.reading()?;
        let recorded_conf = prepared.recorded().to_conf_string();
        let other = input.tune.filter(|t| t.recommended != t.recorded.conf).map(|t| t.recommended.clone());
        let (a, b) = rayon::join(
            || replay(&recorded_conf, prepared.recorded().clone()),
            || {
                other.as_ref().map(|conf| {
                    let config = AllocatorConfig::parse(conf).map_err(|e| ReplayError::Model(e.to_string()))?;
                    replay(conf, config)
                })
            },
        );
        let a = a?;
        sites = live_sites_at(prepared, a.peak.event, TOP_SITES);
        sites_at_peak = true;
        recorded = Some(a);
        recommended = b.transpose()?;
    }
    Ok(Report {
        label: input.label.clone(),
        device: trace.device,
        events: trace.events.len() as u64,
        capacity_bytes: input.capacity_bytes,
        recorded,
        recommended,
        end_segments: trace.end_segments.clone(),
        sites,
        sites_at_peak,
        tune: input.tune.cloned(),
        doctor_text: input.diagnosis.to_string(),
        diagnosis: input.diagnosis.clone(),
    })
}

impl Report {
    /// The page.
    pub fn to_html(&self) -> String {
        html::page(self)
    }
}

/// The allocation sites of the blocks live after the first `event` trace
/// entries: blocks of the rebuilt start state, plus allocations not yet
/// completely freed. Bytes are rounded request sizes.
pub fn live_sites_at(prepared: &PreparedTrace<'_>, event: u64, top: usize) -> Vec<Site> {
    let (trace, recorded) = (prepared.trace(), prepared.recorded());
    let mut live: HashMap<u64, (u64, u64, Option<Frames>)> = HashMap::new();
    for b in prepared.start().segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()) {
        live.insert(b.address, (b.size, b.requested_size, b.frames.clone()));
    }
    let upto = (event as usize).min(trace.events.len());
    for (i, e) in trace.events.iter_range(0..upto).enumerate() {
        match e.action {
            TraceAction::Alloc => {
                let frames = trace.events.frames(i).cloned();
                live.insert(e.addr, (round_size(e.size, &recorded.roundup_power2_divisions), e.size, frames));
            }
            TraceAction::FreeCompleted => {
                live.remove(&e.addr);
            }
            _ => {}
        }
    }
    // One name per distinct stack (PyTorch files share stacks between entries).
    let mut names: HashMap<*const Frame, String> = HashMap::new();
    let mut by: HashMap<String, Site> = HashMap::new();
    for (size, requested, frames) in live.into_values() {
        let name = match &frames {
            Some(f) => names.entry(f.as_ptr()).or_insert_with(|| site_name(Some(f))).clone(),
            None => site_name(None),
        };
        let site = by.entry(name.clone()).or_insert_with(|| Site { site: name, ..Site::default() });
        site.block_count += 1;
        site.bytes += size;
        site.requested_bytes += requested;
    }
    let mut all: Vec<Site> = by.into_values().collect();
    all.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    all.truncate(top);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{record, Workload};
    use crate::trace::DeviceTrace;
    use crate::tune::{tune, Exact, TuneInput, TuneOptions, TABLE_ROWS};

    #[test]
    fn a_report_on_a_synthetic_trace_draws_both_runs_and_keeps_their_peaks() {
        crate::sampled_invariant_checks();
        let snap = record(&Workload::new(30_000));
        let trace = &DeviceTrace::split(&snap)[0];
        let recorded = AllocatorConfig::pytorch_default();
        let prepared = PreparedTrace::new(trace, recorded, None).unwrap();
        let input = TuneInput { label: "synthetic".into(), prepared: &prepared, capacity_bytes: None };
        let t = tune(std::slice::from_ref(&input), &TuneOptions { max_candidates: Some(12), exact: Exact::All, timeline_points: 0 }, &|| ()).unwrap();
        let t = &t.results[0];
        let diagnosis = crate::doctor::diagnose(&prepared, Some(t)).unwrap();
        let report = build(&ReportInput {
            label: "synthetic".into(),
            prepared: &prepared,
            capacity_bytes: None,
            tune: Some(t),
            diagnosis: &diagnosis,
        })
        .unwrap();
        let r = report.recorded.as_ref().unwrap();
        // The timeline never drops the peak, and the figures are tune's.
        assert_eq!(r.metrics.peak_reserved_bytes, t.recorded.peak_reserved_bytes);
        assert_eq!(r.metrics.timeline.iter().map(|s| s.reserved_bytes).max(), Some(r.metrics.peak_reserved_bytes));
        assert_eq!(r.metrics.timeline.iter().map(|s| s.allocated_bytes).max(), Some(r.metrics.peak_allocated_bytes));
        assert!(r.metrics.timeline.len() <= TIMELINE_POINTS + 2);
        assert_eq!(r.peak.segments.iter().map(|s| s.total_size).sum::<u64>(), r.metrics.peak_reserved_bytes);
        if let Some(b) = &report.recommended {
            assert_eq!(b.metrics.peak_reserved_bytes, t.best.peak_reserved_bytes);
        }
        assert!(report.sites_at_peak);
        assert!(report.sites[0].site.contains(".py:"), "{:?}", report.sites);
        let html = report.to_html();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("http://") || html.matches("http://").count() == html.matches("http://www.w3.org/2000/svg").count());
        assert!(html.contains(r#"id="timeline""#) && html.contains(r#"id="segment-map-recorded""#));
        assert!(html.contains("Settings tried"));
    }

    /// A run the page takes from the tune (the recorded settings', and
    /// those of the first candidate of each page size, which always run to
    /// the end) is the run it would replay itself; the recorded settings'
    /// is always there, even where the replay of PyTorch's defaults proves
    /// their `max_split_size_mb` alike.
    #[test]
    fn runs_drawn_by_the_tune_are_the_runs_report_would_replay() {
        crate::sampled_invariant_checks();
        for conf in ["", "max_split_size_mb:128"] {
            let config = AllocatorConfig::parse(conf).unwrap();
            let snap = record(&Workload { config: config.clone(), ..Workload::new(30_000) });
            let trace = &DeviceTrace::split(&snap)[0];
            let prepared = PreparedTrace::new(trace, config, None).unwrap();
            let input = TuneInput { label: "synthetic".into(), prepared: &prepared, capacity_bytes: None };
            for exact in [Exact::Rows(TABLE_ROWS), Exact::All] {
                let options = TuneOptions { max_candidates: None, exact, timeline_points: TIMELINE_POINTS };
                let t = tune(std::slice::from_ref(&input), &options, &|| ()).unwrap();
                let t = &t.results[0];
                let drawn: Vec<String> = t.drawn.iter().map(|d| d.config.to_conf_string()).collect();
                if exact != Exact::All {
                    assert!(t.candidates.iter().any(|o| o.stopped_at.is_some()), "the stopping tune, as `vramkit report` runs it");
                    assert!(t.drawn.iter().any(|d| d.config.expandable_segments), "{conf:?} {exact:?}: {drawn:?}");
                }
                assert!(t.drawn.iter().any(|d| d.config == *prepared.recorded()), "{conf:?} {exact:?}: {drawn:?}");
                for d in &t.drawn {
                    let (metrics, peak) = prepared.model_replay_at_peak(&d.config, None, TIMELINE_POINTS).unwrap();
                    assert_eq!(d.metrics, metrics, "{}", d.config.to_conf_string());
                    assert_eq!(d.peak, peak, "{}", d.config.to_conf_string());
                }
            }
        }
    }

    /// The page lists the rows `vramkit tune` lists, however many more
    /// replays ran to the end (with two threads, that varies run to run).
    #[test]
    fn the_settings_table_lists_the_rows_tune_lists() {
        crate::sampled_invariant_checks();
        let snap = record(&Workload::new(5_000));
        let trace = &DeviceTrace::split(&snap)[0];
        let prepared = PreparedTrace::new(trace, AllocatorConfig::pytorch_default(), None).unwrap();
        let input = TuneInput { label: "synthetic".into(), prepared: &prepared, capacity_bytes: None };
        // Every replay to the end: the most a run of `vramkit report` can have.
        let options = TuneOptions { max_candidates: Some(TABLE_ROWS + 8), exact: Exact::All, timeline_points: 0 };
        let t = tune(std::slice::from_ref(&input), &options, &|| ()).unwrap();
        let t = &t.results[0];
        assert!(t.candidates.iter().all(|o| o.stopped_at.is_none()) && t.candidates.len() > TABLE_ROWS);
        let diagnosis = crate::doctor::diagnose(&prepared, Some(t)).unwrap();
        let report =
            build(&ReportInput { label: "synthetic".into(), prepared: &prepared, capacity_bytes: None, tune: Some(t), diagnosis: &diagnosis })
                .unwrap();
        let html = report.to_html();
        let section = &html[html.find(r#"<section id="tune">"#).unwrap()..];
        let section = &section[..section.find("</section>").unwrap()];
        let listed = t.candidates.iter().filter(|o| t.shows(o, TABLE_ROWS)).count();
        assert!((TABLE_ROWS..=TABLE_ROWS + 1).contains(&listed));
        // One header row, then one per candidate listed.
        assert_eq!(section.matches("<tr").count(), 1 + listed);
        assert!(section.contains(&format!("{} more settings rank below these", t.candidates.len() - listed)));
        let text = t.table(TABLE_ROWS);
        for o in &t.candidates {
            let conf = format!("<code>{}</code>", escape::escape(crate::tune::show_conf(&o.conf)));
            assert_eq!(section.contains(&conf), t.shows(o, TABLE_ROWS), "{conf}");
            assert_eq!(text.contains(&format!("  {}\n", crate::tune::show_conf(&o.conf))) || text.contains(&format!("  {}  <- recorded", crate::tune::show_conf(&o.conf))), t.shows(o, TABLE_ROWS), "{conf}");
        }
    }

    #[test]
    fn live_sites_follow_allocations_and_completed_frees() {
        crate::sampled_invariant_checks();
        let snap = record(&Workload::new(5_000));
        let trace = &DeviceTrace::split(&snap)[0];
        let config = AllocatorConfig::pytorch_default();
        let prepared = PreparedTrace::new(trace, config, None).unwrap();
        let at_end = live_sites_at(&prepared, trace.events.len() as u64, usize::MAX);
        let live_end: u64 = trace.end_segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state.is_active()).count() as u64;
        assert_eq!(at_end.iter().map(|s| s.block_count).sum::<u64>(), live_end);
    }
}

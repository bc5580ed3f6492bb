//! Hand-made SVG: a line chart of bytes over trace entries, and a map of
//! segments with their blocks coloured by state. No script, no fonts or
//! styles from anywhere else: the markup is the whole chart.
//!
//! Both stay small whatever the trace: the chart draws the replay's
//! downsampled timeline (which keeps every bucket's peaks), and the map
//! draws one rectangle per run of same-coloured pixels, not per block.

use super::escape::escape;
use std::fmt::Write;
use vramkit_core::{BlockState, SegmentInfo};

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// CSS colour.
    pub color: &'a str,
    /// Dashed stroke.
    pub dashed: bool,
    /// (trace entry, bytes), in entry order.
    pub points: Vec<(u64, u64)>,
}

/// A labelled horizontal line (a capacity, a lower bound), its label
/// inside the plot above the line's right end.
#[derive(Clone, Debug)]
pub struct Level<'a> {
    /// Label at the right end.
    pub label: &'a str,
    /// CSS colour.
    pub color: &'a str,
    /// Bytes.
    pub bytes: u64,
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks up to `max`.
fn nice_step(max: f64, target: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / target;
    let power = 10f64.powf(raw.log10().floor());
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

fn bytes_label(bytes: f64, in_gib: bool) -> String {
    if in_gib {
        format!("{} GiB", trim(bytes / GIB))
    } else {
        format!("{} MiB", trim(bytes / MIB))
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn count_label(n: f64) -> String {
    if n >= 1e6 {
        format!("{}M", trim(n / 1e6))
    } else if n >= 1e3 {
        format!("{}k", trim(n / 1e3))
    } else {
        trim(n)
    }
}

/// A line chart of `series` (bytes over trace entries) with `levels`.
/// Each series' highest point is marked and labelled.
pub fn line_chart(id: &str, title: &str, series: &[Series<'_>], levels: &[Level<'_>], width: u32, height: u32) -> String {
    let (left, right, top, bottom) = (80.0, 170.0, 30.0, 40.0);
    let plot_w = width as f64 - left - right;
    let plot_h = height as f64 - top - bottom;
    let max_x = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).max().unwrap_or(1).max(1) as f64;
    let max_y_data = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(levels.iter().map(|l| l.bytes))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let in_gib = max_y_data >= GIB;
    let unit = if in_gib { GIB } else { MIB };
    let y_step = nice_step(max_y_data / unit, 5.0) * unit;
    let max_y = (max_y_data / y_step).ceil() * y_step;
    let x_step = nice_step(max_x, 8.0);
    let sx = |x: f64| left + x / max_x * plot_w;
    let sy = |y: f64| top + plot_h - y / max_y * plot_h;

    let points: usize = series.iter().map(|s| s.points.len()).sum();
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg id="{id}" class="chart" data-points="{points}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{t}">"#,
        t = escape(title)
    );
    let _ = write!(out, r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#);
    // Grid and axes.
    let mut y = 0.0;
    while y <= max_y + y_step / 2.0 {
        let py = sy(y);
        let _ = write!(
            out,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#374151">{}</text>"##,
            left + plot_w,
            left - 6.0,
            py + 4.0,
            bytes_label(y, in_gib)
        );
        y += y_step;
    }
    let mut x = 0.0;
    while x <= max_x {
        let px = sx(x);
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#f3f4f6"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#374151">{}</text>"##,
            top + plot_h,
            top + plot_h + 16.0,
            count_label(x)
        );
        x += x_step;
    }
    let _ = write!(
        out,
        r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#6b7280"/><line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="#6b7280"/>"##,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        top + plot_h
    );
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#111827">trace entry</text><text x="{left}" y="18" font-size="13" font-weight="600" fill="#111827">{}</text>"##,
        left + plot_w / 2.0,
        height as f64 - 6.0,
        escape(title)
    );
    for l in levels {
        let py = sy(l.bytes as f64);
        let _ = write!(
            out,
            r#"<line class="level" x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{c}" stroke-dasharray="2 3"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="{c}">{} {}</text>"#,
            left + plot_w,
            left + plot_w - 4.0,
            py - 4.0,
            escape(l.label),
            bytes_label(l.bytes as f64, in_gib),
            c = l.color
        );
    }
    for (k, s) in series.iter().enumerate() {
        let mut pts = String::with_capacity(s.points.len() * 14);
        for &(x, y) in &s.points {
            let _ = write!(pts, "{:.1},{:.1} ", sx(x as f64), sy(y as f64));
        }
        let dash = if s.dashed { r#" stroke-dasharray="6 3""# } else { "" };
        let _ = write!(
            out,
            r#"<polyline class="series" data-series="{}" data-points="{}" fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"#,
            escape(s.name),
            s.points.len(),
            s.color,
            pts.trim_end()
        );
        // The peak is always among the points: mark it.
        if let Some(&(px, py)) = s.points.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))) {
            let _ = write!(
                out,
                r#"<circle class="peak" cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"><title>{}: peak {} at entry {px}</title></circle>"#,
                sx(px as f64),
                sy(py as f64),
                escape(s.name),
                bytes_label(py as f64, in_gib),
                c = s.color
            );
        }
        // Legend.
        let ly = top + 14.0 + 18.0 * k as f64;
        let lx = left + plot_w + 10.0;
        let _ = write!(
            out,
            r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}" font-size="11" fill="#111827">{}</text>"##,
            lx + 18.0,
            s.color,
            lx + 22.0,
            ly + 4.0,
            escape(s.name)
        );
    }
    out.push_str("</svg>");
    out
}

/// Colours of the segment map.
pub const ALLOCATED: &str = "#2563eb";
/// Pending free.
pub const PENDING: &str = "#f59e0b";
/// Free inside a segment that also holds active blocks.
pub const FREE_SPLIT: &str = "#f87171";
/// Free segment.
pub const FREE_SEGMENT: &str = "#d1d5db";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Paint {
    Allocated,
    Pending,
    FreeSplit,
    FreeSegment,
}

impl Paint {
    fn color(self) -> &'static str {
        match self {
            Paint::Allocated => ALLOCATED,
            Paint::Pending => PENDING,
            Paint::FreeSplit => FREE_SPLIT,
            Paint::FreeSegment => FREE_SEGMENT,
        }
    }
}

/// The segments laid out left to right in address order, wrapping into
/// rows `width` pixels wide, each pixel standing for the same bytes (a
/// segment gets at least 3 pixels), a 2-pixel gap between segments. A
/// pixel takes the colour of the state holding most of its bytes.
pub fn segment_map(id: &str, segments: &[SegmentInfo], width: u32) -> String {
    const ROW_H: f64 = 12.0;
    const ROW_GAP: f64 = 3.0;
    const GAP: u64 = 2;
    const MIN_PX: u64 = 3;
    const TARGET_ROWS: u64 = 30;
    let total: u64 = segments.iter().map(|s| s.total_size).sum();
    let w = width as u64;
    let bytes_per_px = (total / (w * TARGET_ROWS)).max(1);

    // Runs of (linear pixel start, end, paint), and segment spans for tooltips.
    let mut runs: Vec<(u64, u64, Paint)> = Vec::new();
    let mut spans: Vec<(u64, u64, &SegmentInfo)> = Vec::new();
    let mut cursor = 0u64;
    for s in segments {
        let px = s.total_size.div_ceil(bytes_per_px).max(MIN_PX);
        // Rows should not start with a gap or split a small segment needlessly.
        let col = cursor % w;
        if col != 0 && px <= w && col + px > w {
            cursor += w - col;
        }
        let active = s.blocks.iter().any(|b| b.state.is_active());
        let paint = |state: BlockState| match state {
            BlockState::ActiveAllocated => Paint::Allocated,
            BlockState::ActivePendingFree => Paint::Pending,
            BlockState::Inactive if active => Paint::FreeSplit,
            BlockState::Inactive => Paint::FreeSegment,
        };
        let seg_bpp = s.total_size as f64 / px as f64;
        let mut blocks = s.blocks.iter().peekable();
        let mut offset = 0u64; // byte offset of the current block's start
        for p in 0..px {
            let lo = (p as f64 * seg_bpp) as u64;
            let hi = (((p + 1) as f64) * seg_bpp) as u64;
            let mut weights = [0u64; 4];
            while let Some(b) = blocks.peek() {
                let b_lo = offset;
                let b_hi = offset + b.size;
                let overlap = b_hi.min(hi).saturating_sub(b_lo.max(lo));
                weights[paint(b.state) as usize] += overlap;
                if b_hi <= hi {
                    offset = b_hi;
                    blocks.next();
                } else {
                    break;
                }
            }
            let k = (0..4).max_by_key(|&k| (weights[k], 3 - k)).expect("four paints");
            let paint = [Paint::Allocated, Paint::Pending, Paint::FreeSplit, Paint::FreeSegment][k];
            let x = cursor + p;
            match runs.last_mut() {
                // Segments are apart by the gap, so runs never merge across them.
                Some(last) if last.2 == paint && last.1 == x => last.1 = x + 1,
                _ => runs.push((x, x + 1, paint)),
            }
        }
        spans.push((cursor, cursor + px, s));
        cursor += px + GAP;
    }
    let rows = cursor.div_ceil(w).max(1);
    let height = (rows as f64 * (ROW_H + ROW_GAP)).ceil() as u64;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg id="{id}" class="segment-map" data-segments="{}" data-rects="{}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="segment map">"#,
        segments.len(),
        runs.len()
    );
    let place = |x0: u64, x1: u64, out: &mut String, attrs: &str| {
        // A run may cross row ends: draw one piece per row.
        let mut a = x0;
        while a < x1 {
            let row = a / w;
            let b = x1.min((row + 1) * w);
            let _ = write!(
                out,
                r#"<rect x="{}" y="{:.1}" width="{}" height="{ROW_H}" {attrs}/>"#,
                a % w,
                row as f64 * (ROW_H + ROW_GAP),
                b - a
            );
            a = b;
        }
    };
    for (x0, x1, paint) in &runs {
        place(*x0, *x1, &mut out, &format!(r#"fill="{}""#, paint.color()));
    }
    // Segment outlines, with a tooltip each.
    for (x0, x1, s) in spans {
        let allocated: u64 = s.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.size).sum();
        let _ = write!(
            out,
            "<g class=\"segment\"><title>segment {:#x}: {}, {} pool, stream {}, {} blocks, {} allocated</title>",
            s.address,
            vramkit_core::format_size(s.total_size),
            s.segment_type.as_str(),
            s.stream,
            s.blocks.len(),
            vramkit_core::format_size(allocated)
        );
        place(x0, x1, &mut out, r##"fill="transparent" stroke="#374151" stroke-width="0.6""##);
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramkit_core::{BlockInfo, PoolKind};

    fn segment(address: u64, blocks: &[(u64, BlockState)]) -> SegmentInfo {
        let mut a = address;
        let blocks: Vec<BlockInfo> = blocks
            .iter()
            .map(|&(size, state)| {
                let b = BlockInfo { address: a, size, requested_size: size, state, frames: None };
                a += size;
                b
            })
            .collect();
        let total_size = blocks.iter().map(|b| b.size).sum();
        SegmentInfo {
            device: 0,
            address,
            total_size,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: None,
            blocks,
        }
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(13.2, 5.0), 5.0);
        assert_eq!(nice_step(6486.0, 8.0), 1000.0);
    }

    #[test]
    fn the_chart_marks_each_series_peak() {
        let s = Series { name: "reserved <recorded>", color: "#000", dashed: false, points: vec![(0, 1 << 30), (5, 3 << 30), (9, 2 << 30)] };
        let svg = line_chart("c", "t", &[s], &[Level { label: "lower bound", color: "#999", bytes: 1 << 30 }], 800, 300);
        assert!(svg.contains(r#"data-points="3""#));
        assert!(svg.contains("peak 3 GiB at entry 5"));
        assert!(svg.contains("reserved &lt;recorded&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    #[test]
    fn the_map_merges_pixels_and_keeps_every_segment() {
        const MIB: u64 = 1 << 20;
        let segs = vec![
            segment(0, &[(10 * MIB, BlockState::ActiveAllocated), (10 * MIB, BlockState::Inactive)]),
            segment(1 << 30, &[(2 * MIB, BlockState::Inactive)]),
            segment(2 << 30, &[(512, BlockState::ActiveAllocated); 4096]),
        ];
        let svg = segment_map("m", &segs, 400);
        assert_eq!(svg.matches("<g class=\"segment\">").count(), 3);
        assert!(svg.contains(ALLOCATED) && svg.contains(FREE_SPLIT) && svg.contains(FREE_SEGMENT));
        // Runs: allocated, free in a split segment, a free segment, and the
        // 4096 blocks of the third segment merged into one.
        assert!(svg.contains(r#"data-rects="4""#), "{svg}");
    }
}

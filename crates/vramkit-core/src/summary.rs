//! `torch.cuda.memory_summary()`: the table, byte for byte, and a reader that
//! turns a printed table back into statistics (spec sections 8 and 16.1).
//!
//! PyTorch builds the table in Python from `memory_stats()`, so the
//! arithmetic below copies Python's: `//` floors, and the unit of a size
//! column is chosen by repeated float division of the reference value.

use crate::stats::{DeviceStats, Stat, StatArray};
use std::fmt::Write as _;

/// The three shapes the table has had. Nothing else about it changed between
/// 1.4.0 and 2.15.0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SummaryLayout {
    /// PyTorch 1.4.0 – 1.9.x: size cells `{:7d} {}` with units `B `, `KB`,
    /// `MB`, ...; no "Requested memory" rows and no oversize rows (39 lines).
    V1_4,
    /// PyTorch 1.10.0 – 1.13.x: as [`SummaryLayout::V1_4`] plus the two
    /// oversize rows (43 lines).
    V1_10,
    /// PyTorch 2.0.0 and later: size cells `{:6d} {}` with units `B  `,
    /// `KiB`, `MiB`, ...; "Requested memory" rows (47 lines, 29 abbreviated).
    #[default]
    V2_0,
}

impl SummaryLayout {
    fn size_units(self) -> &'static [&'static str; 6] {
        match self {
            SummaryLayout::V1_4 | SummaryLayout::V1_10 => &OLD_SIZE_UNITS,
            SummaryLayout::V2_0 => &SIZE_UNITS,
        }
    }

    fn has_requested(self) -> bool {
        self == SummaryLayout::V2_0
    }

    fn has_oversize(self) -> bool {
        self != SummaryLayout::V1_4
    }
}

const WIDTH: usize = 75;
const SIZE_UNITS: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
const OLD_SIZE_UNITS: [&str; 6] = ["B ", "KB", "MB", "GB", "TB", "PB"];
const COUNT_UNITS: [&str; 3] = [" ", "K", "M"];
const SIZE_SWITCH: f64 = 768.0 * 1024.0;
const COUNT_SWITCH: i64 = 750 * 1000;

const TITLE_PREFIX: &str = "                  PyTorch CUDA memory summary, device ID ";
const OOMS_PREFIX: &str = "            CUDA OOMs: ";
const RETRIES_PREFIX: &str = "        cudaMalloc retries: ";
const COLUMNS: &str = "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ";
const LARGE_POOL_TITLE: &str = "      from large pool";
const SMALL_POOL_TITLE: &str = "      from small pool";
const COLUMN_NAMES: [&str; 4] = ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CellKind {
    Size,
    Count,
}

struct Metric {
    title: &'static str,
    kind: CellKind,
    /// Only the 2.0 layout has this row ("Requested memory").
    v2_only: bool,
    get: fn(&DeviceStats) -> &StatArray,
    get_mut: fn(&mut DeviceStats) -> &mut StatArray,
}

/// The StatArray rows in PyTorch's order; `requested_bytes` is skipped by
/// layouts that predate it.
const METRICS: [Metric; 9] = [
    Metric {
        title: "Allocated memory",
        kind: CellKind::Size,
        v2_only: false,
        get: |s| &s.allocated_bytes,
        get_mut: |s| &mut s.allocated_bytes,
    },
    Metric {
        title: "Active memory",
        kind: CellKind::Size,
        v2_only: false,
        get: |s| &s.active_bytes,
        get_mut: |s| &mut s.active_bytes,
    },
    Metric {
        title: "Requested memory",
        kind: CellKind::Size,
        v2_only: true,
        get: |s| &s.requested_bytes,
        get_mut: |s| &mut s.requested_bytes,
    },
    Metric {
        title: "GPU reserved memory",
        kind: CellKind::Size,
        v2_only: false,
        get: |s| &s.reserved_bytes,
        get_mut: |s| &mut s.reserved_bytes,
    },
    Metric {
        title: "Non-releasable memory",
        kind: CellKind::Size,
        v2_only: false,
        get: |s| &s.inactive_split_bytes,
        get_mut: |s| &mut s.inactive_split_bytes,
    },
    Metric {
        title: "Allocations",
        kind: CellKind::Count,
        v2_only: false,
        get: |s| &s.allocation,
        get_mut: |s| &mut s.allocation,
    },
    Metric {
        title: "Active allocs",
        kind: CellKind::Count,
        v2_only: false,
        get: |s| &s.active,
        get_mut: |s| &mut s.active,
    },
    Metric {
        title: "GPU reserved segments",
        kind: CellKind::Count,
        v2_only: false,
        get: |s| &s.segment,
        get_mut: |s| &mut s.segment,
    },
    Metric {
        title: "Non-releasable allocs",
        kind: CellKind::Count,
        v2_only: false,
        get: |s| &s.inactive_split,
        get_mut: |s| &mut s.inactive_split,
    },
];

struct OversizeMetric {
    title: &'static str,
    get: fn(&DeviceStats) -> &Stat,
    get_mut: fn(&mut DeviceStats) -> &mut Stat,
}

const OVERSIZE_METRICS: [OversizeMetric; 2] = [
    OversizeMetric {
        title: "Oversize allocations",
        get: |s| &s.oversize_allocations,
        get_mut: |s| &mut s.oversize_allocations,
    },
    OversizeMetric {
        title: "Oversize GPU segments",
        get: |s| &s.oversize_segments,
        get_mut: |s| &mut s.oversize_segments,
    },
];

fn metrics(layout: SummaryLayout) -> impl Iterator<Item = &'static Metric> {
    METRICS
        .iter()
        .filter(move |m| layout.has_requested() || !m.v2_only)
}

fn columns(stat: &Stat) -> [i64; 4] {
    [stat.current, stat.peak, stat.allocated, stat.freed]
}

fn columns_mut(stat: &mut Stat) -> [&mut i64; 4] {
    [
        &mut stat.current,
        &mut stat.peak,
        &mut stat.allocated,
        &mut stat.freed,
    ]
}

/// Index into the size units for a column whose aggregate value is `reference`.
///
/// Python compares `pref_sz < 768 * 1024` after each `pref_sz /= 1024`, a
/// float division; past 2^53 bytes that rounding can switch units a hair
/// below the exact threshold, so this repeats the float steps rather than
/// comparing integers. (`x as f64 / 1024.0` rounds once, as Python's
/// `int / int` does, because dividing by a power of two is exact.)
fn size_unit(reference: i64) -> usize {
    let mut unit = 0;
    let mut reference = reference as f64;
    while unit + 1 < SIZE_UNITS.len() && reference >= SIZE_SWITCH {
        unit += 1;
        reference /= 1024.0;
    }
    unit
}

/// Index into the count units. Integer comparisons give the same answer as
/// Python's float ones here: the thresholds are far from any rounding step.
fn count_unit(reference: i64) -> usize {
    if reference < COUNT_SWITCH {
        0
    } else if reference < COUNT_SWITCH * 1000 {
        1
    } else {
        2
    }
}

fn unit_of(kind: CellKind, reference: i64) -> usize {
    match kind {
        CellKind::Size => size_unit(reference),
        CellKind::Count => count_unit(reference),
    }
}

fn push_cell(out: &mut String, kind: CellKind, layout: SummaryLayout, value: i64, unit: usize) {
    // Python's `//` floors; `div_euclid` by a positive divisor is the same.
    let _ = match kind {
        CellKind::Size => {
            let shown = value.div_euclid(1i64 << (10 * unit));
            match layout {
                SummaryLayout::V2_0 => write!(out, "{shown:6} {}", SIZE_UNITS[unit]),
                _ => write!(out, "{shown:7} {}", OLD_SIZE_UNITS[unit]),
            }
        }
        CellKind::Count => {
            let shown = value.div_euclid(1000i64.pow(unit as u32));
            write!(out, "{shown:7} {} ", COUNT_UNITS[unit])
        }
    };
}

fn push_row(
    out: &mut String,
    title: &str,
    kind: CellKind,
    layout: SummaryLayout,
    values: [i64; 4],
    units: [usize; 4],
) {
    let _ = write!(out, "| {title:<21} ");
    for (value, unit) in values.into_iter().zip(units) {
        out.push_str("| ");
        push_cell(out, kind, layout, value, unit);
        out.push(' ');
    }
    out.push_str("|\n");
}

fn push_line(out: &mut String, content: &str) {
    out.push('|');
    out.push_str(content);
    out.push_str("|\n");
}

fn push_rule(out: &mut String, fill: char) {
    out.push('|');
    out.extend(std::iter::repeat_n(fill, WIDTH));
    out.push_str("|\n");
}

/// `torch.cuda.memory_summary(device, abbreviated)` as the PyTorch releases of
/// `layout` print it, including the final newline.
///
/// Statistics a layout has no row for (requested bytes before 2.0, oversize
/// counts before 1.10) are not shown.
pub fn memory_summary(
    stats: &DeviceStats,
    device: i64,
    abbreviated: bool,
    layout: SummaryLayout,
) -> String {
    let mut out = String::with_capacity(48 * (WIDTH + 3));
    push_rule(&mut out, '=');
    push_line(&mut out, &format!("{TITLE_PREFIX}{device:<17} "));
    push_rule(&mut out, '-');
    push_line(
        &mut out,
        &format!(
            "{OOMS_PREFIX}{:<12} |{RETRIES_PREFIX}{:<8}  ",
            stats.num_ooms, stats.num_alloc_retries
        ),
    );
    push_rule(&mut out, '=');
    push_line(&mut out, COLUMNS);

    for metric in metrics(layout) {
        push_rule(&mut out, '-');
        let array = (metric.get)(stats);
        let units = columns(&array.all).map(|reference| unit_of(metric.kind, reference));
        let mut rows = vec![(metric.title, &array.all)];
        if !abbreviated {
            rows.push((LARGE_POOL_TITLE, &array.large_pool));
            rows.push((SMALL_POOL_TITLE, &array.small_pool));
        }
        for (title, stat) in rows {
            push_row(&mut out, title, metric.kind, layout, columns(stat), units);
        }
    }

    if layout.has_oversize() {
        for metric in &OVERSIZE_METRICS {
            push_rule(&mut out, '-');
            let values = columns((metric.get)(stats));
            let units = values.map(count_unit);
            push_row(
                &mut out,
                metric.title,
                CellKind::Count,
                layout,
                values,
                units,
            );
        }
    }

    push_rule(&mut out, '=');
    out
}

/// A table read back by [`parse_memory_summary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedSummary {
    /// The statistics the table shows. Values are the printed numbers times
    /// their unit (`682537 KiB` is 682,537 × 1024 bytes), so they are lower
    /// bounds of the originals; statistics without a row are zero.
    pub stats: DeviceStats,
    /// The device index in the title.
    pub device: i64,
    /// Whether the pool sub-rows are missing.
    pub abbreviated: bool,
    /// The layout the rows and units match.
    pub layout: SummaryLayout,
}

impl ParsedSummary {
    /// The table again, in the same layout.
    pub fn render(&self) -> String {
        memory_summary(&self.stats, self.device, self.abbreviated, self.layout)
    }
}

/// Why a text is not a `memory_summary()` table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryParseError {
    /// A line is not what this position of the table holds.
    #[error("line {line}: expected {expected}, found {found:?}")]
    UnexpectedLine {
        /// 1-based line number.
        line: usize,
        /// What the table has at this point.
        expected: String,
        /// The line as written.
        found: String,
    },
    /// The text ended before the table did.
    #[error("line {line}: expected {expected}, but the text ended")]
    UnexpectedEnd {
        /// 1-based number of the missing line.
        line: usize,
        /// What the table has at this point.
        expected: String,
    },
}

struct Lines<'a> {
    lines: Vec<&'a str>,
    next: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        // A pasted table often loses its final newline; accept that.
        let body = text.strip_suffix('\n').unwrap_or(text);
        Lines {
            lines: body.split('\n').collect(),
            next: 0,
        }
    }

    fn peek_content(&self) -> Option<&'a str> {
        self.lines.get(self.next).and_then(|l| unframe(l))
    }

    /// The next line without its `|` frame.
    fn take(&mut self, expected: &str) -> Result<(usize, &'a str), SummaryParseError> {
        let number = self.next + 1;
        let Some(line) = self.lines.get(self.next) else {
            return Err(SummaryParseError::UnexpectedEnd {
                line: number,
                expected: expected.to_owned(),
            });
        };
        self.next += 1;
        match unframe(line) {
            Some(content) => Ok((number, content)),
            None => Err(unexpected(
                number,
                &format!("{expected} framed by '|'"),
                line,
            )),
        }
    }

    fn expect_exact(&mut self, content: &str, what: &str) -> Result<(), SummaryParseError> {
        let (number, found) = self.take(what)?;
        if found == content {
            Ok(())
        } else {
            Err(unexpected(number, what, found))
        }
    }

    fn expect_rule(&mut self, fill: char) -> Result<(), SummaryParseError> {
        let rule: String = std::iter::repeat_n(fill, WIDTH).collect();
        self.expect_exact(&rule, &format!("a rule of {WIDTH} '{fill}'"))
    }
}

fn unframe(line: &str) -> Option<&str> {
    line.strip_prefix('|')?.strip_suffix('|')
}

fn unexpected(line: usize, expected: &str, found: &str) -> SummaryParseError {
    SummaryParseError::UnexpectedLine {
        line,
        expected: expected.to_owned(),
        found: found.to_owned(),
    }
}

fn parse_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Reads a table printed by `torch.cuda.memory_summary()` (any of the three
/// layouts, abbreviated or not) back into statistics.
///
/// Pool sub-row cells are read in the unit of the aggregate cell above them,
/// as PyTorch printed them. Malformed text gives an error naming the line and
/// what was expected there; this function never panics.
pub fn parse_memory_summary(text: &str) -> Result<ParsedSummary, SummaryParseError> {
    let mut lines = Lines::new(text);
    let layout = detect_layout(&lines);
    let mut stats = DeviceStats::default();

    lines.expect_rule('=')?;
    let (number, title) = lines.take("the title line")?;
    let device = title
        .strip_prefix(TITLE_PREFIX)
        .and_then(|rest| parse_int(rest.trim_end_matches(' ')))
        .ok_or_else(|| unexpected(number, "the title with a device index", title))?;
    lines.expect_rule('-')?;
    let (number, counters) = lines.take("the OOM and retry counts")?;
    (stats.num_ooms, stats.num_alloc_retries) = parse_counters(counters)
        .ok_or_else(|| unexpected(number, "the OOM and retry counts", counters))?;
    lines.expect_rule('=')?;
    lines.expect_exact(COLUMNS, "the column titles")?;

    let mut abbreviated = None;
    for metric in metrics(layout) {
        lines.expect_rule('-')?;
        let (number, row) = lines.take(metric.title)?;
        let (values, units) = parse_row(row, metric.title, metric.kind, layout, None)
            .map_err(|expected| unexpected(number, &expected, row))?;
        let array = (metric.get_mut)(&mut stats);
        set_columns(&mut array.all, values);

        let is_abbreviated = *abbreviated.get_or_insert_with(|| {
            lines
                .peek_content()
                .is_none_or(|next| !next.starts_with(&format!(" {LARGE_POOL_TITLE} |")))
        });
        if is_abbreviated {
            continue;
        }
        for (title, pool) in [(LARGE_POOL_TITLE, true), (SMALL_POOL_TITLE, false)] {
            let (number, row) = lines.take(title.trim_start())?;
            let (values, _) = parse_row(row, title, metric.kind, layout, Some(units))
                .map_err(|expected| unexpected(number, &expected, row))?;
            let array = (metric.get_mut)(&mut stats);
            set_columns(
                if pool {
                    &mut array.large_pool
                } else {
                    &mut array.small_pool
                },
                values,
            );
        }
    }

    if layout.has_oversize() {
        for metric in &OVERSIZE_METRICS {
            lines.expect_rule('-')?;
            let (number, row) = lines.take(metric.title)?;
            let (values, _) = parse_row(row, metric.title, CellKind::Count, layout, None)
                .map_err(|expected| unexpected(number, &expected, row))?;
            set_columns((metric.get_mut)(&mut stats), values);
        }
    }

    lines.expect_rule('=')?;
    if let Some(extra) = lines.lines.get(lines.next) {
        return Err(unexpected(lines.next + 1, "the end of the table", extra));
    }
    Ok(ParsedSummary {
        stats,
        device,
        abbreviated: abbreviated.unwrap_or(false),
        layout,
    })
}

/// The layout follows from which rows exist; reading that first lets every
/// cell be checked against the right unit names.
fn detect_layout(lines: &Lines<'_>) -> SummaryLayout {
    let has_row = |title: &str| {
        let start = format!(" {title:<21} |");
        lines
            .lines
            .iter()
            .any(|l| unframe(l).is_some_and(|c| c.starts_with(&start)))
    };
    if has_row("Requested memory") {
        SummaryLayout::V2_0
    } else if has_row("Oversize allocations") {
        SummaryLayout::V1_10
    } else {
        SummaryLayout::V1_4
    }
}

fn parse_counters(content: &str) -> Option<(i64, i64)> {
    let (ooms, retries) = content.strip_prefix(OOMS_PREFIX)?.split_once(" |")?;
    let retries = retries.strip_prefix(RETRIES_PREFIX)?;
    Some((
        parse_int(ooms.trim_end_matches(' '))?,
        parse_int(retries.trim_end_matches(' '))?,
    ))
}

fn set_columns(stat: &mut Stat, values: [i64; 4]) {
    for (slot, value) in columns_mut(stat).into_iter().zip(values) {
        *slot = value;
    }
}

/// One row's four values (times their units) and the unit index of each cell.
/// `aggregate_units` is set for pool sub-rows, whose cells must use them.
/// The error is what the row should have looked like.
fn parse_row(
    content: &str,
    title: &str,
    kind: CellKind,
    layout: SummaryLayout,
    aggregate_units: Option<[usize; 4]>,
) -> Result<([i64; 4], [usize; 4]), String> {
    let expected_row = || format!("a {title:?} row");
    let cells = content
        .strip_prefix(&format!(" {title:<21} |"))
        .and_then(|rest| rest.strip_suffix(' '))
        .ok_or_else(expected_row)?;
    let cells: Vec<&str> = cells.split(" | ").collect();
    if cells.len() != 4 {
        return Err(format!("{} with 4 cells", expected_row()));
    }
    let mut values = [0; 4];
    let mut units = [0; 4];
    for (column, cell) in cells.into_iter().enumerate() {
        let column_name = COLUMN_NAMES[column];
        let cell = cell.strip_prefix(' ').unwrap_or(cell);
        let (number, unit) = split_cell(cell, kind, layout).ok_or_else(|| {
            format!(
                "{}: a {column_name} cell like {}",
                expected_row(),
                cell_example(kind, layout)
            )
        })?;
        if let Some(aggregate) = aggregate_units {
            if unit != aggregate[column] {
                return Err(format!(
                    "{}: the {column_name} cell in the aggregate row's unit {:?}",
                    expected_row(),
                    unit_name(kind, layout, aggregate[column]).trim_end()
                ));
            }
        }
        let scale = match kind {
            CellKind::Size => 1i64 << (10 * unit),
            CellKind::Count => 1000i64.pow(unit as u32),
        };
        values[column] = number.checked_mul(scale).ok_or_else(|| {
            format!(
                "{}: a {column_name} value that fits in 64 bits",
                expected_row()
            )
        })?;
        units[column] = unit;
    }
    Ok((values, units))
}

fn unit_name(kind: CellKind, layout: SummaryLayout, unit: usize) -> &'static str {
    match kind {
        CellKind::Size => layout.size_units()[unit],
        CellKind::Count => COUNT_UNITS[unit],
    }
}

fn cell_example(kind: CellKind, layout: SummaryLayout) -> &'static str {
    match (kind, layout) {
        (CellKind::Count, _) => "\"    728   \" or \"  15606 K \"",
        (CellKind::Size, SummaryLayout::V2_0) => "\"682537 KiB\" or \"     0 B  \"",
        (CellKind::Size, _) => "\" 631465 KB\" or \"    512 B \"",
    }
}

/// A cell (without the spaces that separate it from the `|`s) as a number
/// and a unit index. The number may be wider than its field: Python pads but
/// never truncates.
fn split_cell(cell: &str, kind: CellKind, layout: SummaryLayout) -> Option<(i64, usize)> {
    let units: &[&str] = match kind {
        CellKind::Size => layout.size_units(),
        CellKind::Count => &COUNT_UNITS,
    };
    // A count cell ends in its unit and one more space.
    let cell = match kind {
        CellKind::Size => cell,
        CellKind::Count => cell.strip_suffix(' ')?,
    };
    units.iter().enumerate().find_map(|(index, unit)| {
        let number = cell.strip_suffix(unit)?.strip_suffix(' ')?;
        parse_int(number.trim_start_matches(' ')).map(|n| (n, index))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(kind: CellKind, layout: SummaryLayout, value: i64, reference: i64) -> String {
        let mut out = String::new();
        push_cell(&mut out, kind, layout, value, unit_of(kind, reference));
        out
    }

    fn size(value: i64) -> String {
        cell(CellKind::Size, SummaryLayout::V2_0, value, value)
    }

    fn count(value: i64) -> String {
        cell(CellKind::Count, SummaryLayout::V2_0, value, value)
    }

    #[test]
    fn size_unit_switches_at_768_of_the_next_unit() {
        assert_eq!(size(0), "     0 B  ");
        assert_eq!(size(768 * 1024 - 1), "786431 B  ");
        assert_eq!(size(768 * 1024), "   768 KiB");
        assert_eq!(size((768 << 20) - 1), "786431 KiB");
        assert_eq!(size(768 << 20), "   768 MiB");
        assert_eq!(size((768 << 30) - 1), "786431 MiB");
        assert_eq!(size(768 << 30), "   768 GiB");
        assert_eq!(size(768 << 40), "   768 TiB");
        assert_eq!(size(768 << 50), "   768 PiB");
        assert_eq!(size(i64::MAX), "  8191 PiB");
    }

    #[test]
    fn size_unit_follows_python_float_rounding_near_the_pib_switch() {
        // 3 * 2^58 - 1 bytes is 767.99.. PiB; Python's `pref_sz / 1024`
        // rounds it to exactly 768 TiB * 1024, so it switches to PiB.
        assert_eq!(size(3 * (1 << 58) - 1), "   767 PiB");
    }

    #[test]
    fn old_layout_size_cells_have_seven_digits_and_two_letter_units() {
        let old = |value| cell(CellKind::Size, SummaryLayout::V1_4, value, value);
        assert_eq!(old(512), "    512 B ");
        assert_eq!(old(631_465 * 1024), " 631465 KB");
        assert_eq!(old(768 << 30), "    768 GB");
    }

    #[test]
    fn count_unit_switches_at_750_000() {
        assert_eq!(count(0), "      0   ");
        assert_eq!(count(749_999), " 749999   ");
        assert_eq!(count(750_000), "    750 K ");
        assert_eq!(count(749_999_999), " 749999 K ");
        assert_eq!(count(750_000_000), "    750 M ");
    }

    #[test]
    fn sub_rows_use_the_aggregate_unit_and_floor() {
        let kib = 1 << 20;
        assert_eq!(
            cell(CellKind::Size, SummaryLayout::V2_0, 1023, kib),
            "     0 KiB"
        );
        assert_eq!(
            cell(CellKind::Size, SummaryLayout::V2_0, -1, kib),
            "    -1 KiB"
        );
        assert_eq!(
            cell(CellKind::Count, SummaryLayout::V2_0, 2_812_345, 15_606_000),
            "   2812 K "
        );
    }

    #[test]
    fn layouts_have_their_line_counts() {
        let stats = DeviceStats::default();
        let lines = |abbreviated, layout| {
            memory_summary(&stats, 0, abbreviated, layout)
                .lines()
                .count()
        };
        assert_eq!(lines(false, SummaryLayout::V1_4), 39);
        assert_eq!(lines(false, SummaryLayout::V1_10), 43);
        assert_eq!(lines(false, SummaryLayout::V2_0), 47);
        assert_eq!(lines(true, SummaryLayout::V2_0), 29);
        let text = memory_summary(&stats, 12, false, SummaryLayout::V2_0);
        assert!(text.lines().all(|l| l.len() == WIDTH + 2), "{text}");
        assert!(text.ends_with("|\n"));
    }

    #[test]
    fn parse_round_trips_every_layout() {
        let mut stats = DeviceStats {
            num_ooms: 3,
            num_alloc_retries: 7,
            ..DeviceStats::default()
        };
        stats.allocated_bytes.all = Stat {
            current: 2048,
            peak: 900 << 20,
            allocated: 5 << 40,
            freed: 1,
        };
        stats.allocated_bytes.large_pool = Stat {
            current: 1024,
            peak: 899 << 20,
            allocated: 4 << 40,
            freed: 0,
        };
        stats.allocation.all = Stat {
            current: 1,
            peak: 800_000,
            allocated: 900_000_000,
            freed: 2,
        };
        stats.oversize_segments = Stat {
            current: 4,
            peak: 5,
            allocated: 6,
            freed: 2,
        };
        for layout in [
            SummaryLayout::V1_4,
            SummaryLayout::V1_10,
            SummaryLayout::V2_0,
        ] {
            for abbreviated in [false, true] {
                let text = memory_summary(&stats, 3, abbreviated, layout);
                let parsed = parse_memory_summary(&text).unwrap();
                assert_eq!(parsed.layout, layout);
                assert_eq!(parsed.abbreviated, abbreviated);
                assert_eq!(parsed.device, 3);
                assert_eq!(parsed.render(), text);
            }
        }
    }

    #[test]
    fn parse_errors_name_the_line() {
        let good = memory_summary(&DeviceStats::default(), 0, false, SummaryLayout::V2_0);
        let broken = good.replacen(
            "| Active memory         |      0 B   |",
            "| Active memory         |      0 XB  |",
            1,
        );
        match parse_memory_summary(&broken) {
            Err(SummaryParseError::UnexpectedLine { line, expected, .. }) => {
                assert_eq!(line, 12);
                assert!(expected.contains("Cur Usage"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        let cut: String = good.lines().take(20).map(|l| format!("{l}\n")).collect();
        assert!(matches!(
            parse_memory_summary(&cut),
            Err(SummaryParseError::UnexpectedEnd { line: 21, .. })
        ));
        let wrong_unit = good.replacen(
            "|       from large pool |      0 B   |",
            "|       from large pool |      0 KiB |",
            1,
        );
        assert!(matches!(
            parse_memory_summary(&wrong_unit),
            Err(SummaryParseError::UnexpectedLine { line: 9, .. })
        ));
    }

    #[test]
    fn parse_never_panics_on_any_prefix_or_edit() {
        let good = memory_summary(&DeviceStats::default(), 0, false, SummaryLayout::V1_10);
        for end in 0..good.len() {
            let _ = parse_memory_summary(&good[..end]);
        }
        for (at, _) in good.char_indices().step_by(7) {
            for replacement in ["", "|", "-", "9", " ", "\n", "é"] {
                let mut text = good.clone();
                text.replace_range(at..at + 1, replacement);
                let _ = parse_memory_summary(&text);
            }
        }
        assert!(parse_memory_summary("").is_err());
        assert!(parse_memory_summary("||\n").is_err());
    }
}

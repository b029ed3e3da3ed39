//! SVG plots with plotters: TFLOPS against sequence length for the fa and fp8 grids (one plot
//! per precision, head dim, mask and timing mode; one line per implementation), and grouped
//! bars of µs per call for the mission and decode suites. A plot whose values span more than
//! a decade (the mission suite: a few µs for tiny shapes, 100+ µs for long ones) gets a
//! logarithmic y axis, so the small values stay readable instead of flattening to the floor;
//! the axis title then says "log scale".

use super::ReportError;
use crate::bench::record::{BenchRow, IMPL_OURS, IMPL_TORCH};
pub use crate::bench::suites::short_len;
use fp8_sdpa::{DType, Precision};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// One plot written.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotFile {
    /// Suite it shows.
    pub suite: String,
    /// Title drawn on it.
    pub title: String,
    /// Path relative to the report folder (`plots/<name>.svg`), as linked from summary.md.
    pub file: String,
    /// Legend entries.
    pub series: Vec<String>,
}

/// More of our variants than this in one plot are drawn as a single "best of N" line, so the
/// plot stays readable when the tuner benchmarked many.
const MAX_OWN_SERIES: usize = 4;

/// Tableau-10: distinct on white and in print, unlike plotters' default palette (yellow).
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

fn color(i: usize) -> RGBAColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b).to_rgba()
}

/// One line (or set of bars) with its points.
#[derive(Debug, Clone)]
struct Series {
    label: String,
    torch: bool,
    points: Vec<(f64, f64)>,
}

/// The 16-bit path PyTorch is compared at for a precision (PyTorch SDPA has no FP8 kernel).
pub fn torch_baseline(p: Precision) -> Precision {
    match p {
        Precision::F16 | Precision::Bf16 => p,
        other if other.compute() == DType::Bf16 => Precision::Bf16,
        _ => Precision::F16,
    }
}

fn series_label(r: &BenchRow) -> String {
    format!("{} {}", r.implementation, r.backend)
}

/// Adds `(x, y)` to the series `label`, creating it in first-seen order.
fn add_point(series: &mut Vec<Series>, label: String, torch: bool, x: f64, y: f64) {
    match series.iter_mut().find(|s| s.label == label) {
        Some(s) => s.points.push((x, y)),
        None => series.push(Series {
            label,
            torch,
            points: vec![(x, y)],
        }),
    }
}

/// Replaces our series by one "best" series when there are too many; `better` picks the
/// better of two values (max for throughput, min for time).
fn collapse_own(series: Vec<Series>, better: fn(f64, f64) -> f64) -> Vec<Series> {
    let own = series.iter().filter(|s| !s.torch).count();
    if own <= MAX_OWN_SERIES {
        return series;
    }
    let mut best: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
    for s in series.iter().filter(|s| !s.torch) {
        for &(x, y) in &s.points {
            // x values are exact small numbers (indices or log2 lengths): key by 1/1000ths.
            let k = (x * 1000.0).round() as i64;
            best.entry(k)
                .and_modify(|e| e.1 = better(e.1, y))
                .or_insert((x, y));
        }
    }
    let mut out = vec![Series {
        label: format!("{IMPL_OURS} (best of {own} variants)"),
        torch: false,
        points: best.into_values().collect(),
    }];
    out.extend(series.into_iter().filter(|s| s.torch));
    out
}

/// A linear f64 axis whose ticks are exactly the given points (sequence lengths, category
/// indices), so labels never fall between cases. plotters' own `WithKeyPoints` over f64 does
/// not take a label formatter.
#[derive(Debug, Clone)]
struct KeyAxis {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl Ranged for KeyAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        let f = if span > 0.0 {
            (value - self.lo) / span
        } else {
            0.5
        };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Light (minor) grid lines would fall on the same points: draw them once.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// Values spanning more than this ratio (largest / smallest positive) get a log y axis.
pub const LOG_SCALE_SPAN: f64 = 10.0;

/// Whether a plot of these values gets a log axis: its positive values span more than
/// [`LOG_SCALE_SPAN`] (non-positive and non-finite values are ignored).
pub fn wants_log_scale(values: impl IntoIterator<Item = f64>) -> bool {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    hi > 0.0 && hi / lo > LOG_SCALE_SPAN
}

/// The y axis: linear from 0, or base-10 logarithmic with labels at 1, 2 and 5 per decade
/// (only powers of ten beyond four decades, unless the axis has room) and a light grid line
/// at every integer multiple.
#[derive(Debug, Clone)]
struct ValueAxis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl ValueAxis {
    /// A linear axis `0..top`.
    fn linear(top: f64) -> Self {
        ValueAxis {
            lo: 0.0,
            hi: top,
            log: false,
        }
    }

    /// A log axis from the power of ten at or below `min` (a little room under the smallest
    /// value) to `max` raised by `headroom` of the axis height (for the legend and labels).
    fn log(min: f64, max: f64, headroom: f64) -> Self {
        let lo = 10f64.powf((min * 0.8).log10().floor());
        let decades = (max.log10() - lo.log10()).max(0.1);
        // headroom is a fraction of the final height: top = max · 10^(decades·h/(1−h))
        let hi = max * 10f64.powf(decades * headroom / (1.0 - headroom));
        ValueAxis { lo, hi, log: true }
    }

    /// The bottom of the axis, where bars start.
    fn floor(&self) -> f64 {
        self.lo
    }

    /// The value `frac` of the axis height above `y` (for labels over bars).
    fn above(&self, y: f64, frac: f64) -> f64 {
        if self.log {
            y * (self.hi / self.lo).powf(frac)
        } else {
            y + (self.hi - self.lo) * frac
        }
    }

    /// Log-axis ticks: the bold ones (labelled) or the light grid lines.
    fn log_ticks(&self, max_points: usize, light: bool) -> Vec<f64> {
        let first = self.lo.log10().floor() as i32;
        let last = self.hi.log10().ceil() as i32;
        let decades = (self.hi / self.lo).log10().ceil().max(1.0) as usize;
        let mults: &[f64] = if light {
            &[2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        } else if decades <= 4 || decades * 3 <= max_points {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let mut out = Vec::new();
        for e in first..=last {
            for m in mults {
                let v = m * 10f64.powi(e);
                if v >= self.lo * (1.0 - 1e-9) && v <= self.hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    }
}

impl Ranged for ValueAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let f = if self.log {
            let v = value.max(self.lo * 1e-3);
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else if self.hi > self.lo {
            (value - self.lo) / (self.hi - self.lo)
        } else {
            0.5
        };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if self.log {
            self.log_ticks(hint.max_num_points(), hint.weight().allow_light_points())
        } else {
            RangedCoordf64::from(self.lo..self.hi).key_points(hint)
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn plot_err(path: &Path) -> impl Fn(String) -> ReportError + '_ {
    move |reason| ReportError::Plot {
        path: path.to_path_buf(),
        reason,
    }
}

/// Draws TFLOPS against log2(sequence length) as lines with markers.
fn draw_lines(path: &Path, title: &str, x_desc: &str, series: &[Series]) -> Result<(), String> {
    let xs: Vec<f64> = {
        let mut v: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    };
    let (Some(&x0), Some(&x1)) = (xs.first(), xs.last()) else {
        return Err("no points".into());
    };
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let ymax = values().fold(0.0f64, f64::max);
    let ymin = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let y_axis = if wants_log_scale(values()) {
        ValueAxis::log(ymin, ymax, 0.08)
    } else {
        ValueAxis::linear(if ymax > 0.0 { ymax * 1.12 } else { 1.0 })
    };
    let log = y_axis.log;
    let y_desc = if log {
        "TFLOPS (median run, log scale)"
    } else {
        "TFLOPS (median run)"
    };
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            KeyAxis {
                lo: x0 - 0.4,
                hi: x1 + 0.4,
                keys: xs.clone(),
            },
            y_axis,
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&|x| short_len(2f64.powf(*x).round() as usize))
        .y_label_formatter(&|y| {
            if log {
                log_tick_label(*y)
            } else {
                format!("{y:.0}")
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = color(i);
        let mut pts = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(2))
            });
        // Markers tell ours (circles) from PyTorch's (triangles) without relying on color.
        if s.torch {
            chart
                .draw_series(
                    pts.iter()
                        .map(|&p| TriangleMarker::new(p, 6, color.filled())),
                )
                .map_err(|e| e.to_string())?;
        } else {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Draws grouped bars: one group per category, one bar per series, value printed on top.
fn draw_bars(
    path: &Path,
    title: &str,
    categories: &[String],
    y_desc: &str,
    series: &[Series],
) -> Result<(), String> {
    let n = categories.len();
    let m = series.len().max(1);
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    if n == 0 || ymax <= 0.0 {
        return Err("no values".into());
    }
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let ymin = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    // Headroom above the tallest bar keeps the legend clear of the bars.
    let y_axis = if wants_log_scale(values()) {
        ValueAxis::log(ymin, ymax, 0.31)
    } else {
        ValueAxis::linear(ymax * 1.45)
    };
    let log = y_axis.log;
    let y_desc = if log {
        format!("{y_desc}, log scale")
    } else {
        y_desc.to_string()
    };
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let keys: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            KeyAxis {
                lo: -0.5,
                hi: n as f64 - 0.5,
                keys,
            },
            y_axis.clone(),
        )
        .map_err(|e| e.to_string())?;
    let cats = categories.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("case")
        .y_desc(&y_desc)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .y_label_formatter(&|y| {
            if log {
                log_tick_label(*y)
            } else {
                format_value(*y)
            }
        })
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                cats.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    let w = 0.8 / m as f64;
    let label_values = n * m <= 48;
    for (k, s) in series.iter().enumerate() {
        let color = color(k);
        let bars: Vec<(f64, f64)> = s.points.clone();
        chart
            .draw_series(bars.iter().map(|&(x, y)| {
                let left = x - 0.4 + k as f64 * w;
                Rectangle::new(
                    [(left, y_axis.floor()), (left + w * 0.92, y)],
                    color.filled(),
                )
            }))
            .map_err(|e| e.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        if label_values {
            chart
                .draw_series(bars.iter().map(|&(x, y)| {
                    let left = x - 0.4 + k as f64 * w;
                    Text::new(
                        format_value(y),
                        (left, y_axis.above(y, 0.015)),
                        ("sans-serif", 11).into_font(),
                    )
                }))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// A log axis's tick label: 1, 2, 5, 10, 20, … without trailing zeros; 0.5, 0.02 below one.
fn log_tick_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Three significant figures, enough for a bar label.
pub fn format_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Line plots for a grid suite (fa, fp8): TFLOPS vs sequence length per
/// (precision, head dim, causal, mode). FP8 groups also show PyTorch at the 16-bit type.
fn grid_plots(rows: &[BenchRow], suite: &str, out: &Path) -> Result<Vec<PlotFile>, ReportError> {
    type Key = (usize, usize, bool, crate::bench::suites::TimingMode);
    let mut groups: BTreeMap<Key, Vec<&BenchRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.suite == suite && r.is_ok()) {
        let p = Precision::ALL
            .iter()
            .position(|&x| x == r.precision)
            .unwrap_or(0);
        groups
            .entry((p, r.shape.head_dim, r.causal, r.mode))
            .or_default()
            .push(r);
    }
    let mut plots = Vec::new();
    for ((p, d, causal, mode), members) in groups {
        let precision = Precision::ALL[p];
        let mut series: Vec<Series> = Vec::new();
        for r in &members {
            if let Some(t) = r.tflops {
                let torch = r.implementation == IMPL_TORCH;
                add_point(
                    &mut series,
                    series_label(r),
                    torch,
                    (r.shape.seq_kv as f64).log2(),
                    t,
                );
            }
        }
        let base = torch_baseline(precision);
        if base != precision {
            // PyTorch has no FP8 kernel: draw its 16-bit rows on the same shapes as reference.
            for r in rows.iter().filter(|r| {
                r.implementation == IMPL_TORCH
                    && r.is_ok()
                    && r.precision == base
                    && r.causal == causal
                    && r.mode == mode
                    && members.iter().any(|m| m.shape == r.shape)
            }) {
                if let Some(t) = r.tflops {
                    let label = format!("{} ({})", series_label(r), base.name());
                    add_point(&mut series, label, true, (r.shape.seq_kv as f64).log2(), t);
                }
            }
        }
        // A peer measured twice on one shape (two bench files) would zig-zag: keep the first.
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
            s.points.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-9);
        }
        let series = collapse_own(series, f64::max);
        if series.is_empty() {
            continue;
        }
        let mask = if causal { "causal" } else { "non-causal" };
        let title = format!(
            "{suite}: {} D{d} {mask} ({mode}) - TFLOPS vs sequence length",
            precision.name()
        );
        let file = format!(
            "plots/{}.svg",
            file_safe(&format!(
                "{suite}_{}_d{d}_{}_{mode}",
                precision.name(),
                if causal { "causal" } else { "noncausal" }
            ))
        );
        let path = out.join(&file);
        let tokens: Vec<usize> = members
            .iter()
            .map(|r| r.shape.batch * r.shape.seq_q)
            .collect();
        let x_desc = if !tokens.is_empty() && tokens.iter().all(|&t| t == tokens[0]) {
            format!(
                "sequence length (batch x length = {} tokens, log scale)",
                short_len(tokens[0])
            )
        } else {
            "sequence length (log scale)".to_string()
        };
        draw_lines(&path, &title, &x_desc, &series).map_err(plot_err(&path))?;
        plots.push(PlotFile {
            suite: suite.into(),
            title,
            file,
            series: series.into_iter().map(|s| s.label).collect(),
        });
    }
    Ok(plots)
}

/// Grouped bars of median µs per call for a suite of named cases, one plot per timing mode.
/// Time rather than GB/s, so an FP8-KV row (fewer bytes) is not drawn below a slower fp16 one.
fn bar_plots(rows: &[BenchRow], suite: &str, out: &Path) -> Result<Vec<PlotFile>, ReportError> {
    let mut modes: Vec<_> = rows
        .iter()
        .filter(|r| r.suite == suite && r.is_ok())
        .map(|r| r.mode)
        .collect();
    modes.sort();
    modes.dedup();
    let mut plots = Vec::new();
    for mode in modes {
        let members: Vec<&BenchRow> = rows
            .iter()
            .filter(|r| r.suite == suite && r.is_ok() && r.mode == mode)
            .collect();
        let mut categories: Vec<String> = Vec::new();
        for r in &members {
            if !categories.contains(&r.case) {
                categories.push(r.case.clone());
            }
        }
        let several_precisions = members.iter().any(|r| r.precision != members[0].precision);
        let mut series: Vec<Series> = Vec::new();
        for r in &members {
            let (Some(v), Some(i)) = (r.median_us(), categories.iter().position(|c| c == &r.case))
            else {
                continue;
            };
            let mut label = series_label(r);
            if several_precisions {
                label = format!("{label} ({})", r.precision.name());
            }
            add_point(
                &mut series,
                label,
                r.implementation == IMPL_TORCH,
                i as f64,
                v,
            );
        }
        for s in &mut series {
            s.points.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-9);
        }
        let series = collapse_own(series, f64::min);
        if series.is_empty() {
            continue;
        }
        let title = format!("{suite} ({mode}) - µs per call");
        let file = format!("plots/{}.svg", file_safe(&format!("{suite}_{mode}")));
        let path = out.join(&file);
        draw_bars(
            &path,
            &title,
            &categories,
            "median µs per call (lower is better)",
            &series,
        )
        .map_err(plot_err(&path))?;
        plots.push(PlotFile {
            suite: suite.into(),
            title,
            file,
            series: series.into_iter().map(|s| s.label).collect(),
        });
    }
    Ok(plots)
}

/// Draws every plot the rows support into `out/plots/`; returns them in report order.
pub fn render_all(rows: &[BenchRow], out: &Path) -> Result<Vec<PlotFile>, ReportError> {
    let dir = out.join("plots");
    if !rows.iter().any(|r| r.is_ok()) {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(&dir).map_err(|source| ReportError::Io { path: dir, source })?;
    let mut plots = bar_plots(rows, "mission", out)?;
    plots.extend(grid_plots(rows, "fa", out)?);
    plots.extend(bar_plots(rows, "decode", out)?);
    plots.extend(grid_plots(rows, "fp8", out)?);
    Ok(plots)
}

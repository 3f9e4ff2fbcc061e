//! Paper-quality figures (PNG + SVG, embedded font) from the CSV tables that the probe, patch and SAS stages write.
//!
//! [`render_run`] looks in a run folder (`figures/<run>/`) for `probes.csv`, `patching.csv` and `sas.csv` and writes
//! every figure whose input exists, each as `<name>.png`, `<name>.svg` and the table behind it, `<name>.csv`:
//!
//! | figure | input | shows |
//! |---|---|---|
//! | `probe_accuracy`, `probe_auroc` | probes.csv | in-channel probe accuracy / AUROC per layer, one panel per token position x channel, one curve per probe method, 95% CI bands, chance line |
//! | `transfer` | probes.csv | AUROC of one probe method (logistic) per layer for every train -> test channel pair, one panel per position |
//! | `patching_shift` | patching.csv | cosine shift per single layer, forward and reverse, 95% CI error bars, zero line, one panel per channel |
//! | `sas_by_family` | sas.csv | SAS (ASR tool - ASR chat, percentage points) per attack family and model, 95% CI |
//! | `summary` | probes.csv and/or patching.csv | probe AUROC, transfer and patching on one page |
//!
//! (`patching_shift` and `sas_by_family` are not called `patching`/`sas` so that their tables do not overwrite the
//! input tables `patching.csv` and `sas.csv` in the same folder.)
//!
//! The in-memory functions ([`probe_figure`], [`transfer_figure`], [`patching_figure`], [`sas_figure`],
//! [`summary_figure`]) take parsed rows ([`ProbeRow`], [`PatchRow`], [`SasRow`]) and a [`FigureMeta`].
//!
//! Fonts: DejaVu Sans is compiled in (`assets/fonts/`); no system font is looked up. The PNG is rendered at
//! `png_scale` (default 2) times the SVG's pixel size, supersampled 2x for anti-aliasing, with its DPI recorded so it
//! prints at the SVG's size. The SVG draws all text as filled outlines (`<path aria-label="the text">`), so it
//! renders identically in browsers, Inkscape, rsvg or LaTeX converters and does not depend on installed fonts; the
//! price is that its text is not selectable (it stays searchable through `aria-label`).
mod render;
mod tables;
mod text;

use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use crate::stats::Estimate;
use render::{Axis, Ci, Figure, Marker, Panel, Pt, RefLine, Series};
use render::{BLUE, CYCLE, GREEN, ORANGE, PURPLE, VERMILLION};
use tables::{csv_field, csv_num, write_atomic};
pub use tables::{read_patching, read_probes, read_sas, PatchRow, ProbeRow, SasRow};

/// File stems of the figures.
pub const PROBE_ACCURACY: &str = "probe_accuracy";
pub const PROBE_AUROC: &str = "probe_auroc";
pub const TRANSFER: &str = "transfer";
pub const PATCHING: &str = "patching_shift";
pub const SAS: &str = "sas_by_family";
pub const SUMMARY: &str = "summary";

/// Errors of the figure stage; each names the file (and line and column where there is one).
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: line {line}: {message}")]
    Csv { path: PathBuf, line: usize, message: String },
    #[error("{path}: missing column `{column}` (the header has: {available})")]
    MissingColumn { path: PathBuf, column: String, available: String },
    #[error("{path}: line {line}, column `{column}`: {value:?} is not {expected}")]
    BadValue { path: PathBuf, line: usize, column: String, value: String, expected: String },
    #[error("{path}: no rows ({what})")]
    NoRows { path: PathBuf, what: String },
    #[error("figure {figure}: {message}")]
    Empty { figure: String, message: String },
    #[error("{dir}: nothing to plot (none of probes.csv, patching.csv, sas.csv is there)")]
    NothingToPlot { dir: PathBuf },
    #[error("{path}: drawing failed: {message}")]
    Draw { path: PathBuf, message: String },
}

/// What the figures say about the run, and the few choices they make.
#[derive(Debug, Clone)]
pub struct FigureMeta {
    /// Model name for the titles (empty: `render_run` takes it from `patching.json`'s `config.model`).
    pub model: String,
    /// Number of cases for the titles (default: from the tables, e.g. `n_test_cases`).
    pub n_cases: Option<usize>,
    /// Token positions for the probe figures, in panel order (empty: all in the table, `last` first).
    pub positions: Vec<String>,
    /// Position shown in the summary (default: `last` when present, else the first).
    pub summary_position: Option<String>,
    /// Probe method of the transfer figure.
    pub transfer_method: String,
    /// Patching family shown (`all` = every case).
    pub patch_family: String,
    /// PNG pixels per SVG pixel.
    pub png_scale: f64,
}

impl Default for FigureMeta {
    fn default() -> Self {
        FigureMeta {
            model: String::new(),
            n_cases: None,
            positions: Vec::new(),
            summary_position: None,
            transfer_method: "logistic".into(),
            patch_family: "all".into(),
            png_scale: 2.0,
        }
    }
}

impl FigureMeta {
    /// Defaults with a model name.
    pub fn new(model: impl Into<String>) -> Self {
        FigureMeta { model: model.into(), ..Default::default() }
    }

    fn model_label(&self) -> &str {
        if self.model.trim().is_empty() {
            "unknown model"
        } else {
            self.model.trim()
        }
    }
}

/// Which probe metric a figure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeMetric {
    Accuracy,
    Auroc,
}

impl ProbeMetric {
    fn name(self) -> &'static str {
        match self {
            ProbeMetric::Accuracy => "accuracy",
            ProbeMetric::Auroc => "auroc",
        }
    }
    fn label(self) -> &'static str {
        match self {
            ProbeMetric::Accuracy => "accuracy",
            ProbeMetric::Auroc => "AUROC",
        }
    }
    fn get(self, r: &ProbeRow) -> Estimate {
        match self {
            ProbeMetric::Accuracy => r.accuracy,
            ProbeMetric::Auroc => r.auroc,
        }
    }
}

// ---- names, colours and orders ----

fn position_label(p: &str) -> String {
    match p {
        "last" => "last token".into(),
        "payload_last" => "last payload token".into(),
        "user_end" => "end of user turn".into(),
        other => other.replace('_', " "),
    }
}

fn method_label(m: &str) -> String {
    match m {
        "logistic" => "logistic (linear)".into(),
        "rbf" => "RBF kernel (non-linear)".into(),
        "diffmeans" => "difference of means (linear)".into(),
        other => other.into(),
    }
}

fn method_style(m: &str, i: usize) -> (RGBColor, Marker, bool) {
    match m {
        "logistic" => (BLUE, Marker::Circle, false),
        "rbf" => (VERMILLION, Marker::Square, true),
        "diffmeans" => (GREEN, Marker::Triangle, false),
        _ => (CYCLE[(i + 4) % CYCLE.len()], Marker::Diamond, false),
    }
}

fn channel_color(c: &str, i: usize) -> RGBColor {
    match c {
        "chat" => BLUE,
        "tool" => ORANGE,
        _ => CYCLE[(i + 2) % CYCLE.len()],
    }
}

fn channel_marker(c: &str) -> Marker {
    match c {
        "chat" => Marker::Circle,
        "tool" => Marker::Square,
        _ => Marker::Diamond,
    }
}

/// Distinct values in order of first appearance, with `first` (when present) moved to the front.
fn ordered<'a>(values: impl Iterator<Item = &'a str>, first: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.iter().any(|o| o == v) {
            out.push(v.to_string());
        }
    }
    let mut front: Vec<String> = first.iter().filter(|f| out.iter().any(|o| o == *f)).map(|f| f.to_string()).collect();
    out.retain(|o| !first.contains(&o.as_str()));
    front.extend(out);
    front
}

fn sorted_layers(layers: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = layers.collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn finite(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)))
}

/// The y axis of a probe metric: from 0.45 (lower when the data go lower) to 1.
fn metric_axis(label: &str, lo: f64) -> Axis {
    let lo = if lo.is_finite() { (((lo - 0.02) * 20.0).floor() / 20.0).min(0.45) } else { 0.45 };
    let mut a = Axis::numeric(label, lo.max(0.0), 1.0, 6);
    a.range.1 = 1.015;
    a
}

/// A y axis over values that must include 0, padded by 8%.
fn signed_axis(label: &str, lo: f64, hi: f64) -> Axis {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo.min(0.0), hi.max(0.0)) } else { (0.0, 1.0) };
    let span = (hi - lo).max(1e-12);
    let (lo, hi) = (if lo < 0.0 { lo - 0.08 * span } else { lo - 0.03 * span }, hi + 0.08 * span);
    Axis::numeric(label, lo, hi, 5)
}

fn superscript(n: i32) -> String {
    n.to_string()
        .chars()
        .map(|c| match c {
            '-' => '\u{207B}',
            '0' => '\u{2070}',
            '1' => '\u{00B9}',
            '2' => '\u{00B2}',
            '3' => '\u{00B3}',
            d => char::from_u32(0x2070 + d.to_digit(10).unwrap_or(0)).unwrap_or(d),
        })
        .collect()
}

/// Power of ten that brings values of magnitude `max_abs` into [1, 10) when they are small or large.
fn exponent_for(max_abs: f64) -> i32 {
    if !max_abs.is_finite() || max_abs == 0.0 || (0.05..1000.0).contains(&max_abs) {
        0
    } else {
        max_abs.log10().floor() as i32
    }
}

fn n_phrase(n: Option<usize>, unit: &str) -> String {
    match n {
        Some(n) => format!("n = {n} {unit}"),
        None => String::new(),
    }
}

fn join_nonempty(parts: &[String], sep: &str) -> String {
    parts.iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>().join(sep)
}

// ---- probe figures ----

/// In a grid with shared axes, the x title goes on the bottom row and the y title on the left column only.
fn outer_labels_only(panel: &mut Panel, bottom_row: bool, left_column: bool) {
    if !bottom_row {
        panel.x.label.clear();
    }
    if !left_column {
        panel.y.label.clear();
    }
}

fn in_channel(rows: &[ProbeRow]) -> Vec<&ProbeRow> {
    rows.iter().filter(|r| r.train == r.test).collect()
}

fn positions_for(rows: &[&ProbeRow], meta: &FigureMeta, figure: &str) -> Result<Vec<String>, PlotError> {
    let present = ordered(rows.iter().map(|r| r.position.as_str()), &["last", "payload_last", "user_end"]);
    if meta.positions.is_empty() {
        return Ok(present);
    }
    for p in &meta.positions {
        if !present.contains(p) {
            return Err(PlotError::Empty {
                figure: figure.into(),
                message: format!("position {p:?} is not in the table (it has: {})", present.join(", ")),
            });
        }
    }
    Ok(meta.positions.clone())
}

fn probe_panel(
    rows: &[&ProbeRow],
    metric: ProbeMetric,
    position: &str,
    channel: &str,
    methods: &[String],
    axis: &Axis,
    layer_axis: &Axis,
) -> Panel {
    let series = methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (color, marker, dashed) = method_style(m, i);
            let mut pts: Vec<(usize, Estimate)> = rows
                .iter()
                .filter(|r| r.position == position && r.test == channel && &r.method == m)
                .map(|r| (r.layer, metric.get(r)))
                .collect();
            pts.sort_by_key(|p| p.0);
            Series {
                label: method_label(m),
                color,
                dashed,
                marker,
                ci: Ci::Band,
                bar_width: None,
                line: true,
                points: pts.iter().map(|(l, e)| Pt { x: *l as f64, y: e.value, lo: e.lo, hi: e.hi }).collect(),
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    Panel {
        caption: format!("{channel} channel \u{00B7} {}", position_label(position)),
        x: layer_axis.clone(),
        y: axis.clone(),
        refs: vec![RefLine { y: 0.5, dashed: true, label: Some("chance".into()) }],
        series,
        legend: false,
        note: None,
    }
}

/// Probe accuracy or AUROC per layer for the in-channel rows (train == test), one panel per position x channel.
/// Writes `<out_dir>/probe_<metric>.{png,svg,csv}`.
pub fn probe_figure(
    rows: &[ProbeRow],
    metric: ProbeMetric,
    meta: &FigureMeta,
    out_dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    let name = match metric {
        ProbeMetric::Accuracy => PROBE_ACCURACY,
        ProbeMetric::Auroc => PROBE_AUROC,
    };
    let rows = in_channel(rows);
    if rows.is_empty() {
        return Err(PlotError::Empty { figure: name.into(), message: "no in-channel rows (train == test)".into() });
    }
    let positions = positions_for(&rows, meta, name)?;
    let rows: Vec<&ProbeRow> = rows.into_iter().filter(|r| positions.contains(&r.position)).collect();
    let channels = ordered(rows.iter().map(|r| r.test.as_str()), &["chat", "tool"]);
    let methods = ordered(rows.iter().map(|r| r.method.as_str()), &["logistic", "rbf", "diffmeans"]);
    let layers = sorted_layers(rows.iter().map(|r| r.layer));
    let (lo, _) = finite(rows.iter().flat_map(|r| {
        let e = metric.get(r);
        [e.value, e.lo]
    }));
    let axis = metric_axis(&format!("{} (train = test channel)", metric.label()), lo);
    let layer_axis = Axis::layers(&layers);
    let mut panels = Vec::new();
    for (i, p) in positions.iter().enumerate() {
        for (j, c) in channels.iter().enumerate() {
            let mut panel = probe_panel(&rows, metric, p, c, &methods, &axis, &layer_axis);
            outer_labels_only(&mut panel, i + 1 == positions.len(), j == 0);
            panels.push(panel);
        }
    }
    let n = meta.n_cases.or_else(|| rows.iter().map(|r| r.n_test_cases).max());
    let fig = Figure {
        title: format!("Probe {} by layer \u{2014} {}", metric.label(), meta.model_label()),
        subtitle: join_nonempty(
            &[
                n_phrase(n, "held-out cases per channel"),
                "probe trained and tested on the same channel".into(),
                "bands: 95% bootstrap CI over cases".into(),
            ],
            " \u{00B7} ",
        ),
        shared_legend: true,
        panels,
        cols: channels.len().min(3),
        panel: (450.0, 300.0),
    };
    let mut csv = String::from("metric,position,channel,method,layer,n_cases,value,lo,hi\n");
    for p in &positions {
        for c in &channels {
            for m in &methods {
                let mut sel: Vec<&&ProbeRow> =
                    rows.iter().filter(|r| &r.position == p && &r.test == c && &r.method == m).collect();
                sel.sort_by_key(|r| r.layer);
                for r in sel {
                    let e = metric.get(r);
                    csv.push_str(&format!(
                        "{},{},{},{},{},{},{},{},{}\n",
                        metric.name(),
                        csv_field(p),
                        csv_field(c),
                        csv_field(m),
                        r.layer,
                        r.n_test_cases,
                        csv_num(e.value),
                        csv_num(e.lo),
                        csv_num(e.hi)
                    ));
                }
            }
        }
    }
    finish(&fig, out_dir, name, &csv, meta)
}

fn transfer_pairs(rows: &[&ProbeRow]) -> Vec<(String, String)> {
    let channels = ordered(rows.iter().flat_map(|r| [r.train.as_str(), r.test.as_str()]), &["chat", "tool"]);
    let channels: Vec<String> = channels.into_iter().filter(|c| c != "pooled").collect();
    let mut pairs: Vec<(String, String)> = channels.iter().map(|c| (c.clone(), c.clone())).collect();
    for a in &channels {
        for b in &channels {
            if a != b {
                pairs.push((a.clone(), b.clone()));
            }
        }
    }
    pairs.retain(|(a, b)| rows.iter().any(|r| &r.train == a && &r.test == b));
    pairs
}

fn transfer_panel(rows: &[&ProbeRow], position: &str, method: &str, axis: &Axis, layer_axis: &Axis) -> Panel {
    let pairs = transfer_pairs(rows);
    let channels = ordered(pairs.iter().map(|p| p.0.as_str()), &["chat", "tool"]);
    let series = pairs
        .iter()
        .map(|(a, b)| {
            let ci = channels.iter().position(|c| c == a).unwrap_or(0);
            let mut pts: Vec<(usize, Estimate)> = rows
                .iter()
                .filter(|r| r.position == position && r.method == method && &r.train == a && &r.test == b)
                .map(|r| (r.layer, r.auroc))
                .collect();
            pts.sort_by_key(|p| p.0);
            Series {
                label: format!("{a} \u{2192} {b}"),
                color: channel_color(a, ci),
                dashed: a != b,
                marker: channel_marker(b),
                ci: Ci::Band,
                bar_width: None,
                line: true,
                points: pts.iter().map(|(l, e)| Pt { x: *l as f64, y: e.value, lo: e.lo, hi: e.hi }).collect(),
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    Panel {
        caption: position_label(position),
        x: layer_axis.clone(),
        y: axis.clone(),
        refs: vec![RefLine { y: 0.5, dashed: true, label: Some("chance".into()) }],
        series,
        legend: false,
        note: None,
    }
}

fn transfer_rows<'a>(rows: &'a [ProbeRow], meta: &FigureMeta) -> Result<(Vec<&'a ProbeRow>, String), PlotError> {
    let methods = ordered(rows.iter().map(|r| r.method.as_str()), &[]);
    let method = if methods.contains(&meta.transfer_method) {
        meta.transfer_method.clone()
    } else {
        return Err(PlotError::Empty {
            figure: TRANSFER.into(),
            message: format!("method {:?} is not in the table (it has: {})", meta.transfer_method, methods.join(", ")),
        });
    };
    let sel: Vec<&ProbeRow> = rows.iter().filter(|r| r.method == method && r.train != "pooled").collect();
    if !sel.iter().any(|r| r.train != r.test) {
        return Err(PlotError::Empty {
            figure: TRANSFER.into(),
            message: "no cross-channel rows (train != test): the run has one channel".into(),
        });
    }
    Ok((sel, method))
}

/// Cross-channel transfer: AUROC per layer of the `meta.transfer_method` probe for every train -> test channel
/// pair (in-channel solid, across channels dashed), one panel per position. Writes `<out_dir>/transfer.*`.
pub fn transfer_figure(rows: &[ProbeRow], meta: &FigureMeta, out_dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let (sel, method) = transfer_rows(rows, meta)?;
    let positions = positions_for(&sel, meta, TRANSFER)?;
    let sel: Vec<&ProbeRow> = sel.into_iter().filter(|r| positions.contains(&r.position)).collect();
    let layers = sorted_layers(sel.iter().map(|r| r.layer));
    let (lo, _) = finite(sel.iter().flat_map(|r| [r.auroc.value, r.auroc.lo]));
    let axis = metric_axis("AUROC on the test channel", lo);
    let layer_axis = Axis::layers(&layers);
    let panels: Vec<Panel> = positions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut panel = transfer_panel(&sel, p, &method, &axis, &layer_axis);
            let cols = positions.len().min(3);
            outer_labels_only(&mut panel, i + cols >= positions.len(), i % cols == 0);
            panel
        })
        .collect();
    let n = meta.n_cases.or_else(|| sel.iter().map(|r| r.n_test_cases).max());
    let fig = Figure {
        title: format!("Cross-channel transfer of the {method} probe \u{2014} {}", meta.model_label()),
        subtitle: join_nonempty(
            &[
                "train \u{2192} test channel; solid: same channel, dashed: across channels".into(),
                n_phrase(n, "held-out cases"),
                "bands: 95% CI".into(),
            ],
            " \u{00B7} ",
        ),
        shared_legend: true,
        cols: positions.len().min(3),
        panels,
        panel: (420.0, 300.0),
    };
    let mut csv = String::from("metric,position,method,train,test,layer,n_cases,value,lo,hi\n");
    let pairs = transfer_pairs(&sel);
    for p in &positions {
        for (a, b) in &pairs {
            let mut s: Vec<&&ProbeRow> =
                sel.iter().filter(|r| &r.position == p && &r.train == a && &r.test == b).collect();
            s.sort_by_key(|r| r.layer);
            for r in s {
                csv.push_str(&format!(
                    "auroc,{},{},{},{},{},{},{},{},{}\n",
                    csv_field(p),
                    csv_field(&method),
                    csv_field(a),
                    csv_field(b),
                    r.layer,
                    r.n_test_cases,
                    csv_num(r.auroc.value),
                    csv_num(r.auroc.lo),
                    csv_num(r.auroc.hi)
                ));
            }
        }
    }
    finish(&fig, out_dir, TRANSFER, &csv, meta)
}

// ---- patching ----

fn patch_rows<'a>(rows: &'a [PatchRow], meta: &FigureMeta) -> Result<Vec<&'a PatchRow>, PlotError> {
    let families = ordered(rows.iter().map(|r| r.family.as_str()), &["all"]);
    if !families.contains(&meta.patch_family) {
        return Err(PlotError::Empty {
            figure: PATCHING.into(),
            message: format!("family {:?} is not in the table (it has: {})", meta.patch_family, families.join(", ")),
        });
    }
    let sel: Vec<&PatchRow> =
        rows.iter().filter(|r| r.family == meta.patch_family && r.single_layer().is_some()).collect();
    if sel.is_empty() {
        return Err(PlotError::Empty {
            figure: PATCHING.into(),
            message: "no single-layer rows (only multi-layer sets such as 12+20 or 18..29)".into(),
        });
    }
    Ok(sel)
}

fn direction_style(d: &str) -> (RGBColor, Marker, String) {
    match d {
        "forward" => (PURPLE, Marker::Circle, "forward (adversarial \u{2192} benign)".into()),
        "reverse" => (GREEN, Marker::Square, "reverse (benign \u{2192} adversarial)".into()),
        other => (VERMILLION, Marker::Diamond, other.into()),
    }
}

fn patch_panel(rows: &[&PatchRow], channel: &str, layer_axis: &Axis, min_gap: f64) -> Panel {
    let directions = ordered(rows.iter().map(|r| r.direction.as_str()), &["forward", "reverse"]);
    let chan: Vec<&&PatchRow> = rows.iter().filter(|r| r.channel == channel).collect();
    let (lo, hi) = finite(chan.iter().flat_map(|r| [r.shift.value, r.shift.lo, r.shift.hi]));
    let k = exponent_for(lo.abs().max(hi.abs()));
    let f = 10f64.powi(-k);
    let label =
        if k == 0 { "cosine shift".to_string() } else { format!("cosine shift (\u{00D7}10{})", superscript(k)) };
    let nd = directions.len() as f64;
    let dodge = min_gap * 0.09;
    let series = directions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let (color, marker, label) = direction_style(d);
            let off = (i as f64 - (nd - 1.0) / 2.0) * dodge;
            let mut pts: Vec<(usize, Estimate)> = chan
                .iter()
                .filter(|r| &r.direction == d)
                .filter_map(|r| r.single_layer().map(|l| (l, r.shift)))
                .collect();
            pts.sort_by_key(|p| p.0);
            Series {
                label,
                color,
                dashed: false,
                marker,
                ci: Ci::Bars,
                bar_width: None,
                line: true,
                points: pts
                    .iter()
                    .map(|(l, e)| Pt { x: *l as f64 + off, y: e.value * f, lo: e.lo * f, hi: e.hi * f })
                    .collect(),
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    Panel {
        caption: format!("{channel} channel"),
        x: layer_axis.clone(),
        y: signed_axis(&label, lo * f, hi * f),
        refs: vec![RefLine { y: 0.0, dashed: false, label: None }],
        series,
        legend: false,
        note: None,
    }
}

fn min_gap(layers: &[usize]) -> f64 {
    layers.windows(2).map(|w| (w[1] - w[0]) as f64).fold(f64::INFINITY, f64::min).clamp(1.0, 8.0)
}

/// Patching shift per single layer, forward and reverse with 95% CI error bars and a zero line, one panel per
/// channel (each with its own y scale), for `meta.patch_family` (default `all`). Multi-layer sets are left out.
/// Writes `<out_dir>/patching_shift.*`.
pub fn patching_figure(rows: &[PatchRow], meta: &FigureMeta, out_dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let sel = patch_rows(rows, meta)?;
    let channels = ordered(sel.iter().map(|r| r.channel.as_str()), &["chat", "tool"]);
    let layers = sorted_layers(sel.iter().filter_map(|r| r.single_layer()));
    let layer_axis = Axis::layers(&layers);
    let gap = min_gap(&layers);
    let panels: Vec<Panel> = channels.iter().map(|c| patch_panel(&sel, c, &layer_axis, gap)).collect();
    let n = meta.n_cases.or_else(|| sel.iter().map(|r| r.n).max());
    let skipped = ordered(
        rows.iter().filter(|r| r.family == meta.patch_family && r.single_layer().is_none()).map(|r| r.layers.as_str()),
        &[],
    );
    let family = if meta.patch_family == "all" { "all families".to_string() } else { meta.patch_family.clone() };
    let mut sub2 = vec!["bars: 95% bootstrap CI".to_string(), "y scales differ per panel".to_string()];
    if !skipped.is_empty() {
        sub2.push(format!("multi-layer sets not shown ({})", skipped.join(", ")));
    }
    let fig = Figure {
        title: format!("Activation patching by layer \u{2014} {}", meta.model_label()),
        subtitle: format!(
            "{}\n{}",
            join_nonempty(
                &[family, n_phrase(n, "case pairs per channel"), "last-token residual stream".into()],
                " \u{00B7} "
            ),
            sub2.join(" \u{00B7} ")
        ),
        shared_legend: true,
        cols: channels.len().min(3),
        panels,
        panel: (450.0, 300.0),
    };
    let mut csv =
        String::from("family,channel,direction,layer,n,shift,shift_lo,shift_hi,recovery,recovery_lo,recovery_hi\n");
    let directions = ordered(sel.iter().map(|r| r.direction.as_str()), &["forward", "reverse"]);
    for c in &channels {
        for d in &directions {
            let mut s: Vec<&&PatchRow> = sel.iter().filter(|r| &r.channel == c && &r.direction == d).collect();
            s.sort_by_key(|r| r.single_layer());
            for r in s {
                let rec = r.recovery.unwrap_or(Estimate { value: f64::NAN, lo: f64::NAN, hi: f64::NAN });
                csv.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{},{},{}\n",
                    csv_field(&r.family),
                    csv_field(c),
                    csv_field(d),
                    r.layers,
                    r.n,
                    csv_num(r.shift.value),
                    csv_num(r.shift.lo),
                    csv_num(r.shift.hi),
                    csv_num(rec.value),
                    csv_num(rec.lo),
                    csv_num(rec.hi)
                ));
            }
        }
    }
    finish(&fig, out_dir, PATCHING, &csv, meta)
}

// ---- SAS ----

/// SAS per attack family (x) and model (bars), with 95% CI error bars and a zero line. Writes
/// `<out_dir>/sas_by_family.*`.
pub fn sas_figure(rows: &[SasRow], meta: &FigureMeta, out_dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if rows.is_empty() {
        return Err(PlotError::Empty { figure: SAS.into(), message: "no SAS rows".into() });
    }
    let families =
        ordered(rows.iter().map(|r| r.family.as_str()), &["ALL", "TP", "TP-P1", "TP-P2", "TP-P3", "IPI", "CTS"]);
    let models = ordered(rows.iter().map(|r| r.model.as_str()), &[]);
    let nm = models.len() as f64;
    let group = 0.76;
    let bw = group / nm;
    let series: Vec<Series> = models
        .iter()
        .enumerate()
        .map(|(j, m)| {
            let off = (j as f64 - (nm - 1.0) / 2.0) * bw;
            Series {
                label: m.clone(),
                color: CYCLE[j % CYCLE.len()],
                dashed: false,
                marker: Marker::Circle,
                ci: Ci::Bars,
                bar_width: Some(bw * 0.88),
                line: false,
                points: families
                    .iter()
                    .enumerate()
                    .filter_map(|(i, f)| {
                        rows.iter().find(|r| &r.model == m && &r.family == f).map(|r| Pt {
                            x: i as f64 + off,
                            y: r.sas.value,
                            lo: r.sas.lo,
                            hi: r.sas.hi,
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    let tick_labels: Vec<String> = families
        .iter()
        .map(|f| {
            let ns: Vec<usize> = rows.iter().filter(|r| &r.family == f).map(|r| r.n).collect();
            let (a, b) = (ns.iter().min().copied().unwrap_or(0), ns.iter().max().copied().unwrap_or(0));
            if a == b {
                format!("{f} (n={a})")
            } else {
                format!("{f} (n={a}\u{2013}{b})")
            }
        })
        .collect();
    let (lo, hi) = finite(rows.iter().flat_map(|r| [r.sas.value, r.sas.lo, r.sas.hi]));
    let x = Axis {
        label: "attack family (n = matched cases)".into(),
        range: (-0.5, families.len() as f64 - 0.5),
        ticks: (0..families.len()).map(|i| i as f64).collect(),
        tick_labels: Some(tick_labels),
        decimals: 0,
    };
    let panel = Panel {
        caption: "SAS = ASR(tool) \u{2212} ASR(chat)".into(),
        x,
        y: signed_axis("SAS (percentage points)", lo, hi),
        refs: vec![RefLine { y: 0.0, dashed: false, label: None }],
        series,
        legend: false,
        note: None,
    };
    let width = (140.0 * families.len() as f64 * nm.max(1.0).sqrt()).clamp(560.0, 1300.0);
    let fig = Figure {
        title: format!("Safety Asymmetry Score by attack family \u{2014} {}", models.join(", ")),
        subtitle: "positive: attacks succeed more often through the tool channel \u{00B7} error bars: 95% bootstrap CI"
            .into(),
        shared_legend: true,
        panels: vec![panel],
        cols: 1,
        panel: (width, 340.0),
    };
    let mut csv = String::from(
        "model,family,n,sas,sas_lo,sas_hi,asr_chat,asr_chat_lo,asr_chat_hi,asr_tool,asr_tool_lo,asr_tool_hi\n",
    );
    for m in &models {
        for f in &families {
            if let Some(r) = rows.iter().find(|r| &r.model == m && &r.family == f) {
                csv.push_str(&format!("{},{},{}", csv_field(m), csv_field(f), r.n));
                for e in [r.sas, r.asr_chat, r.asr_tool] {
                    csv.push_str(&format!(",{},{},{}", csv_num(e.value), csv_num(e.lo), csv_num(e.hi)));
                }
                csv.push('\n');
            }
        }
    }
    let _ = meta;
    finish(&fig, out_dir, SAS, &csv, meta)
}

// ---- summary ----

/// One page: (a) in-channel probe AUROC (logistic and RBF) and (b) transfer (logistic) at one position, (c, d)
/// patching shift per channel. Panels whose table is missing are left out. Writes `<out_dir>/summary.*`.
pub fn summary_figure(
    probes: Option<&[ProbeRow]>,
    patching: Option<&[PatchRow]>,
    meta: &FigureMeta,
    out_dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    let mut panels: Vec<Panel> = Vec::new();
    let mut csv = String::from("panel,series,position,layer,n,value,lo,hi\n");
    let mut n = meta.n_cases;
    let mut position_note = String::new();
    let letter = |i: usize| char::from(b'a' + i as u8);
    if let Some(rows) = probes {
        let present = ordered(rows.iter().map(|r| r.position.as_str()), &["last"]);
        let position = meta.summary_position.clone().or_else(|| present.first().cloned()).unwrap_or_default();
        if !present.contains(&position) {
            return Err(PlotError::Empty {
                figure: SUMMARY.into(),
                message: format!("position {position:?} is not in the table (it has: {})", present.join(", ")),
            });
        }
        position_note = format!("probes at the {}", position_label(&position));
        let at: Vec<&ProbeRow> = rows.iter().filter(|r| r.position == position).collect();
        n = n.or_else(|| at.iter().map(|r| r.n_test_cases).max());
        let layers = sorted_layers(at.iter().map(|r| r.layer));
        let layer_axis = Axis::layers(&layers);
        // (a) in-channel AUROC, logistic vs RBF per channel.
        let inch: Vec<&&ProbeRow> =
            at.iter().filter(|r| r.train == r.test && (r.method == "logistic" || r.method == "rbf")).collect();
        let channels = ordered(inch.iter().map(|r| r.test.as_str()), &["chat", "tool"]);
        let mut series = Vec::new();
        for (ci, c) in channels.iter().enumerate() {
            for m in ["logistic", "rbf"] {
                let mut pts: Vec<&&&ProbeRow> = inch.iter().filter(|r| &r.test == c && r.method == m).collect();
                if pts.is_empty() {
                    continue;
                }
                pts.sort_by_key(|r| r.layer);
                let label = format!("{c}, {}", if m == "rbf" { "RBF" } else { "logistic" });
                for r in &pts {
                    csv.push_str(&summary_line("a", &label, &position, r.layer, r.n_test_cases, r.auroc));
                }
                series.push(Series {
                    label,
                    color: channel_color(c, ci),
                    dashed: m == "rbf",
                    marker: channel_marker(c),
                    ci: Ci::Band,
                    bar_width: None,
                    line: true,
                    points: pts
                        .iter()
                        .map(|r| Pt { x: r.layer as f64, y: r.auroc.value, lo: r.auroc.lo, hi: r.auroc.hi })
                        .collect(),
                });
            }
        }
        let (lo_a, _) = finite(inch.iter().flat_map(|r| [r.auroc.value, r.auroc.lo]));
        // (b) transfer.
        let transfer = transfer_rows(rows, meta).ok().map(|(sel, method)| {
            let sel: Vec<&ProbeRow> = sel.into_iter().filter(|r| r.position == position).collect();
            (sel, method)
        });
        let lo_b = transfer
            .as_ref()
            .map(|(sel, _)| finite(sel.iter().flat_map(|r| [r.auroc.value, r.auroc.lo])).0)
            .unwrap_or(f64::INFINITY);
        let axis = metric_axis("AUROC", lo_a.min(lo_b));
        if !series.is_empty() {
            panels.push(Panel {
                caption: format!("({}) Probe AUROC, in-channel", letter(panels.len())),
                x: layer_axis.clone(),
                y: axis.clone(),
                refs: vec![RefLine { y: 0.5, dashed: true, label: Some("chance".into()) }],
                series,
                legend: true,
                note: None,
            });
        }
        if let Some((sel, method)) = transfer {
            let mut p = transfer_panel(&sel, &position, &method, &axis, &layer_axis);
            for s in &p.series {
                for q in &s.points {
                    let r = sel
                        .iter()
                        .find(|r| r.layer as f64 == q.x && format!("{} \u{2192} {}", r.train, r.test) == s.label);
                    if let Some(r) = r {
                        csv.push_str(&summary_line("b", &s.label, &position, r.layer, r.n_test_cases, r.auroc));
                    }
                }
            }
            p.caption = format!("({}) Transfer across channels ({method})", letter(panels.len()));
            p.legend = true;
            panels.push(p);
        }
    }
    if let Some(rows) = patching {
        if let Ok(sel) = patch_rows(rows, meta) {
            n = n.or_else(|| sel.iter().map(|r| r.n).max());
            let channels = ordered(sel.iter().map(|r| r.channel.as_str()), &["chat", "tool"]);
            let layers = sorted_layers(sel.iter().filter_map(|r| r.single_layer()));
            let layer_axis = Axis::layers(&layers);
            let gap = min_gap(&layers);
            for c in &channels {
                let l = letter(panels.len());
                let mut p = patch_panel(&sel, c, &layer_axis, gap);
                p.caption = format!("({l}) Patching shift, {c} channel");
                p.legend = true;
                for r in sel.iter().filter(|r| &r.channel == c) {
                    let label = direction_style(&r.direction).2;
                    csv.push_str(&summary_line(
                        &l.to_string(),
                        &label,
                        "last",
                        r.single_layer().unwrap_or(0),
                        r.n,
                        r.shift,
                    ));
                }
                panels.push(p);
            }
        }
    }
    if panels.is_empty() {
        return Err(PlotError::Empty { figure: SUMMARY.into(), message: "no probe or patching rows to show".into() });
    }
    let fig = Figure {
        title: format!("Channel trust at a glance \u{2014} {}", meta.model_label()),
        subtitle: join_nonempty(
            &[n_phrase(n, "cases per channel"), position_note, "shaded and bars: 95% bootstrap CIs".into()],
            " \u{00B7} ",
        ),
        shared_legend: false,
        cols: 2,
        panels,
        panel: (460.0, 290.0),
    };
    finish(&fig, out_dir, SUMMARY, &csv, meta)
}

fn summary_line(panel: &str, series: &str, position: &str, layer: usize, n: usize, e: Estimate) -> String {
    format!(
        "{},{},{},{},{},{},{},{}\n",
        panel,
        csv_field(series),
        csv_field(position),
        layer,
        n,
        csv_num(e.value),
        csv_num(e.lo),
        csv_num(e.hi)
    )
}

fn finish(fig: &Figure, out_dir: &Path, name: &str, csv: &str, meta: &FigureMeta) -> Result<Vec<PathBuf>, PlotError> {
    let stem = out_dir.join(name);
    let mut paths = render::render(fig, &stem, meta.png_scale)?;
    let csv_path = render::with_ext(&stem, "csv");
    write_atomic(&csv_path, csv.as_bytes())?;
    paths.push(csv_path);
    Ok(paths)
}

// ---- a run folder ----

/// The model named in a run's `patching.json` (`config.model`, a path: its file stem), if any.
pub fn model_from_run(run_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run_dir.join("patching.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let model = v.get("config")?.get("model")?.as_str()?;
    let p = Path::new(model.trim_end_matches('/'));
    p.file_stem().or_else(|| p.file_name()).map(|s| s.to_string_lossy().into_owned())
}

/// Renders every figure whose input table is in `run_dir` (`probes.csv` -> probe_accuracy, probe_auroc, transfer;
/// `patching.csv` -> patching_shift; `sas.csv` -> sas_by_family; probes and/or patching -> summary), into
/// `run_dir`. Returns the written paths (PNG, SVG, CSV per figure). The transfer figure is skipped when the run
/// has a single channel. An empty `meta.model` is filled from `patching.json` when it names the model.
pub fn render_run(run_dir: &Path, meta: &FigureMeta) -> Result<Vec<PathBuf>, PlotError> {
    let mut meta = meta.clone();
    if meta.model.trim().is_empty() {
        if let Some(m) = model_from_run(run_dir) {
            meta.model = m;
        }
    }
    let probes_path = run_dir.join("probes.csv");
    let patching_path = run_dir.join("patching.csv");
    let sas_path = run_dir.join("sas.csv");
    let probes = if probes_path.is_file() { Some(read_probes(&probes_path)?) } else { None };
    let patching = if patching_path.is_file() { Some(read_patching(&patching_path)?) } else { None };
    let sas = if sas_path.is_file() { Some(read_sas(&sas_path)?) } else { None };
    if probes.is_none() && patching.is_none() && sas.is_none() {
        return Err(PlotError::NothingToPlot { dir: run_dir.to_path_buf() });
    }
    let mut out = Vec::new();
    if let Some(rows) = &probes {
        out.extend(probe_figure(rows, ProbeMetric::Accuracy, &meta, run_dir)?);
        out.extend(probe_figure(rows, ProbeMetric::Auroc, &meta, run_dir)?);
        if rows.iter().any(|r| r.train != r.test && r.train != "pooled") {
            out.extend(transfer_figure(rows, &meta, run_dir)?);
        }
    }
    if let Some(rows) = &patching {
        out.extend(patching_figure(rows, &meta, run_dir)?);
    }
    if let Some(rows) = &sas {
        out.extend(sas_figure(rows, &meta, run_dir)?);
    }
    if probes.is_some() || patching.is_some() {
        out.extend(summary_figure(probes.as_deref(), patching.as_deref(), &meta, run_dir)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_and_superscripts() {
        assert_eq!(exponent_for(0.0135), -2);
        assert_eq!(exponent_for(0.0004), -4);
        assert_eq!(exponent_for(0.5), 0);
        assert_eq!(superscript(-4), "\u{207B}\u{2074}");
        assert_eq!(superscript(-3), "\u{207B}\u{00B3}");
    }

    #[test]
    fn order_puts_known_first() {
        assert_eq!(ordered(["tool", "x", "chat", "tool"].into_iter(), &["chat", "tool"]), vec!["chat", "tool", "x"]);
    }
}

//! One renderer for every figure: a figure is a title, a subtitle, an optional shared legend and a grid of panels;
//! a panel is a caption, two axes, reference lines and series. Drawing the same description on the PNG and the SVG
//! backend keeps both identical, and sharing one renderer keeps every figure in one style (palette, sizes, margins).
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::text::{register_fonts, replace_svg_text, Line, OutlineText, TextMode, FAMILY};
use super::PlotError;

// ---- style: one palette and one set of sizes (in SVG pixels; the PNG multiplies them by its scale) ----

/// Okabe-Ito colour-blind-safe palette.
pub(crate) const BLUE: RGBColor = RGBColor(0, 114, 178);
pub(crate) const ORANGE: RGBColor = RGBColor(230, 159, 0);
pub(crate) const GREEN: RGBColor = RGBColor(0, 158, 115);
pub(crate) const VERMILLION: RGBColor = RGBColor(213, 94, 0);
pub(crate) const PURPLE: RGBColor = RGBColor(204, 121, 167);
pub(crate) const SKY: RGBColor = RGBColor(86, 180, 233);
pub(crate) const YELLOW: RGBColor = RGBColor(240, 228, 66);
pub(crate) const INK: RGBColor = RGBColor(34, 34, 34);
pub(crate) const GREY: RGBColor = RGBColor(110, 110, 110);
const GRID: RGBColor = RGBColor(228, 228, 228);

/// Colours for series that have no fixed colour, in order.
pub(crate) const CYCLE: [RGBColor; 7] = [BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, YELLOW];

const TITLE: f64 = 20.0;
const SUBTITLE: f64 = 14.0;
const CAPTION: f64 = 15.5;
const AXIS: f64 = 15.0;
const TICK: f64 = 14.0;
const LEGEND: f64 = 14.5;
const NOTE: f64 = 12.5;
const MARGIN: f64 = 18.0;
const LINE_W: f64 = 2.0;
const MARKER: f64 = 4.0;

/// Marker shapes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
}

/// How a series shows its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ci {
    /// A shaded band between lo and hi (per-layer curves).
    Band,
    /// Error bars with caps.
    Bars,
}

/// A point with its interval (NaN bounds: no interval drawn there).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pt {
    pub x: f64,
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

/// A data series.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub label: String,
    pub color: RGBColor,
    pub dashed: bool,
    pub marker: Marker,
    pub ci: Ci,
    /// Draw bars from 0 of this width (in x units) instead of a line.
    pub bar_width: Option<f64>,
    /// Connect the points with a line (ignored for bars).
    pub line: bool,
    pub points: Vec<Pt>,
}

/// An axis: label, range, ticks and their labels.
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    pub label: String,
    pub range: (f64, f64),
    pub ticks: Vec<f64>,
    /// Tick labels (same length as `ticks`); `None`: numbers with `decimals` decimals.
    pub tick_labels: Option<Vec<String>>,
    pub decimals: usize,
}

impl Axis {
    /// A numeric axis over `[lo, hi]` with "nice" ticks (about `target` of them).
    pub(crate) fn numeric(label: &str, lo: f64, hi: f64, target: usize) -> Axis {
        let (ticks, decimals) = nice_ticks(lo, hi, target);
        Axis { label: label.to_string(), range: (lo, hi), ticks, tick_labels: None, decimals }
    }

    /// A layer axis: ticks at the layers themselves when there are at most 12, else nice ticks.
    pub(crate) fn layers(layers: &[usize]) -> Axis {
        let lo = layers.iter().copied().min().unwrap_or(0) as f64;
        let hi = layers.iter().copied().max().unwrap_or(1) as f64;
        let pad = ((hi - lo) * 0.07).max(0.6);
        if layers.len() <= 12 {
            Axis {
                label: "layer".into(),
                range: (lo - pad, hi + pad),
                ticks: layers.iter().map(|&l| l as f64).collect(),
                tick_labels: None,
                decimals: 0,
            }
        } else {
            let (ticks, _) = nice_ticks(lo, hi, 8);
            let ticks = ticks.into_iter().filter(|t| t.fract() == 0.0).collect();
            Axis { label: "layer".into(), range: (lo - pad, hi + pad), ticks, tick_labels: None, decimals: 0 }
        }
    }

    fn format(&self, v: f64) -> String {
        if let Some(labels) = &self.tick_labels {
            let i = self
                .ticks
                .iter()
                .enumerate()
                .min_by(|a, b| (a.1 - v).abs().total_cmp(&(b.1 - v).abs()))
                .map(|(i, _)| i)
                .unwrap_or(0);
            return labels.get(i).cloned().unwrap_or_default();
        }
        let s = format!("{:.*}", self.decimals, v);
        // A true minus sign, and no "-0".
        if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
            s[1..].to_string()
        } else {
            s.replacen('-', "\u{2212}", 1)
        }
    }
}

/// Ticks at 1, 2, 2.5 or 5 x 10^k covering `[lo, hi]`, and the decimals they need.
pub(crate) fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, usize) {
    let span = (hi - lo).abs().max(1e-12);
    let raw = span / target.max(2) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step - 1e-9).ceil();
    let mut ticks = Vec::new();
    let mut k = first;
    while k * step <= hi + step * 1e-9 {
        let t = k * step;
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        k += 1.0;
    }
    let mut decimals = 0;
    while decimals < 8
        && ((step * 10f64.powi(decimals as i32)).round() - step * 10f64.powi(decimals as i32)).abs() > 1e-6
    {
        decimals += 1;
    }
    (ticks, decimals)
}

/// A linear f64 axis whose ticks (and grid lines) are exactly the given values.
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        if self.hi == self.lo {
            return (limit.0 + limit.1) / 2;
        }
        let t = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// A horizontal reference line (chance level, zero).
#[derive(Debug, Clone)]
pub(crate) struct RefLine {
    pub y: f64,
    pub dashed: bool,
    /// Small label at the right end, inside the plot.
    pub label: Option<String>,
}

/// One panel of a figure.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    pub caption: String,
    pub x: Axis,
    pub y: Axis,
    pub refs: Vec<RefLine>,
    pub series: Vec<Series>,
    /// Draw this panel's own legend above it (used when panels show different series).
    pub legend: bool,
    /// A note drawn in the plot's top-left corner (e.g. "no data").
    pub note: Option<String>,
}

/// A legend entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub label: String,
    pub color: RGBColor,
    pub dashed: bool,
    pub marker: Marker,
    pub bar: bool,
}

impl Entry {
    fn of(s: &Series) -> Entry {
        Entry { label: s.label.clone(), color: s.color, dashed: s.dashed, marker: s.marker, bar: s.bar_width.is_some() }
    }
}

/// A whole figure.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    pub title: String,
    pub subtitle: String,
    /// Shared legend under the subtitle: the distinct series of all panels without their own legend.
    pub shared_legend: bool,
    pub panels: Vec<Panel>,
    pub cols: usize,
    /// Size of one panel's chart (without caption and legend), SVG pixels.
    pub panel: (f64, f64),
}

// ---- layout ----

struct Layout {
    width: f64,
    height: f64,
    header: f64,
    cell_h: f64,
    cols: usize,
    rows: usize,
    shared_rows: Vec<Vec<Entry>>,
    panel_legends: Vec<Vec<Vec<Entry>>>,
    panel_legend_h: f64,
}

fn text_width(text: &str, size: f64, bold: bool) -> f64 {
    f64::from(Line::new(text, size, bold).width)
}

const SWATCH: f64 = 30.0;
const ENTRY_GAP: f64 = 22.0;

fn entry_width(e: &Entry) -> f64 {
    SWATCH + 7.0 + text_width(&e.label, LEGEND, false)
}

/// Breaks legend entries into rows no wider than `width`.
fn legend_rows(entries: &[Entry], width: f64) -> Vec<Vec<Entry>> {
    let mut rows: Vec<Vec<Entry>> = Vec::new();
    let mut w = 0.0;
    for e in entries {
        let ew = entry_width(e);
        match rows.last_mut() {
            Some(row) if w + ENTRY_GAP + ew <= width => {
                row.push(e.clone());
                w += ENTRY_GAP + ew;
            }
            _ => {
                rows.push(vec![e.clone()]);
                w = ew;
            }
        }
    }
    rows
}

fn dedup_entries(entries: impl IntoIterator<Item = Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for e in entries {
        if !out.iter().any(|o| o.label == e.label) {
            out.push(e);
        }
    }
    out
}

const LEGEND_ROW: f64 = 24.0;
/// Width of the y tick labels + axis title, and the chart's right margin.
const Y_AREA: f64 = 66.0;
const RIGHT: f64 = 14.0;
const CAPTION_H: f64 = 28.0;

impl Figure {
    fn layout(&self) -> Layout {
        let cols = self.cols.max(1).min(self.panels.len().max(1));
        let rows = self.panels.len().div_ceil(cols).max(1);
        let cell_w = self.panel.0;
        let width = cols as f64 * cell_w + 2.0 * MARGIN;
        let shared: Vec<Entry> = if self.shared_legend {
            dedup_entries(self.panels.iter().filter(|p| !p.legend).flat_map(|p| p.series.iter().map(Entry::of)))
        } else {
            Vec::new()
        };
        let shared_rows = legend_rows(&shared, width - 2.0 * MARGIN);
        let panel_legends: Vec<Vec<Vec<Entry>>> = self
            .panels
            .iter()
            .map(|p| {
                if p.legend {
                    legend_rows(&dedup_entries(p.series.iter().map(Entry::of)), cell_w - Y_AREA - RIGHT)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let max_rows = panel_legends.iter().map(Vec::len).max().unwrap_or(0);
        let panel_legend_h = max_rows as f64 * LEGEND_ROW;
        let mut header = MARGIN + TITLE * 1.35;
        if !self.subtitle.is_empty() {
            header += SUBTITLE * 1.5 * self.subtitle.lines().count() as f64;
        }
        header += shared_rows.len() as f64 * LEGEND_ROW + 8.0;
        let cell_h = CAPTION_H + panel_legend_h + self.panel.1;
        let height = header + rows as f64 * cell_h + MARGIN * 0.6;
        Layout { width, height, header, cell_h, cols, rows, shared_rows, panel_legends, panel_legend_h }
    }

    /// Pixel size at scale 1 (the SVG's size).
    pub(crate) fn size(&self) -> (u32, u32) {
        let l = self.layout();
        (l.width.round() as u32, l.height.round() as u32)
    }
}

// ---- drawing ----

type DResult = Result<(), String>;

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

struct Scale(f64);

impl Scale {
    fn px(&self, v: f64) -> i32 {
        (v * self.0).round() as i32
    }
    fn w(&self, v: f64) -> u32 {
        ((v * self.0).round() as u32).max(1)
    }
    fn font(&self, size: f64, color: &'static RGBColor) -> TextStyle<'static> {
        TextStyle::from((FAMILY, size * self.0).into_font()).color(color)
    }
    fn bold(&self, size: f64, color: &'static RGBColor) -> TextStyle<'static> {
        TextStyle::from((FAMILY, size * self.0, FontStyle::Bold).into_font()).color(color)
    }
}

fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    marker: Marker,
    color: RGBColor,
    sc: &Scale,
) -> DResult {
    let r = sc.px(MARKER);
    let fill = color.filled();
    let edge = ShapeStyle { color: WHITE.to_rgba(), filled: false, stroke_width: sc.w(0.8) };
    let (x, y) = at;
    match marker {
        Marker::Circle => {
            area.draw(&Circle::new(at, r, fill)).map_err(de)?;
            area.draw(&Circle::new(at, r, edge)).map_err(de)?;
        }
        Marker::Square => {
            let r = (f64::from(r) * 0.9).round() as i32;
            area.draw(&Rectangle::new([(x - r, y - r), (x + r, y + r)], fill)).map_err(de)?;
            area.draw(&Rectangle::new([(x - r, y - r), (x + r, y + r)], edge)).map_err(de)?;
        }
        Marker::Triangle => {
            let r = (f64::from(r) * 1.25).round() as i32;
            let pts = vec![(x, y - r), (x + r, y + r * 3 / 4), (x - r, y + r * 3 / 4)];
            area.draw(&Polygon::new(pts.clone(), fill)).map_err(de)?;
            let mut closed = pts;
            closed.push(closed[0]);
            area.draw(&PathElement::new(closed, edge)).map_err(de)?;
        }
        Marker::Diamond => {
            let r = (f64::from(r) * 1.3).round() as i32;
            let pts = vec![(x, y - r), (x + r, y), (x, y + r), (x - r, y)];
            area.draw(&Polygon::new(pts.clone(), fill)).map_err(de)?;
            let mut closed = pts;
            closed.push(closed[0]);
            area.draw(&PathElement::new(closed, edge)).map_err(de)?;
        }
    }
    Ok(())
}

/// Dashed polyline in pixel coordinates (dash and gap in pixels).
fn dashed_path<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(i32, i32)],
    style: ShapeStyle,
    dash: f64,
    gap: f64,
) -> DResult {
    let mut on = true;
    let mut left = dash;
    for w in pts.windows(2) {
        let (x0, y0) = (f64::from(w[0].0), f64::from(w[0].1));
        let (x1, y1) = (f64::from(w[1].0), f64::from(w[1].1));
        let len = ((x1 - x0).powi(2) + (y1 - y0).powi(2)).sqrt();
        let mut t = 0.0;
        while t < len {
            let step = left.min(len - t);
            if on {
                let a = (x0 + (x1 - x0) * t / len, y0 + (y1 - y0) * t / len);
                let b = (x0 + (x1 - x0) * (t + step) / len, y0 + (y1 - y0) * (t + step) / len);
                area.draw(&PathElement::new(
                    vec![(a.0.round() as i32, a.1.round() as i32), (b.0.round() as i32, b.1.round() as i32)],
                    style,
                ))
                .map_err(de)?;
            }
            t += step;
            left -= step;
            if left <= 1e-9 {
                on = !on;
                left = if on { dash } else { gap };
            }
        }
    }
    Ok(())
}

fn draw_swatch<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, x: i32, y: i32, e: &Entry, sc: &Scale) -> DResult {
    let w = sc.px(SWATCH);
    if e.bar {
        let h = sc.px(6.0);
        area.draw(&Rectangle::new([(x + w / 4, y - h), (x + 3 * w / 4, y + h)], e.color.mix(0.85).filled()))
            .map_err(de)?;
        return Ok(());
    }
    let style = ShapeStyle { color: e.color.to_rgba(), filled: false, stroke_width: sc.w(LINE_W) };
    if e.dashed {
        dashed_path(area, &[(x, y), (x + w, y)], style, 6.0 * sc.0, 4.0 * sc.0)?;
    } else {
        area.draw(&PathElement::new(vec![(x, y), (x + w, y)], style)).map_err(de)?;
    }
    draw_marker(area, (x + w / 2, y), e.marker, e.color, sc)
}

/// Draws legend rows centred in `[x0, x0 + width]` starting at `y0` (pixels).
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[Vec<Entry>],
    x0: f64,
    width: f64,
    y0: f64,
    sc: &Scale,
) -> DResult {
    let style = sc.font(LEGEND, &INK).pos(Pos::new(HPos::Left, VPos::Center));
    for (r, row) in rows.iter().enumerate() {
        let total: f64 = row.iter().map(entry_width).sum::<f64>() + ENTRY_GAP * (row.len().saturating_sub(1)) as f64;
        let mut x = x0 + (width - total) / 2.0;
        let y = y0 + (r as f64 + 0.5) * LEGEND_ROW;
        for e in row {
            draw_swatch(area, sc.px(x), sc.px(y), e, sc)?;
            area.draw_text(&e.label, &style, (sc.px(x + SWATCH + 7.0), sc.px(y))).map_err(de)?;
            x += entry_width(e) + ENTRY_GAP;
        }
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    cell: &DrawingArea<DB, Shift>,
    p: &Panel,
    legend: &[Vec<Entry>],
    legend_h: f64,
    sc: &Scale,
) -> DResult {
    let (cw, _) = cell.dim_in_pixel();
    let cell_w = f64::from(cw) / sc.0;
    // Caption, left-aligned over the plot area.
    let y_area = Y_AREA;
    cell.draw_text(
        &p.caption,
        &sc.bold(CAPTION, &INK).pos(Pos::new(HPos::Left, VPos::Center)),
        (sc.px(y_area - 4.0), sc.px(CAPTION_H * 0.5)),
    )
    .map_err(de)?;
    if !legend.is_empty() {
        draw_legend(cell, legend, y_area, cell_w - y_area - RIGHT, CAPTION_H - 2.0, sc)?;
    }
    let (_, chart_area) = cell.split_vertically(sc.px(CAPTION_H + legend_h));

    let x_axis = p.x.clone();
    let y_axis = p.y.clone();
    let mut chart = ChartBuilder::on(&chart_area)
        .margin_top(sc.px(6.0))
        .margin_right(sc.px(RIGHT))
        .x_label_area_size(sc.px(50.0))
        .y_label_area_size(sc.px(y_area))
        .build_cartesian_2d(
            Ticked { lo: x_axis.range.0, hi: x_axis.range.1, ticks: x_axis.ticks.clone() },
            Ticked { lo: y_axis.range.0, hi: y_axis.range.1, ticks: y_axis.ticks.clone() },
        )
        .map_err(de)?;
    let xf = |v: &f64| x_axis.format(*v);
    let yf = |v: &f64| y_axis.format(*v);
    chart
        .configure_mesh()
        .bold_line_style(ShapeStyle { color: GRID.to_rgba(), filled: false, stroke_width: sc.w(1.0) })
        .light_line_style(TRANSPARENT)
        .axis_style(ShapeStyle { color: INK.to_rgba(), filled: false, stroke_width: sc.w(1.2) })
        .set_all_tick_mark_size(sc.px(5.0))
        .x_label_style(sc.font(TICK, &INK))
        .y_label_style(sc.font(TICK, &INK))
        .axis_desc_style(sc.font(AXIS, &INK))
        .x_desc(p.x.label.as_str())
        .y_desc(p.y.label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .draw()
        .map_err(de)?;

    let plot = chart.plotting_area().strip_coord_spec();
    let (pw, _) = plot.dim_in_pixel();
    let to_px = |x: f64, y: f64| -> (i32, i32) {
        let (bx, by) = chart.backend_coord(&(x, y));
        let (ox, oy) = plot.get_base_pixel();
        (bx - ox, by - oy)
    };

    // Reference lines under the data.
    for r in &p.refs {
        let y = to_px(p.x.range.0, r.y).1;
        let style = ShapeStyle { color: GREY.to_rgba(), filled: false, stroke_width: sc.w(1.2) };
        if r.dashed {
            dashed_path(&plot, &[(0, y), (pw as i32, y)], style, 7.0 * sc.0, 5.0 * sc.0)?;
        } else {
            plot.draw(&PathElement::new(vec![(0, y), (pw as i32, y)], style)).map_err(de)?;
        }
        if let Some(label) = &r.label {
            plot.draw_text(
                label,
                &sc.font(NOTE, &GREY).pos(Pos::new(HPos::Right, VPos::Top)),
                (pw as i32 - sc.px(4.0), y + sc.px(3.0)),
            )
            .map_err(de)?;
        }
    }

    // Bands, then bars, lines, error bars and markers, so that no band hides a line.
    for s in &p.series {
        if s.ci == Ci::Band && s.bar_width.is_none() {
            let good: Vec<&Pt> = s.points.iter().filter(|q| q.lo.is_finite() && q.hi.is_finite()).collect();
            if good.len() >= 2 {
                let mut poly: Vec<(i32, i32)> = good.iter().map(|q| to_px(q.x, q.lo)).collect();
                poly.extend(good.iter().rev().map(|q| to_px(q.x, q.hi)));
                plot.draw(&Polygon::new(poly, s.color.mix(0.16).filled())).map_err(de)?;
            }
        }
    }
    for s in &p.series {
        if let Some(bw) = s.bar_width {
            for q in s.points.iter().filter(|q| q.y.is_finite()) {
                let a = to_px(q.x - bw / 2.0, 0.0);
                let b = to_px(q.x + bw / 2.0, q.y);
                let (top, bottom) = (a.1.min(b.1), a.1.max(b.1));
                plot.draw(&Rectangle::new([(a.0, top), (b.0, bottom)], s.color.mix(0.85).filled())).map_err(de)?;
            }
        }
    }
    for s in &p.series {
        if s.bar_width.is_none() && s.line {
            let pts: Vec<(i32, i32)> = s.points.iter().filter(|q| q.y.is_finite()).map(|q| to_px(q.x, q.y)).collect();
            let style = ShapeStyle { color: s.color.to_rgba(), filled: false, stroke_width: sc.w(LINE_W) };
            if s.dashed {
                dashed_path(&plot, &pts, style, 7.0 * sc.0, 4.5 * sc.0)?;
            } else {
                plot.draw(&PathElement::new(pts, style)).map_err(de)?;
            }
        }
    }
    for s in &p.series {
        let show_bars = s.ci == Ci::Bars || s.points.len() == 1;
        for q in &s.points {
            if show_bars && q.lo.is_finite() && q.hi.is_finite() {
                let color = if s.bar_width.is_some() { INK } else { s.color };
                let style = ShapeStyle { color: color.to_rgba(), filled: false, stroke_width: sc.w(1.5) };
                let (x, lo) = to_px(q.x, q.lo);
                let (_, hi) = to_px(q.x, q.hi);
                let cap = sc.px(4.0);
                plot.draw(&PathElement::new(vec![(x, lo), (x, hi)], style)).map_err(de)?;
                plot.draw(&PathElement::new(vec![(x - cap, lo), (x + cap, lo)], style)).map_err(de)?;
                plot.draw(&PathElement::new(vec![(x - cap, hi), (x + cap, hi)], style)).map_err(de)?;
            }
            if s.bar_width.is_none() && q.y.is_finite() {
                // Dense curves (many layers) get smaller markers so that the line stays visible.
                let dense = Scale(if s.points.len() > 12 { sc.0 * 0.6 } else { sc.0 });
                draw_marker(&plot, to_px(q.x, q.y), s.marker, s.color, &dense)?;
            }
        }
    }
    if let Some(note) = &p.note {
        plot.draw_text(note, &sc.font(TICK, &GREY).pos(Pos::new(HPos::Left, VPos::Top)), (sc.px(8.0), sc.px(8.0)))
            .map_err(de)?;
    }
    Ok(())
}

fn draw_figure<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure, sc: &Scale) -> DResult {
    let l = fig.layout();
    root.fill(&WHITE).map_err(de)?;
    let mut y = MARGIN;
    root.draw_text(
        &fig.title,
        &sc.bold(TITLE, &INK).pos(Pos::new(HPos::Center, VPos::Top)),
        (sc.px(l.width / 2.0), sc.px(y)),
    )
    .map_err(de)?;
    y += TITLE * 1.35;
    for line in fig.subtitle.lines() {
        root.draw_text(
            line,
            &sc.font(SUBTITLE, &GREY).pos(Pos::new(HPos::Center, VPos::Top)),
            (sc.px(l.width / 2.0), sc.px(y)),
        )
        .map_err(de)?;
        y += SUBTITLE * 1.5;
    }
    draw_legend(root, &l.shared_rows, MARGIN, l.width - 2.0 * MARGIN, y, sc)?;

    let cell_w = fig.panel.0;
    for (i, p) in fig.panels.iter().enumerate() {
        let (r, c) = (i / l.cols, i % l.cols);
        let x0 = MARGIN + c as f64 * cell_w;
        let y0 = l.header + r as f64 * l.cell_h;
        let cell = root.clone().shrink((sc.px(x0), sc.px(y0)), (sc.px(cell_w), sc.px(l.cell_h)));
        draw_panel(&cell, p, &l.panel_legends[i], l.panel_legend_h, sc)?;
    }
    let _ = l.rows;
    Ok(())
}

/// Renders `fig` as `<stem>.png` (at `png_scale` times the SVG's pixel size, 2x supersampled) and `<stem>.svg`
/// (text as outlines of the embedded font); both written atomically. Returns the two paths.
pub(crate) fn render(fig: &Figure, stem: &Path, png_scale: f64) -> Result<Vec<PathBuf>, PlotError> {
    register_fonts().map_err(|message| PlotError::Draw { path: stem.to_path_buf(), message })?;
    let (w, h) = fig.size();
    let png = with_ext(stem, "png");
    let svg = with_ext(stem, "svg");
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |message: String| PlotError::Draw { path, message }
    };

    // PNG: draw at 2x the target scale and average 2x2 blocks (anti-aliases lines and markers).
    const SS: u32 = 2;
    let (pw, ph) = ((f64::from(w) * png_scale).round() as u32, (f64::from(h) * png_scale).round() as u32);
    let (bw, bh) = (pw * SS, ph * SS);
    let mut big = vec![255u8; (bw * bh * 3) as usize];
    {
        let backend = OutlineText { inner: BitMapBackend::with_buffer(&mut big, (bw, bh)), mode: TextMode::Raster };
        let root = backend.into_drawing_area();
        draw_figure(&root, fig, &Scale(png_scale * f64::from(SS))).map_err(fail(&png))?;
        root.present().map_err(de).map_err(fail(&png))?;
    }
    let mut small = vec![0u8; (pw * ph * 3) as usize];
    for y in 0..ph {
        for x in 0..pw {
            for c in 0..3 {
                let mut sum = 0u32;
                for dy in 0..SS {
                    for dx in 0..SS {
                        sum += u32::from(big[(((y * SS + dy) * bw + x * SS + dx) * 3 + c) as usize]);
                    }
                }
                small[((y * pw + x) * 3 + c) as usize] = ((sum + SS * SS / 2) / (SS * SS)) as u8;
            }
        }
    }
    let bytes = encode_png(&small, pw, ph, 96.0 * png_scale).map_err(fail(&png))?;
    super::tables::write_atomic(&png, &bytes)?;

    // SVG.
    let mut text = String::new();
    let paths = Rc::new(RefCell::new(Vec::new()));
    {
        let backend =
            OutlineText { inner: SVGBackend::with_string(&mut text, (w, h)), mode: TextMode::Svg(paths.clone()) };
        let root = backend.into_drawing_area();
        draw_figure(&root, fig, &Scale(1.0)).map_err(fail(&svg))?;
        root.present().map_err(de).map_err(fail(&svg))?;
    }
    let text = replace_svg_text(&text, &paths.borrow()).map_err(fail(&svg))?;
    super::tables::write_atomic(&svg, text.as_bytes())?;
    Ok(vec![png, svg])
}

pub(crate) fn with_ext(stem: &Path, ext: &str) -> PathBuf {
    let mut s = stem.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// RGB8 -> PNG bytes, with the physical resolution recorded (so the PNG prints at the SVG's size).
fn encode_png(rgb: &[u8], w: u32, h: u32, dpi: f64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        let ppm = (dpi / 0.0254).round() as u32;
        enc.set_pixel_dims(Some(png::PixelDimensions { xppu: ppm, yppu: ppm, unit: png::Unit::Meter }));
        let mut writer = enc.write_header().map_err(de)?;
        writer.write_image_data(rgb).map_err(de)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks_cover_range() {
        let (t, d) = nice_ticks(0.4, 1.0, 6);
        assert_eq!(d, 1);
        assert!((t[0] - 0.4).abs() < 1e-12 && (t.last().unwrap() - 1.0).abs() < 1e-12, "{t:?}");
        let (t, d) = nice_ticks(-3.0, 12.0, 5);
        assert_eq!(d, 0);
        assert!(t.contains(&0.0) && t.contains(&10.0), "{t:?}");
    }

    #[test]
    fn axis_formats_minus_and_categories() {
        let a = Axis::numeric("v", -1.0, 1.0, 4);
        assert_eq!(a.format(-0.5), "\u{2212}0.5");
        assert_eq!(a.format(-0.0), "0.0");
        let c = Axis {
            label: String::new(),
            range: (-0.5, 1.5),
            ticks: vec![0.0, 1.0],
            tick_labels: Some(vec!["TP".into(), "IPI".into()]),
            decimals: 0,
        };
        assert_eq!(c.format(1.0), "IPI");
    }
}

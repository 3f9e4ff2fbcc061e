//! Text with the embedded DejaVu Sans, identical in the PNG and the SVG, no system fonts.
//!
//! [`OutlineText`] wraps any plotters backend and takes over text: it measures strings with the font's own advances
//! and kerning, anchors them on the font's metrics (top = ascender, centre = half the cap height, bottom =
//! descender), and draws each glyph from its outline. Raster backends get the glyph coverage (anti-aliased) pixel by
//! pixel; the SVG backend gets one filled `<path>` per string (text as outlines, carrying the string in its
//! `aria-label`), so the SVG renders the same everywhere and references no font at all.
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Once;

use ab_glyph::{point, Font, FontRef, GlyphId, OutlineCurve, PxScale, ScaleFont};
use plotters::style::text_anchor::{HPos, VPos};
use plotters::style::{FontStyle, FontTransform};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind};

/// DejaVu Sans (Bitstream Vera licence, `assets/fonts/LICENSE_DEJAVU`), regular and bold.
static REGULAR: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
static BOLD: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold.ttf");

/// The family name every figure style asks for; registered with plotters' `ab_glyph` font table as DejaVu Sans.
pub const FAMILY: &str = "sans-serif";

/// Registers the embedded fonts with plotters (once), so that any plotters code path that measures text itself
/// (instead of asking the backend) sees the same font.
pub(crate) fn register_fonts() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        for (style, bytes) in [(FontStyle::Normal, REGULAR), (FontStyle::Bold, BOLD)] {
            if plotters::style::register_font(FAMILY, style, bytes).is_err() {
                result = Err(format!("the embedded font for {FAMILY} ({}) does not parse", style.as_str()));
            }
        }
    });
    result
}

/// One of the two embedded faces.
pub(crate) fn face(bold: bool) -> FontRef<'static> {
    // The bytes are compiled in and parsed by the tests; a failure here is a build defect, not bad input.
    FontRef::try_from_slice(if bold { BOLD } else { REGULAR }).expect("embedded DejaVu Sans parses")
}

/// A string laid out at one size: glyphs with their pen positions relative to the left end of the baseline.
pub(crate) struct Line {
    font: FontRef<'static>,
    /// Pixels per font unit.
    factor: f32,
    scale: PxScale,
    glyphs: Vec<(GlyphId, f32)>,
    /// Advance width in pixels.
    pub width: f32,
    /// Ascender (positive, pixels above the baseline).
    pub ascent: f32,
    /// Descender (positive, pixels below the baseline).
    pub descent: f32,
    /// Height of capitals above the baseline.
    pub cap: f32,
}

impl Line {
    /// Lays out `text` with `em_px` pixels per em.
    pub(crate) fn new(text: &str, em_px: f64, bold: bool) -> Line {
        let font = face(bold);
        let upem = font.units_per_em().unwrap_or(2048.0);
        let factor = em_px as f32 / upem;
        let scale = PxScale::from(em_px as f32 * font.height_unscaled() / upem);
        let scaled = font.as_scaled(scale);
        let mut glyphs = Vec::with_capacity(text.len());
        let mut x = 0f32;
        let mut prev: Option<GlyphId> = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                x += scaled.kern(p, id);
            }
            glyphs.push((id, x));
            x += scaled.h_advance(id);
            prev = Some(id);
        }
        // 'H' spans the baseline to the cap height; take the extent whatever the bounds' y orientation.
        let cap = font
            .outline(font.glyph_id('H'))
            .map(|o| o.bounds.max.y.abs().max(o.bounds.min.y.abs()) * factor)
            .unwrap_or(0.7 * em_px as f32);
        Line { ascent: scaled.ascent(), descent: -scaled.descent(), cap, width: x, glyphs, font, factor, scale }
    }

    /// Box size as plotters wants it: (advance width, ascender + descender), rounded up.
    pub(crate) fn size(&self) -> (u32, u32) {
        (self.width.ceil() as u32, (self.ascent + self.descent).ceil() as u32)
    }

    /// Offset of the baseline's left end from the anchor point, in the unrotated frame.
    fn origin(&self, h: HPos, v: VPos) -> (f32, f32) {
        let x = match h {
            HPos::Left => 0.0,
            HPos::Center => -self.width / 2.0,
            HPos::Right => -self.width,
        };
        let y = match v {
            VPos::Top => self.ascent,
            VPos::Center => self.cap / 2.0,
            VPos::Bottom => -self.descent,
        };
        (x, y)
    }
}

fn rotate(t: &FontTransform, x: f32, y: f32) -> (f32, f32) {
    match t {
        FontTransform::None => (x, y),
        FontTransform::Rotate90 => (-y, x),
        FontTransform::Rotate180 => (-x, -y),
        FontTransform::Rotate270 => (y, -x),
    }
}

/// SVG path data of `line` anchored at `pos` (pixels), rotated by `t`.
fn svg_path(line: &Line, h: HPos, v: VPos, t: &FontTransform, pos: BackendCoord) -> String {
    let (ox, oy) = line.origin(h, v);
    let f = line.factor;
    let map = |gx: f32, p: ab_glyph::Point| {
        let (x, y) = rotate(t, ox + gx + p.x * f, oy - p.y * f);
        (x + pos.0 as f32, y + pos.1 as f32)
    };
    let mut d = String::new();
    let mut push = |cmd: char, pts: &[(f32, f32)]| {
        d.push(cmd);
        for (i, (x, y)) in pts.iter().enumerate() {
            if i > 0 {
                d.push(' ');
            }
            d.push_str(&format!("{} {}", fmt2(*x), fmt2(*y)));
        }
    };
    for &(id, gx) in &line.glyphs {
        let Some(outline) = line.font.outline(id) else { continue };
        let mut last: Option<ab_glyph::Point> = None;
        for curve in &outline.curves {
            let (start, end) = match curve {
                OutlineCurve::Line(a, b) => (*a, *b),
                OutlineCurve::Quad(a, _, c) => (*a, *c),
                OutlineCurve::Cubic(a, _, _, d) => (*a, *d),
            };
            if last.is_none_or(|l| (l.x - start.x).abs() > 1e-3 || (l.y - start.y).abs() > 1e-3) {
                if last.is_some() {
                    push('Z', &[]);
                }
                push('M', &[map(gx, start)]);
            }
            match curve {
                OutlineCurve::Line(_, b) => push('L', &[map(gx, *b)]),
                OutlineCurve::Quad(_, b, c) => push('Q', &[map(gx, *b), map(gx, *c)]),
                OutlineCurve::Cubic(_, b, c, e) => push('C', &[map(gx, *b), map(gx, *c), map(gx, *e)]),
            }
            last = Some(end);
        }
        if last.is_some() {
            push('Z', &[]);
        }
    }
    d
}

/// Two decimals without trailing zeros.
fn fmt2(v: f32) -> String {
    let s = format!("{:.2}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Escapes text for an XML attribute.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// How [`OutlineText`] hands text to the wrapped backend.
pub(crate) enum TextMode {
    /// Anti-aliased glyph coverage through `draw_pixel` (bitmap backends).
    Raster,
    /// A placeholder `<text>` whose content is a marker; the caller swaps each for the recorded `<path>` with
    /// [`replace_svg_text`] once the SVG string is complete (this keeps the drawing order).
    Svg(Rc<RefCell<Vec<String>>>),
}

/// Marker text of the `i`th recorded string.
fn marker(i: usize) -> String {
    format!("@@trustlens-text-{i}@@")
}

/// Replaces every placeholder `<text>...marker...</text>` in `svg` by its recorded `<path>`.
pub(crate) fn replace_svg_text(svg: &str, paths: &[String]) -> Result<String, String> {
    let mut out = String::with_capacity(svg.len() + paths.iter().map(String::len).sum::<usize>());
    let mut rest = svg;
    for (i, path) in paths.iter().enumerate() {
        let m = marker(i);
        let at = rest.find(&m).ok_or_else(|| format!("SVG text placeholder {i} missing"))?;
        let open = rest[..at].rfind("<text").ok_or_else(|| format!("SVG text placeholder {i} has no <text>"))?;
        let close_rel = rest[at..].find("</text>").ok_or_else(|| format!("SVG text placeholder {i} not closed"))?;
        out.push_str(&rest[..open]);
        out.push_str(path);
        rest = &rest[at + close_rel + "</text>".len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A backend whose text is drawn from the embedded font's outlines; everything else goes to `inner` unchanged.
pub(crate) struct OutlineText<B> {
    pub inner: B,
    pub mode: TextMode,
}

fn is_bold<S: BackendTextStyle>(style: &S) -> bool {
    matches!(style.style(), FontStyle::Bold)
}

impl<B: DrawingBackend> DrawingBackend for OutlineText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        (iw, ih): (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.blit_bitmap(pos, (iw, ih), src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        Ok(Line::new(text, style.size(), is_bold(style)).size())
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 || text.is_empty() {
            return Ok(());
        }
        let line = Line::new(text, style.size(), is_bold(style));
        let anchor = style.anchor();
        let t = style.transform();
        match &self.mode {
            TextMode::Svg(paths) => {
                let d = svg_path(&line, anchor.h_pos, anchor.v_pos, &t, pos);
                let (r, g, b) = color.rgb;
                let opacity =
                    if color.alpha < 1.0 { format!(" fill-opacity=\"{:.3}\"", color.alpha) } else { String::new() };
                let element = format!(
                    "<path aria-label=\"{}\" fill=\"#{r:02X}{g:02X}{b:02X}\"{opacity} d=\"{d}\"/>",
                    xml_escape(text)
                );
                let index = {
                    let mut p = paths.borrow_mut();
                    p.push(element);
                    p.len() - 1
                };
                self.inner.draw_text(&marker(index), style, pos)
            }
            TextMode::Raster => {
                let (ox, oy) = line.origin(anchor.h_pos, anchor.v_pos);
                let scaled = line.font.as_scaled(line.scale);
                let (w, h) = self.inner.get_size();
                for &(id, gx) in &line.glyphs {
                    let glyph = id.with_scale_and_position(line.scale, point(ox + gx, oy));
                    let Some(outlined) = scaled.outline_glyph(glyph) else { continue };
                    let bounds = outlined.px_bounds();
                    let mut pixels = Vec::new();
                    outlined.draw(|x, y, c| {
                        if c > 0.0 {
                            pixels.push((bounds.min.x as i32 + x as i32, bounds.min.y as i32 + y as i32, c));
                        }
                    });
                    for (x, y, c) in pixels {
                        let (rx, ry) = rotate(&t, x as f32, y as f32);
                        let (px, py) = (pos.0 + rx as i32, pos.1 + ry as i32);
                        if px >= 0 && py >= 0 && (px as u32) < w && (py as u32) < h {
                            let alpha = color.alpha * f64::from(c.min(1.0));
                            self.inner.draw_pixel((px, py), BackendColor { alpha, rgb: color.rgb })?;
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fonts_parse_and_measure() {
        register_fonts().unwrap();
        let a = Line::new("Layer", 20.0, false);
        let b = Line::new("Layer", 40.0, false);
        assert!(a.width > 30.0 && a.width < 80.0, "{}", a.width);
        assert!((b.width / a.width - 2.0).abs() < 1e-3);
        assert!(a.cap > 0.6 * 20.0 && a.cap < 0.8 * 20.0);
        let bold = Line::new("Layer", 20.0, true);
        assert!(bold.width > a.width);
    }

    #[test]
    fn placeholders_are_replaced_in_order() {
        let svg = "<svg><text x=\"1\">@@trustlens-text-0@@</text><rect/><text>@@trustlens-text-1@@</text></svg>";
        let out = replace_svg_text(svg, &["<path d=\"A\"/>".into(), "<path d=\"B\"/>".into()]).unwrap();
        assert_eq!(out, "<svg><path d=\"A\"/><rect/><path d=\"B\"/></svg>");
        assert!(replace_svg_text("<svg></svg>", &["x".into()]).is_err());
    }

    #[test]
    fn svg_path_is_closed_outline() {
        let line = Line::new("o", 10.0, false);
        let d = svg_path(&line, HPos::Left, VPos::Top, &FontTransform::None, (0, 0));
        // "o" has two contours (outer and inner).
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(d.matches('Z').count(), 2, "{d}");
    }
}

//! PNG writer: the scene rasterised with anti-aliasing at [`DPI`] dots per inch
//! of its printed size (the PNG carries that resolution in its `pHYs` chunk).
//! Shapes and glyph outlines go through one coverage rasteriser, so the PNG
//! draws the same geometry as the SVG.

use super::scene::{Anchor, Prim, Scene};
use super::style::{BLACK, DPI, PT_PER_IN, Rgb};
use super::text::{self, SUP_RISE, SUP_SCALE};
use ab_glyph::{Font, OutlineCurve, ScaleFont};
use ab_glyph_rasterizer::{Rasterizer, point};

/// Pixels per point.
pub const SCALE: f64 = DPI / PT_PER_IN;

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<[f32; 3]>,
}

/// A path in pixel coordinates made of straight and curved pieces.
enum Seg {
    Line((f64, f64), (f64, f64)),
    Quad((f64, f64), (f64, f64), (f64, f64)),
    Cubic((f64, f64), (f64, f64), (f64, f64), (f64, f64)),
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Self {
            w,
            h,
            px: vec![[1.0; 3]; w * h],
        }
    }

    /// Fills the closed path `segs` (non-zero coverage, clamped at 1).
    fn fill(&mut self, segs: &[Seg], c: Rgb, alpha: f64) {
        let (mut x0, mut y0, mut x1, mut y1) = (
            f64::INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
        );
        let mut see = |p: (f64, f64)| {
            x0 = x0.min(p.0);
            y0 = y0.min(p.1);
            x1 = x1.max(p.0);
            y1 = y1.max(p.1);
        };
        for s in segs {
            match *s {
                Seg::Line(a, b) => [a, b].into_iter().for_each(&mut see),
                Seg::Quad(a, b, c) => [a, b, c].into_iter().for_each(&mut see),
                Seg::Cubic(a, b, c, d) => [a, b, c, d].into_iter().for_each(&mut see),
            }
        }
        if !(x0.is_finite() && y0.is_finite()) {
            return;
        }
        let bx0 = (x0.floor() as i64 - 1).max(0);
        let by0 = (y0.floor() as i64 - 1).max(0);
        let bx1 = (x1.ceil() as i64 + 1).min(self.w as i64);
        let by1 = (y1.ceil() as i64 + 1).min(self.h as i64);
        if bx1 <= bx0 || by1 <= by0 {
            return;
        }
        // The rasteriser needs the whole shape inside its box: rasterise over the
        // unclipped box and copy the visible part.
        let ux0 = x0.floor() - 1.0;
        let uy0 = y0.floor() - 1.0;
        let rw = (x1.ceil() - ux0 + 2.0) as usize;
        let rh = (y1.ceil() - uy0 + 2.0) as usize;
        let mut r = Rasterizer::new(rw, rh);
        let q = |p: (f64, f64)| point((p.0 - ux0) as f32, (p.1 - uy0) as f32);
        for s in segs {
            match *s {
                Seg::Line(a, b) => r.draw_line(q(a), q(b)),
                Seg::Quad(a, b, c) => r.draw_quad(q(a), q(b), q(c)),
                Seg::Cubic(a, b, c, d) => r.draw_cubic(q(a), q(b), q(c), q(d)),
            }
        }
        let col = [c.0 as f32 / 255.0, c.1 as f32 / 255.0, c.2 as f32 / 255.0];
        let (w, h) = (self.w as i64, self.h as i64);
        let alpha = alpha as f32;
        r.for_each_pixel_2d(|x, y, cov| {
            let (gx, gy) = (x as i64 + ux0 as i64, y as i64 + uy0 as i64);
            if gx < 0 || gy < 0 || gx >= w || gy >= h {
                return;
            }
            let a = cov.min(1.0) * alpha;
            if a <= 0.0 {
                return;
            }
            let p = &mut self.px[gy as usize * self.w + gx as usize];
            for k in 0..3 {
                p[k] = p[k] * (1.0 - a) + col[k] * a;
            }
        });
    }

    fn polygon(&mut self, pts: &[(f64, f64)], c: Rgb, alpha: f64) {
        if pts.len() < 3 {
            return;
        }
        let s: Vec<(f64, f64)> = pts.iter().map(|p| (p.0 * SCALE, p.1 * SCALE)).collect();
        let segs: Vec<Seg> = (0..s.len())
            .map(|i| Seg::Line(s[i], s[(i + 1) % s.len()]))
            .collect();
        self.fill(&segs, c, alpha);
    }

    /// A stroked polyline: one quad per segment and a round join at each vertex,
    /// all of one orientation so that overlaps clamp instead of cancelling.
    fn stroke(&mut self, pts: &[(f64, f64)], c: Rgb, width: f64) {
        let s: Vec<(f64, f64)> = pts.iter().map(|p| (p.0 * SCALE, p.1 * SCALE)).collect();
        let hw = (width * SCALE / 2.0).max(0.5);
        let mut segs = Vec::new();
        let mut add = |poly: Vec<(f64, f64)>| {
            let area: f64 = (0..poly.len())
                .map(|i| {
                    let (a, b) = (poly[i], poly[(i + 1) % poly.len()]);
                    a.0 * b.1 - b.0 * a.1
                })
                .sum();
            let mut poly = poly;
            if area < 0.0 {
                poly.reverse();
            }
            for i in 0..poly.len() {
                segs.push(Seg::Line(poly[i], poly[(i + 1) % poly.len()]));
            }
        };
        for w in s.windows(2) {
            let (a, b) = (w[0], w[1]);
            let (dx, dy) = (b.0 - a.0, b.1 - a.1);
            let len = (dx * dx + dy * dy).sqrt();
            if len < 1e-9 {
                continue;
            }
            let (nx, ny) = (-dy / len * hw, dx / len * hw);
            add(vec![
                (a.0 + nx, a.1 + ny),
                (b.0 + nx, b.1 + ny),
                (b.0 - nx, b.1 - ny),
                (a.0 - nx, a.1 - ny),
            ]);
        }
        if s.len() > 2 {
            for &v in &s[1..s.len() - 1] {
                add((0..12)
                    .map(|k| {
                        let t = std::f64::consts::TAU * k as f64 / 12.0;
                        (v.0 + hw * t.cos(), v.1 + hw * t.sin())
                    })
                    .collect());
            }
        }
        self.fill(&segs, c, 1.0);
    }

    fn rect(&mut self, r: &super::scene::Rect, c: Rgb) {
        let x0 = ((r.x0 * SCALE).round().max(0.0) as usize).min(self.w);
        let x1 = ((r.x1 * SCALE).round().max(0.0) as usize).min(self.w);
        let y0 = ((r.y0 * SCALE).round().max(0.0) as usize).min(self.h);
        let y1 = ((r.y1 * SCALE).round().max(0.0) as usize).min(self.h);
        let col = [c.0 as f32 / 255.0, c.1 as f32 / 255.0, c.2 as f32 / 255.0];
        for y in y0..y1 {
            for x in x0..x1 {
                self.px[y * self.w + x] = col;
            }
        }
    }

    /// Glyph outlines of a [`Prim::Text`], laid out with the same metrics as the layout (any
    /// other primitive draws nothing here).
    fn text(&mut self, p: &Prim) {
        let &Prim::Text {
            x,
            y,
            ref s,
            size,
            anchor,
            vertical,
            bold,
        } = p
        else {
            return;
        };
        let e = text::extent(s, size, bold);
        let mut u = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => -e.width / 2.0,
            Anchor::End => -e.width,
        };
        let font = text::font(bold);
        let em = font.units_per_em().unwrap_or(2048.0) as f64;
        let mut segs = Vec::new();
        // Local (u along the baseline, v down) to canvas pixels.
        let map = |u: f64, v: f64| -> (f64, f64) {
            if vertical {
                ((x + v) * SCALE, (y - u) * SCALE)
            } else {
                ((x + u) * SCALE, (y + v) * SCALE)
            }
        };
        for r in text::runs(s) {
            let (sz, rise) = if r.sup {
                (size * SUP_SCALE, SUP_RISE * size)
            } else {
                (size, 0.0)
            };
            let scaled = font.as_scaled(sz as f32);
            let k = sz / em;
            let mut prev = None;
            for ch in r.text.chars() {
                let g = font.glyph_id(ch);
                if let Some(p) = prev {
                    u += scaled.kern(p, g) as f64;
                }
                if let Some(o) = font.outline(g) {
                    // Font units have y up.
                    let f = |p: ab_glyph::Point| map(u + p.x as f64 * k, -rise - p.y as f64 * k);
                    for c in &o.curves {
                        segs.push(match *c {
                            OutlineCurve::Line(a, b) => Seg::Line(f(a), f(b)),
                            OutlineCurve::Quad(a, b, c) => Seg::Quad(f(a), f(b), f(c)),
                            OutlineCurve::Cubic(a, b, c, d) => Seg::Cubic(f(a), f(b), f(c), f(d)),
                        });
                    }
                }
                u += scaled.h_advance(g) as f64;
                prev = Some(g);
            }
        }
        self.fill(&segs, BLACK, 1.0);
    }
}

/// The PNG bytes of `scene`.
pub fn write(scene: &Scene) -> Result<Vec<u8>, String> {
    let w = (scene.width * SCALE).round() as usize;
    let h = (scene.height * SCALE).round() as usize;
    let mut c = Canvas::new(w, h);
    for p in &scene.prims {
        match p {
            Prim::Line { pts, color, width } => c.stroke(pts, *color, *width),
            Prim::Fill { pts, color, alpha } => c.polygon(pts, *color, *alpha),
            Prim::Box { rect, color } => c.rect(rect, *color),
            t @ Prim::Text { .. } => c.text(t),
        }
    }
    let data: Vec<u8> =
        c.px.iter()
            .flat_map(|p| p.map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8))
            .collect();
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Dots per metre of the print resolution.
        let ppm = (DPI / 0.0254).round() as u32;
        enc.set_pixel_dims(Some(png::PixelDimensions {
            xppu: ppm,
            yppu: ppm,
            unit: png::Unit::Meter,
        }));
        let mut wr = enc.write_header().map_err(|e| e.to_string())?;
        wr.write_image_data(&data).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

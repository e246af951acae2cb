//! Text: the embedded DejaVu Sans font, its metrics, and a small markup for
//! superscripts (`T^{3/2}`, `10^{−3}`) shared by layout, SVG and PNG.
//!
//! Extents are computed from the font's own advance widths, kerning and
//! ascent/descent, so the layout knows where every label ends.

use ab_glyph::{Font, FontRef, ScaleFont};
use std::sync::OnceLock;

/// Size of superscript text relative to the surrounding text.
pub const SUP_SCALE: f64 = 0.7;
/// Baseline rise of superscript text, in ems of the surrounding text.
pub const SUP_RISE: f64 = 0.36;

/// The embedded regular (`bold = false`) or bold font.
pub fn font(bold: bool) -> &'static FontRef<'static> {
    static REG: OnceLock<FontRef<'static>> = OnceLock::new();
    static BOLD: OnceLock<FontRef<'static>> = OnceLock::new();
    let (cell, bytes) = if bold {
        (&BOLD, dejavu::sans::bold())
    } else {
        (&REG, dejavu::sans::regular())
    };
    cell.get_or_init(|| FontRef::try_from_slice(bytes).expect("the embedded DejaVu font parses"))
}

/// A run of text drawn at one size and baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The characters.
    pub text: String,
    /// Superscript: smaller and raised.
    pub sup: bool,
}

/// Splits `s` at the `^{…}` superscript markup.
pub fn runs(s: &str) -> Vec<Run> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("^{") {
        let Some(j) = rest[i..].find('}') else { break };
        if i > 0 {
            out.push(Run {
                text: rest[..i].to_string(),
                sup: false,
            });
        }
        out.push(Run {
            text: rest[i + 2..i + j].to_string(),
            sup: true,
        });
        rest = &rest[i + j + 1..];
    }
    if !rest.is_empty() {
        out.push(Run {
            text: rest.to_string(),
            sup: false,
        });
    }
    out
}

/// Advance width of plain `s` at `size` pt (with kerning).
pub fn plain_width(s: &str, size: f64, bold: bool) -> f64 {
    let f = font(bold).as_scaled(size as f32);
    let mut w = 0.0f32;
    let mut prev = None;
    for c in s.chars() {
        let g = f.glyph_id(c);
        if let Some(p) = prev {
            w += f.kern(p, g);
        }
        w += f.h_advance(g);
        prev = Some(g);
    }
    w as f64
}

/// Extent of a text line relative to its baseline start, pt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Extent {
    /// Advance width.
    pub width: f64,
    /// Height above the baseline (font ascent, raised for superscripts).
    pub ascent: f64,
    /// Depth below the baseline (font descent), positive.
    pub descent: f64,
}

/// Font ascent and descent (positive) per pt of size.
pub fn vertical_metrics(bold: bool) -> (f64, f64) {
    let f = font(bold);
    let em = f.units_per_em().unwrap_or(2048.0) as f64;
    (
        f.ascent_unscaled() as f64 / em,
        -f.descent_unscaled() as f64 / em,
    )
}

/// The extent of `s` (with markup) at `size` pt.
pub fn extent(s: &str, size: f64, bold: bool) -> Extent {
    let (a, d) = vertical_metrics(bold);
    let mut e = Extent {
        width: 0.0,
        ascent: a * size,
        descent: d * size,
    };
    for r in runs(s) {
        if r.sup {
            e.width += plain_width(&r.text, size * SUP_SCALE, bold);
            e.ascent = e.ascent.max(SUP_RISE * size + a * size * SUP_SCALE);
        } else {
            e.width += plain_width(&r.text, size, bold);
        }
    }
    e
}

/// `s` without markup, as a screen reader or search would read it.
pub fn strip(s: &str) -> String {
    runs(s)
        .into_iter()
        .map(|r| {
            if r.sup {
                format!("^{}", r.text)
            } else {
                r.text
            }
        })
        .collect()
}

/// Greedy word wrap of `s` into lines no wider than `max_w` at `size` pt
/// (a single word wider than `max_w` keeps its own line).
pub fn wrap(s: &str, size: f64, bold: bool, max_w: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in s.split(' ') {
        let cand = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if !cur.is_empty() && extent(&cand, size, bold).width > max_w {
            lines.push(std::mem::replace(&mut cur, word.to_string()));
        } else {
            cur = cand;
        }
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_splits_superscripts() {
        assert_eq!(
            runs("T^{3/2} x"),
            vec![
                Run {
                    text: "T".into(),
                    sup: false
                },
                Run {
                    text: "3/2".into(),
                    sup: true
                },
                Run {
                    text: " x".into(),
                    sup: false
                },
            ]
        );
        assert_eq!(runs("no markup").len(), 1);
        assert_eq!(runs("open ^{ brace").len(), 1);
    }

    #[test]
    fn metrics_come_from_the_font() {
        // A wider string is wider; width scales linearly with size (to f32 rounding).
        let a = plain_width("10", 8.0, false);
        let b = plain_width("1000", 8.0, false);
        assert!(b > 1.9 * a && a > 4.0, "{a} {b}");
        assert!((plain_width("1000", 16.0, false) - 2.0 * b).abs() < 1e-3);
        let (asc, desc) = vertical_metrics(false);
        assert!(
            asc > 0.7 && asc < 1.2 && desc > 0.1 && desc < 0.4,
            "{asc} {desc}"
        );
        assert!(extent("10^{3}", 8.0, false).ascent > extent("10", 8.0, false).ascent);
    }
}

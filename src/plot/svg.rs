//! SVG writer: the scene at its printed size (`width`/`height` in pt), text as
//! `<text>` elements in DejaVu Sans. Same scene, same bytes.

use super::scene::{Anchor, Prim, Scene};
use super::text::{self, SUP_RISE, SUP_SCALE};
use std::fmt::Write;

/// A number with at most two decimals, no trailing zeros.
fn n(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// XML character data: `&`, `<`, `>` and quotes escaped; a character XML 1.0 does not allow
/// (C0 controls other than tab, newline and carriage return; U+FFFE, U+FFFF) shown as its
/// Unicode control picture (U+2400 + code) or U+FFFD, so every SVG is well-formed.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\t' | '\n' | '\r' => o.push(c),
            c if (c as u32) < 0x20 => {
                o.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{FFFD}'))
            }
            '\u{FFFE}' | '\u{FFFF}' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

fn points(pts: &[(f64, f64)]) -> String {
    pts.iter()
        .map(|p| format!("{},{}", n(p.0), n(p.1)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The SVG document of `scene`.
pub fn write(scene: &Scene) -> String {
    let mut o = String::new();
    let (w, h) = (n(scene.width), n(scene.height));
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}pt" height="{h}pt" viewBox="0 0 {w} {h}">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for p in &scene.prims {
        match p {
            Prim::Line { pts, color, width } => {
                let _ = writeln!(
                    o,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"/>"#,
                    points(pts),
                    color.hex(),
                    n(*width)
                );
            }
            Prim::Fill { pts, color, alpha } => {
                let op = if *alpha < 1.0 {
                    format!(r#" fill-opacity="{}""#, n(*alpha))
                } else {
                    String::new()
                };
                let _ = writeln!(
                    o,
                    r#"<polygon points="{}" fill="{}"{op}/>"#,
                    points(pts),
                    color.hex()
                );
            }
            Prim::Box { rect, color } => {
                let _ = writeln!(
                    o,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>"#,
                    n(rect.x0),
                    n(rect.y0),
                    n(rect.w()),
                    n(rect.h()),
                    color.hex()
                );
            }
            Prim::Text {
                x,
                y,
                s,
                size,
                anchor,
                vertical,
                bold,
            } => {
                let a = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let rot = if *vertical {
                    format!(r#" transform="rotate(-90 {} {})""#, n(*x), n(*y))
                } else {
                    String::new()
                };
                let wt = if *bold { r#" font-weight="bold""# } else { "" };
                let mut body = String::new();
                let rise = SUP_RISE * size;
                let mut up = false;
                for r in text::runs(s) {
                    if r.sup {
                        let _ = write!(
                            body,
                            r#"<tspan font-size="{}" dy="{}">{}</tspan>"#,
                            n(size * SUP_SCALE),
                            n(-rise),
                            esc(&r.text)
                        );
                        up = true;
                    } else if up {
                        let _ = write!(body, r#"<tspan dy="{}">{}</tspan>"#, n(rise), esc(&r.text));
                        up = false;
                    } else {
                        body.push_str(&esc(&r.text));
                    }
                }
                let _ = writeln!(
                    o,
                    r#"<text x="{}" y="{}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="{}"{wt} text-anchor="{a}"{rot}>{body}</text>"#,
                    n(*x),
                    n(*y),
                    n(*size)
                );
            }
        }
    }
    o.push_str("</svg>\n");
    o
}

//! What a report section is: its context ([`ReportCtx`]) and its result
//! ([`ReportSection`]).
//!
//! A leaf module (it imports nothing from the crate): sections in any layer
//! produce a [`ReportSection`] without depending on the list of sections in
//! [`crate::report`].

use std::path::PathBuf;

/// Where and how a report is produced.
#[derive(Clone, Debug)]
pub struct ReportCtx {
    /// Output directory (`out/` by default); figures go to `out/figures/`.
    pub out_dir: PathBuf,
    /// Master seed of every random draw in the report.
    pub seed: u64,
    /// Smaller sims (used by tests and `--quick`).
    pub quick: bool,
}

impl ReportCtx {
    /// Directory for figures.
    pub fn fig_dir(&self) -> PathBuf {
        self.out_dir.join("figures")
    }
}

/// One section of the report.
#[derive(Clone, Debug, Default)]
pub struct ReportSection {
    /// Section title (a `##` heading).
    pub title: String,
    /// Markdown body.
    pub markdown: String,
    /// Figure files written (paths relative to `out_dir` are shown in the report).
    pub figures: Vec<PathBuf>,
}

/// Error type of a section.
pub type SectionError = Box<dyn std::error::Error + Send + Sync>;

/// A report section producer.
pub type SectionFn = fn(&ReportCtx) -> Result<ReportSection, SectionError>;

/// Formats a margin for tables.
pub fn fmt_margin(m: f64) -> String {
    if m.is_infinite() {
        "—".into()
    } else {
        format!("{m:.3e}")
    }
}

/// A user-controlled string (a path, a model name, token text, a config value) as a Markdown
/// code span that nothing in it can close: the fence is one backtick longer than the longest
/// run of backticks in `s` (CommonMark's rule), padded with a space where `s` starts or ends
/// with a backtick, and control characters (line breaks included, which could end the
/// paragraph) shown as their Unicode control pictures (U+2400 + code).
pub fn md_code(s: &str) -> String {
    let s = visible(s);
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') || s.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A user-controlled string as Markdown text: every ASCII punctuation character
/// backslash-escaped (so no emphasis, link, code span or raw HTML starts in it) and control
/// characters shown as control pictures.
pub fn md_text(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in visible(s).chars() {
        if c.is_ascii_punctuation() {
            o.push('\\');
        }
        o.push(c);
    }
    o
}

/// Control characters (C0 and DEL) replaced by their Unicode control pictures.
fn visible(s: &str) -> String {
    s.chars()
        .map(|c| match c as u32 {
            x @ 0..=0x1f => char::from_u32(0x2400 + x).unwrap_or('\u{FFFD}'),
            0x7f => '\u{2421}',
            _ => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_span_cannot_be_closed_from_inside() {
        assert_eq!(md_code("a.txt"), "`a.txt`");
        assert_eq!(md_code("x`y"), "``x`y``");
        assert_eq!(md_code("`a``"), "``` `a`` ```");
        assert_eq!(md_code("a\nb"), "`a\u{240A}b`");
        assert_eq!(md_text("<img src=x>"), "\\<img src\\=x\\>");
    }
}

//! Claim A3 (hard switch ⇒ sink, docs/theory.md §4): report section `switches` and
//! figure `hard_switch`. The math and the checks are in [`crate::switch`].

use crate::plot::{Panel, Series, Style, render};
use crate::section::{ReportCtx, ReportSection, SectionError};
use crate::switch::{Assumption, SwitchSample, hard_switch_samples};

/// Report section: the §4 inequality drawn instance by instance (kept and
/// dropped cone condition) against the line $y = x$.
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let cases = if ctx.quick { 40 } else { 200 };
    let kept = hard_switch_samples(cases, ctx.seed, Assumption::Kept);
    let dropped = hard_switch_samples(cases, ctx.seed, Assumption::Dropped);
    let pts = |v: &[SwitchSample]| v.iter().map(|p| (p.rhs, p.lhs)).collect::<Vec<_>>();
    let above = |v: &[SwitchSample]| v.iter().filter(|p| p.lhs > p.rhs * (1.0 + 1e-12)).count();
    let all = kept
        .iter()
        .chain(&dropped)
        .flat_map(|p| [p.lhs, p.rhs])
        .filter(|v| *v > 0.0);
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let panel = Panel {
        title: "Hard switch ⇒ sink: Σ_j A_ij‖v_j‖ ≤ ‖o_i‖/γ".into(),
        x_label: "‖o_i‖/γ".into(),
        y_label: "Σ_j A_ij ‖v_j‖".into(),
        log_x: true,
        log_y: true,
        x_unit: "1".into(),
        y_unit: "1".into(),
        series: vec![
            Series::new("cone condition dropped", pts(&dropped), Style::Points, 1),
            Series::new("cone condition holds", pts(&kept), Style::Points, 0),
            Series::new("y = x", vec![(lo, lo), (hi, hi)], Style::Dashed, 7),
        ],
    };
    let figures = render(&ctx.fig_dir().join("hard_switch"), "", &[panel])?;
    let markdown = format!(
        "Each point is one (random head, query) pair: the attention-weighted value norm against \
         ‖o_i‖/γ. With the cone condition every point lies on or below y = x \
         ({} of {} above); with it dropped, {} of {} points are above (the theorem needs it).\n",
        above(&kept),
        kept.len(),
        above(&dropped),
        dropped.len()
    );
    Ok(ReportSection {
        title: "Hard switch ⇒ sink (A3)".into(),
        markdown,
        figures,
    })
}

//! Report section `real_models`: paper A's statistics on the registry-installable models that
//! are in the cache (docs/theory.md §3, §7, §9): per-layer BOS cosine and attention to the first token,
//! a layer × head heat-map of Gu's α_0, the A1 and A2 verdicts, head costs of sink heads against
//! the rest. Models not fetched are listed with the command that fetches them.

use super::analysis::{RealReport, analyze};
use super::{head_space, oversmooth_real, sink_control, switch_real};
use crate::plot::{Heatmap, Panel, Series, Style, render, render_heatmap};
use crate::runtime::tokenizer::Bos;
use crate::runtime::{fetch, load};
use crate::section::{ReportCtx, ReportSection, SectionError};
use std::fmt::Write as _;
use std::io::Write as _;

/// The fixed text of the report.
pub const REPORT_TEXT: &str = "In the middle of the night the old lighthouse keeper climbed the stairs again, counting each step, \
listening to the waves and wondering whether the ship he had seen at dusk would reach the harbour before the storm.";

/// Per model: (name, BOS policy).
const MODELS: [(&str, Bos); 4] = [
    ("smollm2", Bos::Auto),
    ("gemma3-270m", Bos::Yes),
    ("minilm", Bos::Auto),
    ("qwen2.5-coder-0.5b", Bos::Auto),
];

/// First tokens of the pooled A1 per model: (sink condition, no-sink condition). `None` as
/// the sink condition is the model's BOS (decoders) or its template (encoders); `None` as the
/// no-sink condition means none was found, and only the split by attention is reported. Found
/// by the mean attention to position 0 that the forward pass computes (`sinklab real --a1
/// --first-token T`, field `attn_first`; see [`super::sink_control`]).
fn a1_firsts(name: &str) -> (Option<&'static str>, Option<&'static str>) {
    match name {
        // Qwen's BOS id is <|endoftext|>, on which no sink forms; <|im_start|> forms one.
        "qwen2.5-coder-0.5b" => (Some("<|im_start|>"), Some("<|endoftext|>")),
        // Gemma 3 forms its sink on <bos> only (<eos>, <pad>, <end_of_turn>, words: none).
        "gemma3-270m" => (None, Some("<eos>")),
        _ => (None, None),
    }
}

/// Sink heads: α_0 > 0.3 (Gu's ε).
fn cost_split(rep: &RealReport) -> Option<(f64, f64, f64, f64, usize, usize)> {
    let mut s = (0.0, 0.0, 0.0, 0.0, 0usize, 0usize);
    for c in &rep.head_costs {
        let a = rep.layers.get(c.layer)?.heads.get(c.head)?.alpha_first;
        if a > 0.3 {
            s.0 += c.qk_nuc;
            s.1 += c.vo_nuc;
            s.4 += 1;
        } else {
            s.2 += c.qk_nuc;
            s.3 += c.vo_nuc;
            s.5 += 1;
        }
    }
    let (ns, nr) = (s.4.max(1) as f64, s.5.max(1) as f64);
    Some((s.0 / ns, s.1 / ns, s.2 / nr, s.3 / nr, s.4, s.5))
}

/// The no-sink control of the pooled A1 (when the model has a no-sink first token, full report
/// only) and the split of one run's heads by their attention to position 0.
fn a1_controls(
    md: &mut String,
    lm: &crate::runtime::LoadedModel,
    a1: &head_space::ModelA1,
    first_text: &str,
    nosink_first: Option<&str>,
    texts: &[&str],
    ctx: &ReportCtx,
) -> Result<(), SectionError> {
    if a1.heads_error.is_some() {
        return Ok(());
    }
    match nosink_first {
        Some(f) if !ctx.quick => {
            let np = head_space::with_first(lm, texts, head_space::first_token(lm, f)?)?;
            let a1n = head_space::analyze(&lm.model, &np, head_space::A1Options::default(), false)?;
            match sink_control::compare(a1, &a1n, (first_text, f), ctx.seed) {
                Ok(c) => md.push_str(&sink_control::markdown(&c)),
                Err(e) => writeln!(md, "No-sink control: not run ({e}).\n")?,
            }
        }
        Some(_) => writeln!(md, "No-sink control: full report only.\n")?,
        None => writeln!(
            md,
            "No-sink control: no first token found on which no sink forms (see `sink_control`); only the split by attention below.\n"
        )?,
    }
    match sink_control::by_attention(a1, ctx.seed) {
        Some((nh, nl, seps)) => {
            writeln!(
                md,
                "**Split by attention to position 0** (same run): {nh} heads with mean attention to position 0 above {} against {nl} at or below it.\n",
                sink_control::ATTN_HIGH
            )?;
            md.push_str(&sink_control::table(&seps, "high / low"));
            writeln!(
                md,
                "\n{}\n",
                sink_control::sentence(&seps).replace("No-sink control", "Split by attention")
            )?;
        }
        None => writeln!(
            md,
            "Split by attention to position 0: one group is empty (threshold {}).\n",
            sink_control::ATTN_HIGH
        )?,
    }
    Ok(())
}

/// A3 on real heads (decoders only): where the mass of the (head, query) pairs with output ≈ 0
/// goes ([`super::hard_switch_real`]), on the A2 tokens, with the model's no-sink first token
/// when it has one (full report only; the same input as the A4/A6 no-sink control).
fn a3_hard_switch(
    md: &mut String,
    lm: &crate::runtime::LoadedModel,
    toks: &[u32],
    nosink_first: Option<&str>,
    ctx: &ReportCtx,
) -> Result<(), SectionError> {
    use super::hard_switch_real as hs;
    if !lm.model.cfg.causal {
        return Ok(());
    }
    let nf = match nosink_first {
        Some(f) if !ctx.quick => Some((f, head_space::first_token(lm, f)?)),
        _ => None,
    };
    let s = hs::study(&lm.model, toks, nf.map(|x| x.1), ctx.seed)?;
    let first = lm
        .tok
        .as_ref()
        .map_or(String::new(), |t| t.decode(&toks[..1]));
    md.push_str(&hs::markdown(&s, (&first, nf.map(|x| x.0))));
    Ok(())
}

/// A5 on real inputs ([`super::cost_real`]) on the report's short grid (T = 8–32 under both norms,
/// with the two controls: ≈ 15–30 s a model on 2 cores; the longer grid is `sinklab real --a5`), cached
/// in `out/cost_real/` keyed by the model's content hash and the options (full report only;
/// encoders skipped).
fn a5_real_table(
    md: &mut String,
    lm: &crate::runtime::LoadedModel,
    path: &std::path::Path,
    name: &str,
    ctx: &ReportCtx,
) -> Result<(), SectionError> {
    use super::cost_real;
    if ctx.quick || !lm.model.cfg.causal {
        return Ok(());
    }
    let o = cost_real::Options {
        t_max_fro: 32,
        t_max_nuclear: 32,
        controls: true,
        seed: ctx.seed,
        ..cost_real::Options::default()
    };
    let opt_hash: String = {
        use sha2::{Digest, Sha256};
        Sha256::digest(serde_json::to_string(&o)?.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let key = format!("{}-{opt_hash}", &crate::runtime::content_hash(path)?[..16]);
    let dir = ctx.out_dir.join("cost_real");
    let file = dir.join(format!("{name}-{key}.json"));
    let (r, cached) = match std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| serde_json::from_str::<cost_real::A5Real>(&s).ok())
        .filter(|r| r.options == o)
    {
        Some(r) => (r, true),
        None => {
            let r = cost_real::analyze(lm, None, &o, &mut |l: &str| {
                let _ = writeln!(std::io::stderr(), "{l}");
            })?;
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            crate::atomic::write(&file, serde_json::to_string_pretty(&r)?)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            (r, false)
        }
    };
    md.push_str(&cost_real::markdown(name, &r));
    writeln!(
        md,
        "{} ({}). Longer grids: `sinklab real --model {name} --a5 --json`.\n",
        if cached {
            "Read from the cache keyed by the model's content hash"
        } else {
            "Computed now and cached, keyed by the model's content hash"
        },
        crate::section::md_code(
            &file
                .strip_prefix(&ctx.out_dir)
                .unwrap_or(&file)
                .display()
                .to_string()
        )
    )?;
    Ok(())
}

/// Builds the section.
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let mut md = String::new();
    let mut figures = Vec::new();
    writeln!(
        md,
        "Text: \"{REPORT_TEXT}\"{}.\n",
        if ctx.quick {
            " (quick: first 24 tokens, SmolLM2 only)"
        } else {
            ""
        }
    )?;
    for (name, bos) in MODELS {
        if ctx.quick && name != "smollm2" {
            continue;
        }
        // The full report fetches what it needs (the project's own install step, so that
        // `cargo run --release -- report` works on a fresh machine); `--quick` never downloads.
        let path = match fetch::cached(name) {
            Some(p) => p,
            None if !ctx.quick => {
                match fetch::fetch(name, None, &mut |line: &str| {
                    let _ = writeln!(std::io::stderr(), "fetch: {line}");
                }) {
                    Ok(p) => p,
                    Err(e) => {
                        writeln!(
                            md,
                            "### {name}\n\nNot in the cache and the fetch failed: {e}. Run `sinklab fetch {name}`.\n"
                        )?;
                        continue;
                    }
                }
            }
            None => {
                writeln!(
                    md,
                    "### {name}\n\nNot in the cache: `sinklab fetch {name}`.\n"
                )?;
                continue;
            }
        };
        let lm = load(&path)?;
        let mut toks = lm
            .tok
            .as_ref()
            .ok_or("no tokenizer")?
            .encode(REPORT_TEXT, bos)?;
        if ctx.quick {
            toks.truncate(24);
        }
        let rep = analyze(&lm, &toks, false, &mut ())?;
        writeln!(md, "### {name}\n")?;
        writeln!(
            md,
            "{} layers, d = {}, {} query / {} kv heads; T = {} tokens, BOS first: {}; mean next-token loss: {}.\n",
            rep.config.n_layer,
            rep.config.d_model,
            rep.config.n_head,
            rep.config.n_kv_head,
            rep.tokens.len(),
            rep.bos_first,
            rep.nll_mean
                .map_or("— (encoder)".into(), |v| format!("{v:.3} nats"))
        )?;
        // A1.
        let inputs = head_space::inputs(&lm.model, &toks)?;
        let cor: Vec<_> = inputs.iter().map(head_space::corollary).collect();
        writeln!(
            md,
            "| layer | attn→first | BOS cos mean (raw h after l) | frac cos ≤ 0 (raw h after l) | ‖h_0‖ | median ‖h_i‖ | Gu ε=0.3 | Gu ε=0.8 | massive | max cos(BOS, a_i), a = N₁(x) entering l |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
        for (l, c) in rep.layers.iter().zip(&cor) {
            let s = l.summary_columns();
            writeln!(
                md,
                "| {} | {:.3} | {:.3} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {:.3} |",
                l.layer,
                s[0],
                s[1],
                s[2],
                s[3],
                s[4],
                s[5],
                s[6],
                l.massive.len(),
                c.max_cos
            )?;
        }
        md.push('\n');
        // A1 pooled over the fixed texts, with null controls (`head_space`).
        let n_texts = if ctx.quick {
            3
        } else {
            head_space::TEXTS.len()
        };
        let tok = lm.tok.as_ref().ok_or("no tokenizer")?;
        let (sink_first, nosink_first) = a1_firsts(name);
        let texts = &head_space::TEXTS[..n_texts];
        let pooled: Vec<Vec<u32>> = match sink_first {
            Some(f) => head_space::with_first(&lm, texts, head_space::first_token(&lm, f)?)?,
            None => texts
                .iter()
                // Pooling needs one shared sink token at position 0: decoders get their BOS
                // prepended (SmolLM2's own default adds none), encoders keep their [CLS]
                // template.
                .map(|t| tok.encode(t, if lm.model.cfg.causal { Bos::Yes } else { bos }))
                .collect::<Result<_, _>>()?,
        };
        let a1 = head_space::analyze(
            &lm.model,
            &pooled,
            head_space::A1Options::default(),
            !ctx.quick,
        )?;
        let first_text = tok.decode(&pooled[0][..1]);
        writeln!(md, "Pooled A1: `{first_text}` at position 0.\n")?;
        md.push_str(&head_space::markdown(&a1));
        a1_controls(&mut md, &lm, &a1, &first_text, nosink_first, texts, ctx)?;
        // A2.
        let a2_toks: Vec<u32> = toks
            .iter()
            .copied()
            .take(if ctx.quick { 16 } else { 48 })
            .collect();
        let (_, a2) = oversmooth_real::analyze_skill(&lm.model, &a2_toks)?;
        md.push_str(&oversmooth_real::markdown(&a2, a2_toks.len()));
        md.push('\n');
        let sw = switch_real::analyze(&lm.model, &a2_toks, ctx.seed)?;
        md.push_str(&switch_real::markdown(&sw, &rep));
        md.push('\n');
        if let (Some(nf), false) = (nosink_first, ctx.quick) {
            // The same text with the no-sink token at position 0 in place of the first token
            // (Gemma: <bos> replaced; Qwen, which adds no BOS: prepended, the last dropped).
            let mut nt = vec![head_space::first_token(&lm, nf)?];
            nt.extend(tok.encode(REPORT_TEXT, Bos::No)?);
            nt.truncate(a2_toks.len());
            let swn = switch_real::analyze(&lm.model, &nt, ctx.seed)?;
            match sink_control::switch_compare(&sw, &swn, ctx.seed) {
                Ok(c) => writeln!(md, "{}\n", sink_control::switch_sentence(&c, nf))?,
                Err(e) => writeln!(md, "A4/A6 no-sink control: not run ({e}).\n")?,
            }
        }
        a3_hard_switch(&mut md, &lm, &a2_toks, nosink_first, ctx)?;
        if let Some((sq, sv, rq, rv, ns, nr)) = cost_split(&rep) {
            writeln!(
                md,
                "Head costs (mean nuclear norms): sink heads (α_0 > 0.3, n = {ns}) ‖W_QK‖_* = {sq:.2}, ‖W_VO‖_* = {sv:.2}; other heads (n = {nr}) ‖W_QK‖_* = {rq:.2}, ‖W_VO‖_* = {rv:.2}.\n"
            )?;
        }
        a5_real_table(&mut md, &lm, &path, name, ctx)?;
        // Figures.
        let stem = ctx.fig_dir().join(format!("real_{name}_layers"));
        let pts = |f: &dyn Fn(&super::stats::LayerStats) -> f64| {
            rep.layers
                .iter()
                .map(|l| (l.layer as f64, f(l)))
                .collect::<Vec<_>>()
        };
        // A fraction that is 0 at every layer is said in the legend, not drawn as a flat line.
        let no_nonpos = rep.layers.iter().all(|l| l.bos_cos_frac_nonpos == 0.0);
        let mut panel = Panel {
            title: format!("{name}: BOS cosine and attention to the first token"),
            x_label: "layer".into(),
            y_label: "value".into(),
            x_unit: "1".into(),
            y_unit: "1".into(),
            series: vec![
                Series::new(
                    if no_nonpos {
                        "mean cos(h_i, h_0) (cos ≤ 0 at no position)"
                    } else {
                        "mean cos(h_i, h_0)"
                    },
                    pts(&|l| l.bos_cos_mean),
                    Style::LinePoints,
                    0,
                ),
                Series::new(
                    "attention to first token",
                    pts(&|l| l.attn_to_first.unwrap_or(f64::NAN)),
                    Style::LinePoints,
                    1,
                ),
                Series::new(
                    "frac cos ≤ 0",
                    pts(&|l| l.bos_cos_frac_nonpos),
                    Style::Dashed,
                    2,
                ),
            ],
            ..Panel::default()
        };
        if no_nonpos {
            panel.series.pop();
        }
        figures.extend(render(&stem, &panel.title.clone(), &[panel])?);
        let hm = Heatmap {
            title: format!("{name}: Gu α_0 per layer × head"),
            x_label: "head".into(),
            y_label: "layer".into(),
            value_unit: "1".into(),
            values: rep
                .layers
                .iter()
                .map(|l| l.heads.iter().map(|h| h.alpha_first).collect())
                .collect(),
        };
        figures.extend(render_heatmap(
            &ctx.fig_dir().join(format!("real_{name}_sink_heatmap")),
            &hm,
        )?);
    }
    Ok(ReportSection {
        title: "Real models (paper A statistics)".into(),
        markdown: md,
        figures,
    })
}

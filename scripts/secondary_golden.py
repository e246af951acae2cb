#!/usr/bin/env python3
"""Golden records for sinklab's secondary-sink detector, made by the authors' own code.

Paper B: "On the Existence and Behaviour of Secondary Attention Sinks" (arXiv:2512.22213); code
github.com/JeffreyWong20/Secondary-Attention-Sinks. This script runs their two detector functions,
`hidden_state_norm_detection` and `sink_labeling_machine`, taken unchanged from their
`src/hidden_state_base.py` (the function definitions are extracted with `ast` and executed with
torch; the rest of that module needs a GPU model and is not run), on hidden-state fixtures it writes:

  synthetic_*.safetensors  planted sinks (seeded numpy), f32
  smollm2_*.safetensors    real SmolLM2-135M-Instruct hidden states of short prompts, from
                           transformers (`hidden_states[1:]`: embedding output dropped, last layer =
                           final-norm output, as the authors' script reads them), stored as f16

Each fixture holds `hidden.{l}` [T, d] and `tokens` [T]. Both sides read the same stored values
(f16 -> f32 here and in Rust). The authors' outputs go to golden.json: per fixture and per
configuration (bos_sink_pos, enable_sink_clipper) the sink map with `layer`, `token_id` and
`sink_type`, plus the margins that make the comparison well-posed (smallest distance of a scanned
|cos| to 0.9, gap between the largest and second-largest BOS-norm rise).

Usage: python scripts/secondary_golden.py --authors /work/authors_b \
         [--smollm2 ~/.cache/sinklab/smollm2/model] --out tests/fixtures/secondary_golden
Checked by `cargo test --test secondary_golden`.
"""
import argparse
import ast
import json
import logging
import os
from typing import List

import numpy as np
import torch
from safetensors.numpy import save_file

CONFIGS = [([0, 1], True), ([0, 1], False), ([0], True), ([0], False), ([0, 1, 2], True)]
PROMPTS = [
    "Solve step by step: 12 times 7 is",
    "The capital of France is Paris. The capital of Italy is",
]


def load_authors(path):
    src = open(os.path.join(path, "src", "hidden_state_base.py")).read()
    tree = ast.parse(src)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("hidden_state_norm_detection", "sink_labeling_machine")]
    assert len(keep) == 2, "authors' functions not found"
    ns = {"torch": torch, "List": List, "logger": logging.getLogger("authors")}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "hidden_state_base.py", "exec"), ns)
    return ns["hidden_state_norm_detection"], ns["sink_labeling_machine"]


def synthetic(seed, L, T, d, bos_pos, plan, aniso=0.0):
    """Random states; BOS = n_l u at `bos_pos` with a norm jump at 3 and a drop at L-4;
    plan: {pos: (sign, r, layers)} puts sign * r * u (+ small noise) at those layers."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    h = rng.standard_normal((L, T, d))
    if aniso:
        h = 0.3 * h + aniso * u  # every state close to the common direction
    for l in range(L):
        n = 4.0 if l < 3 else (60.0 + l if l < L - 4 else 8.0)
        if bos_pos > 0:
            h[l, 0] *= 0.5
        h[l, bos_pos] = n * u + 0.01 * rng.standard_normal(d)
        for pos, (sign, r, layers) in plan.items():
            if l in layers:
                h[l, pos] = sign * r * u + 0.05 * rng.standard_normal(d)
    return h.astype(np.float32)


def real_states(model_dir, text):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf = [f for f in os.listdir(model_dir) if f.endswith(".gguf")][0]
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf)
    m = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf, dtype=torch.float32)
    m.eval()
    ids = tok([text], return_tensors="pt", add_special_tokens=True)
    with torch.no_grad():
        out = m(**ids, output_hidden_states=True, return_dict=True, use_cache=False)
    hs = torch.stack([x[0] for x in out.hidden_states[1:]])  # [L, T, d]
    return hs.numpy().astype(np.float16), ids["input_ids"][0].numpy()


def margins(h, bos_candidates):
    """Distance of every |cos(h_t, h_b)| (t > b, all layers) to 0.9, and the gap of the top two
    BOS-norm rises, in f64 on the stored values."""
    x = torch.from_numpy(h.astype(np.float64))
    norms = x.norm(dim=-1)  # [L, T]
    b = bos_candidates[int(torch.argmax(norms[:, bos_candidates].mean(0)))] if len(bos_candidates) > 1 else bos_candidates[0]
    hb = x[:, b:b + 1, :]
    rest = x[:, b + 1:, :]
    cos = (rest * hb).sum(-1) / (rest.norm(dim=-1) * hb.norm(dim=-1))
    diff = norms[1:, b] - norms[:-1, b]
    top = torch.sort(diff, descending=True).values
    return float((cos.abs() - 0.9).abs().min()), float(top[0] - top[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--authors", required=True)
    ap.add_argument("--smollm2", default=os.path.expanduser("~/.cache/sinklab/smollm2/model"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    detect, label = load_authors(a.authors)
    os.makedirs(a.out, exist_ok=True)
    L, T, d = 24, 40, 32
    fixtures = {
        # BOS at 0; sinks of lifetime 6 (secondary), 3 (noise), 12 (bos_sink), an anti-aligned one.
        "synthetic_planted": synthetic(1, L, T, d, 0, {
            5: (1, 30.0, set(range(6, 12))), 9: (1, 20.0, {8, 9, 10}), 14: (-1, 40.0, set(range(4, 16))),
            22: (1, 25.0, {7, 9, 11, 13, 15, 17}), 30: (-1, 15.0, set(range(10, 17)))}),
        # BOS at position 1 (position 0 small), so the candidate choice matters.
        "synthetic_bos1": synthetic(2, L, T, d, 1, {
            3: (1, 30.0, set(range(5, 11))), 17: (1, 30.0, {12, 13})}),
        # Anisotropic stream: every state near one direction, the saturated case.
        "synthetic_aniso": synthetic(3, L, T, d, 0, {}, aniso=6.0),
    }
    tokens = {k: np.arange(T, dtype=np.int64) for k in fixtures}
    if a.smollm2 and os.path.isdir(a.smollm2):
        for i, p in enumerate(PROMPTS):
            hs, ids = real_states(a.smollm2, p)
            fixtures[f"smollm2_{i}"] = hs
            tokens[f"smollm2_{i}"] = ids.astype(np.int64)
    golden = {"source": "JeffreyWong20/Secondary-Attention-Sinks src/hidden_state_base.py",
              "configs": [{"bos_sink_pos": c, "enable_sink_clipper": e} for c, e in CONFIGS],
              "fixtures": {}}
    for name, h in fixtures.items():
        t = {f"hidden.{l}": np.ascontiguousarray(h[l]) for l in range(h.shape[0])}
        t["tokens"] = tokens[name]
        save_file(t, os.path.join(a.out, f"{name}.safetensors"))
        hs32 = [torch.from_numpy(h[l].astype(np.float32)).unsqueeze(0) for l in range(h.shape[0])]
        ids = {"input_ids": torch.from_numpy(tokens[name]).unsqueeze(0)}
        runs = []
        for cands, clip in CONFIGS:
            sink_map = detect(hidden_states=hs32, bos_sink_pos=cands, tokenized_ids=ids,
                              enable_sink_clipper=clip)
            sink_map, has_secondary = label(sink_map, h.shape[0])
            cos_margin, rise_gap = margins(h, cands)
            runs.append({"bos_sink_pos": cands, "enable_sink_clipper": clip,
                         "has_secondary": has_secondary,
                         "candidate_sinks": {str(k): v for k, v in sorted(sink_map.items())},
                         "cos_margin": cos_margin, "rise_gap": rise_gap})
        golden["fixtures"][name] = {"layers": h.shape[0], "tokens": h.shape[1], "runs": runs}
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

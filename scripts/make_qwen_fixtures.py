#!/usr/bin/env python3
"""Qwen2.5-Coder-0.5B-Instruct fixtures for tests/real_parity.rs and tests/tokenizers.rs.

Usage: /work/venv/bin/python scripts/make_qwen_fixtures.py [--cache DIR] [--out tests/fixtures]
(after `sinklab fetch qwen2.5-coder-0.5b`; add `--tokenizers-only` to redo only the token ids).

1. Parity: transformers loads the same GGUF (`gguf_file=`, dequantized to float32, eager
   attention) and runs each text of TEXTS (ids from its own tokenizer, which adds no BOS).
   `tests/fixtures/parity_qwen2.5-coder-0.5b_<k>.safetensors` holds:
     tokens        [T]     int64
     hidden_sel    [L,P,d] float32  raw residual stream after each layer at `positions`
     hidden_norms  [L,T]   float32
     positions     [P]     int64
     attn_to_first [L]     float64  mean over heads and queries i >= 1 of A_{i,0}
     bos_cos       [L]     float64  mean over i >= 1 of cos(h_i, h_0)
     nll_mean      [1]     float64  mean next-token loss (nats)
2. Tokenizers: `tests/fixtures/tokenizer_ids.json` maps each packaged GGUF model to the ids its
   Hugging Face tokenizer (loaded from the GGUF) gives for each text of TOKENIZER_TEXTS, with
   add_special_tokens=False (BOS policy is tested separately).
"""
import argparse, json, os
import numpy as np
import torch
from safetensors.numpy import save_file

TEXTS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
    "Attention sinks appear when many heads put most of their weight on the first token; "
    "the residual stream of that token grows large, 1234 times over.",
]

TOKENIZER_TEXTS = TEXTS + [
    "class Stack:\n\tdef push(self, x):\n\t\tself.items.append(x)  # O(1)\n",
    "   leading spaces, trailing spaces   \n\n\nthree newlines; tabs\t\tand CRLF\r\nend",
    "Numbers: 3.14159, 2718281828, 1e-10, 0x1F, 1,000,000 and 42nd.",
    "Punctuation!? (brackets) [x] {y} <z> \"quotes\" 'single' — dashes – and … ellipsis;;",
    "Non-ASCII: café naïve Zürich, 日本語のテキスト, 中文, Ελληνικά, русский, emoji 🙂🚀, ﬁ ligature.",
    "I'm sure they'll say it's fine; we've done what you'd do. DON'T SHOUT, It'S oK",
    "x=[i**2 for i in range(100)]\nif __name__ == \"__main__\":\n    main()\n",
]

def cache_root():
    if os.environ.get("SINKLAB_CACHE"):
        return os.environ["SINKLAB_CACHE"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "sinklab")
    return os.path.expanduser("~/.cache/sinklab")

GGUFS = {
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b/model", "qwen2.5-coder-0.5b-instruct.gguf"),
    "smollm2": ("smollm2/model", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m": ("gemma3-270m/model", "gemma-3-270m-q4_k_m.gguf"),
}

def parity(model, tok, text, out):
    ids = tok(text, return_tensors="pt")["input_ids"]
    T = ids.shape[1]
    layers = model.model.layers
    caps = []
    hooks = [ly.register_forward_hook(lambda m, i, o: caps.append((o[0] if isinstance(o, tuple) else o).detach()))
             for ly in layers]
    with torch.no_grad():
        o = model(input_ids=ids, labels=ids, output_attentions=True, use_cache=False)
    for h in hooks:
        h.remove()
    hidden = torch.stack([c[0] if c.dim() == 3 else c for c in caps]).float().numpy()  # [L, T, d]
    pos = np.array(sorted({0, 1, T // 2, T - 1}), dtype=np.int64)
    att = np.array([a[0, :, 1:, 0].float().mean().item() for a in o.attentions], dtype=np.float64)
    h64 = hidden.astype(np.float64)
    n = np.linalg.norm(h64, axis=2)
    cos = np.einsum("ltd,ld->lt", h64[:, 1:, :], h64[:, 0, :]) / (n[:, 1:] * n[:, :1])
    d = {
        "tokens": ids[0].numpy().astype(np.int64),
        "hidden_sel": np.ascontiguousarray(hidden[:, pos, :]).astype(np.float32),
        "hidden_norms": n.astype(np.float32),
        "positions": pos,
        "attn_to_first": att,
        "bos_cos": cos.mean(axis=1),
        "nll_mean": np.array([o.loss.item()], dtype=np.float64),
    }
    save_file(d, out)
    print(f"{out}: T={T} nll={d['nll_mean'][0]:.6f} ({os.path.getsize(out)} bytes)")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=cache_root())
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--tokenizers-only", action="store_true")
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    ids = {}
    for name, (sub, f) in GGUFS.items():
        d = os.path.join(a.cache, sub)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        ids[name] = [tok(t, add_special_tokens=False)["input_ids"] for t in TOKENIZER_TEXTS]
    with open(os.path.join(a.out, "tokenizer_ids.json"), "w") as fh:
        json.dump({"texts": TOKENIZER_TEXTS, "ids": ids}, fh, ensure_ascii=False)
    if a.tokenizers_only:
        return
    sub, f = GGUFS["qwen2.5-coder-0.5b"]
    d = os.path.join(a.cache, sub)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager").eval()
    for k, text in enumerate(TEXTS):
        parity(model, tok, text, os.path.join(a.out, f"parity_qwen2.5-coder-0.5b_{k}.safetensors"))

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Make the parity fixtures of tests/real_parity.rs with Hugging Face transformers.

Usage: /work/venv/bin/python scripts/make_parity_fixtures.py [--cache DIR] [--out tests/fixtures]
(the models must have been fetched: `sinklab fetch smollm2 gemma3-270m minilm`).

For each model it loads the same files sinklab loads (GGUF through transformers' `gguf_file=`,
the MiniLM safetensors directory), in float32 with eager attention, runs the fixture text, and
writes `tests/fixtures/parity_<model>.safetensors` with:
  tokens          [T]      int64   token ids from the Hugging Face tokenizer (BOS per its default)
  hidden_sel      [L,P,d]  float32 raw residual stream after layer l at the positions `positions`
                                   (the last layer's taken with a forward hook: transformers'
                                   hidden_states[L] is after the final norm)
  hidden_norms    [L,T]    float32 ‖h^l_i‖ for every position
  positions       [P]      int64
  attn_to_first   [L]      float64 mean over heads and queries i >= 1 of A_{i,0}
  nll_mean        [1]      float64 mean next-token loss in nats (decoders; absent for BERT)
Text: TEXT below. Small on purpose (a few hundred KB in all).
"""
import argparse, os, sys
import numpy as np
import torch
from safetensors.numpy import save_file

TEXT = ("The quick brown fox jumps over the lazy dog. Attention sinks appear when many heads "
        "put most of their weight on the first token of the sequence, 1234 times over.")

def cache_root():
    if os.environ.get("SINKLAB_CACHE"):
        return os.environ["SINKLAB_CACHE"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "sinklab")
    return os.path.expanduser("~/.cache/sinklab")

def run(name, model, tok, out, decoder):
    enc = tok(TEXT, return_tensors="pt")
    ids = enc["input_ids"]
    T = ids.shape[1]
    layers = model.model.layers if decoder else model.encoder.layer
    captured = {}
    h = layers[-1].register_forward_hook(lambda m, i, o: captured.__setitem__("last", (o[0] if isinstance(o, tuple) else o).detach()))
    with torch.no_grad():
        kw = dict(output_hidden_states=True, output_attentions=True)
        if decoder:
            o = model(input_ids=ids, labels=ids, **kw)
        else:
            o = model(**enc, **kw)
    h.remove()
    L = len(layers)
    hs = [o.hidden_states[l + 1][0] for l in range(L - 1)] + [captured["last"][0]]
    if captured["last"].dim() == 2:
        hs[-1] = captured["last"]
    pos = np.array(sorted({0, 1, T // 2, T - 1}), dtype=np.int64)
    hidden = np.stack([x.float().numpy() for x in hs])  # [L, T, d]
    att = np.array([a[0, :, 1:, 0].float().mean().item() for a in o.attentions], dtype=np.float64)
    d = {
        "tokens": ids[0].numpy().astype(np.int64),
        "hidden_sel": np.ascontiguousarray(hidden[:, pos, :]).astype(np.float32),
        "hidden_norms": np.linalg.norm(hidden, axis=2).astype(np.float32),
        "positions": pos,
        "attn_to_first": att,
    }
    if decoder:
        d["nll_mean"] = np.array([o.loss.item()], dtype=np.float64)
    save_file(d, out)
    print(f"{name}: T={T} L={L} nll={d.get('nll_mean')} -> {out} ({os.path.getsize(out)} bytes)")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=cache_root())
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM, AutoTokenizer, AutoModel
    models = {
        "smollm2": ("smollm2/model", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "gemma3-270m": ("gemma3-270m/model", "gemma-3-270m-q4_k_m.gguf"),
    }
    for name, (sub, f) in models.items():
        if a.only and a.only != name:
            continue
        d = os.path.join(a.cache, sub)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        run(name, model, tok, os.path.join(a.out, f"parity_{name}.safetensors"), True)
    if not a.only or a.only == "minilm":
        d = os.path.join(a.cache, "minilm/model")
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        run("minilm", model, tok, os.path.join(a.out, "parity_minilm.safetensors"), False)

if __name__ == "__main__":
    main()

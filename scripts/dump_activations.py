#!/usr/bin/env python3
"""Dump a Hugging Face model's activations in sinklab's activations schema.

Runs any causal-LM or encoder that transformers can load (a hub id, a local directory, or a GGUF
with --gguf-file), on one text, and writes a safetensors file that `sinklab real --activations F`
analyses with the same statistics as a native run. For models too big for the sinklab machine.

Schema (stable; documented in sinklab::real::activations):
  hidden.{l}   [T, d]              residual stream after layer l, l = 0..L-1 (raw: the last layer's
                                   is taken with a forward hook, not transformers' final-normed one)
  attn.{l}     [H, T, T]           attention probabilities            (--attn; needs eager attention)
  mlp_out.{l}  [T, d]              MLP output of layer l              (--mlp)
  keys.{l}     [H_kv, T, d_head]   keys after RoPE, from the KV cache (--kv; decoders)
  values.{l}   [H_kv, T, d_head]   values                             (--kv; decoders)
  tokens       [T]                 int64 token ids
Tensors are float32 unless --dtype float16/bfloat16 (sinklab reads all three).

Example:
  python scripts/dump_activations.py --model meta-llama/Llama-3.1-8B --text "..." --attn --kv \
      --out llama.safetensors && sinklab real --activations llama.safetensors --json
"""
import argparse
import json
import torch
from safetensors.torch import save_file


def layout_metadata(model, layers, encoder: bool) -> dict:
    """How the model attends (the schema's metadata `causal`, `sliding_window`, `learned_sinks`,
    docs/activations.md), from its config: per layer the window of a `sliding_attention` layer
    in `layer_types`, or the config's `sliding_window` on every layer when it has no
    `layer_types` and does not switch the window off (`use_sliding_window`)."""
    cfg = getattr(model.config, "text_config", None) or model.config
    w = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        if len(types) != len(layers):
            raise SystemExit(f"config layer_types has {len(types)} entries for {len(layers)} layers")
        wins = [w if t == "sliding_attention" else None for t in types]
    elif w is not None and getattr(cfg, "use_sliding_window", True):
        wins = [w] * len(layers)
    else:
        wins = [None] * len(layers)
    sinks = any(getattr(getattr(l, "self_attn", None), "sinks", None) is not None for l in layers)
    meta = {"causal": "false" if encoder else "true", "sliding_window": json.dumps(wins),
            "learned_sinks": "true" if sinks else "false"}
    if getattr(cfg, "vocab_size", None):
        meta["vocab_size"] = str(cfg.vocab_size)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="hub id or local directory")
    ap.add_argument("--gguf-file", default=None, help="GGUF file name inside --model")
    ap.add_argument("--text", default=None)
    ap.add_argument("--file", default=None)
    ap.add_argument("--no-bos", action="store_true", help="tokenize without special tokens")
    ap.add_argument("--attn", action="store_true", help="store attention maps [H,T,T] per layer")
    ap.add_argument("--mlp", action="store_true", help="store MLP outputs per layer")
    ap.add_argument("--kv", action="store_true", help="store keys/values per layer (decoders)")
    ap.add_argument("--encoder", action="store_true", help="load with AutoModel (BERT-like)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    text = a.text if a.text is not None else open(a.file).read()
    kw = {"gguf_file": a.gguf_file} if a.gguf_file else {}
    tok = AutoTokenizer.from_pretrained(a.model, **kw)
    cls = AutoModel if a.encoder else AutoModelForCausalLM
    model = cls.from_pretrained(a.model, dtype=getattr(torch, a.dtype),
                                attn_implementation="eager" if a.attn else None, **kw).to(a.device).eval()
    enc = tok(text, return_tensors="pt", add_special_tokens=not a.no_bos).to(a.device)
    base = getattr(model, "model", None) or getattr(model, "transformer", None) or model
    layers = getattr(base, "layers", None) or getattr(base, "h", None) or base.encoder.layer
    out = {"tokens": enc["input_ids"][0].cpu().to(torch.int64)}
    hooks = []
    for l, layer in enumerate(layers):
        def hook(m, i, o, l=l):
            h = o[0] if isinstance(o, tuple) else o
            if h.dim() == 3:
                h = h[0]
            out[f"hidden.{l}"] = h.detach().float().cpu()
        hooks.append(layer.register_forward_hook(hook))
        if a.mlp:
            mlp = getattr(layer, "mlp", None) or getattr(layer, "output", None)
            def mhook(m, i, o, l=l):
                h = o[0] if isinstance(o, tuple) else o
                if h.dim() == 3:
                    h = h[0]
                out[f"mlp_out.{l}"] = h.detach().float().cpu()
            hooks.append(mlp.register_forward_hook(mhook))
    with torch.no_grad():
        o = model(**enc, output_attentions=a.attn, use_cache=a.kv and not a.encoder)
    for h in hooks:
        h.remove()
    if a.attn:
        for l, att in enumerate(o.attentions):
            out[f"attn.{l}"] = att[0].detach().float().cpu()
    if a.kv and not a.encoder:
        pkv = o.past_key_values
        for l in range(len(layers)):
            k, v = (pkv.layers[l].keys, pkv.layers[l].values) if hasattr(pkv, "layers") else pkv[l]
            out[f"keys.{l}"] = k[0].detach().float().cpu()
            out[f"values.{l}"] = v[0].detach().float().cpu()
    if a.dtype != "float32":
        out = {k: (v.to(getattr(torch, a.dtype)) if v.is_floating_point() else v) for k, v in out.items()}
    save_file({k: v.contiguous() for k, v in out.items()}, a.out,
              metadata=layout_metadata(model, layers, a.encoder))
    print(f"wrote {a.out}: {len(layers)} layers, T = {out['tokens'].shape[0]}")


if __name__ == "__main__":
    main()

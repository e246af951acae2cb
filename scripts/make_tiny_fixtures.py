#!/usr/bin/env python3
"""Make the tiny-model parity fixtures of tests/real_arch_parity.rs with Hugging Face transformers.

Usage: /work/venv/bin/python scripts/make_tiny_fixtures.py [--out tests/fixtures/tiny]

For each variant below it builds a tiny model with transformers from a seeded random
initialisation (seed = SEED + variant index), saves it as a Hugging Face directory
(`config.json` + `model.safetensors`, or a sharded checkpoint with
`model.safetensors.index.json`), runs it in float32 with eager attention on fixed token ids,
and writes `<variant>/expected.safetensors`:
  tokens   [T]         int64    the input ids (BOS-free random ids, seeded)
  resid    [L, T, d]   float32  raw residual stream after each layer (forward hooks)
  attn     [L, H, T, T] float32 attention probabilities of each layer
  logits   [T, V]      float32  decoder logits (after any final soft-cap); BERT: absent
  final    [T, d]      float32  the last hidden state (after the final norm for decoders)
  variant_delta [1]    float32  max |logits − logits of the same weights with the variant's
                                feature switched off| (RoPE scaling → default RoPE, window →
                                none, soft-cap → none): proves the feature changes the output
                                at the tested positions (asserted > 1e-2 here).
The weights are re-drawn with larger scales than transformers' init (matrices N(0, 0.2²),
norm gains 1 + N(0, 0.2²), biases N(0, 0.1²)) so that every convention changes the output.
bf16 variants round the weights to bfloat16 before the reference run, so both sides compute
in f32 on identical weights.
"""
import argparse, json, os, copy
import numpy as np
import torch
from safetensors.numpy import save_file

SEED = 1234
T = 12
V = 64

def reinit(model, seed, gemma_offset=False):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name.lower() or "ln" in name.lower()) and name.endswith("weight"):
                base = 0.0 if gemma_offset else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name or "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))

def layers_of(model):
    for path in ("model.layers", "transformer.h", "bert.encoder.layer", "encoder.layer"):
        obj = model
        try:
            for a in path.split("."):
                obj = getattr(obj, a)
            return obj
        except AttributeError:
            continue
    raise RuntimeError("no layers")

def run(model, ids):
    caps = []
    hooks = [ly.register_forward_hook(lambda m, i, o: caps.append((o[0] if isinstance(o, tuple) else o).detach()))
             for ly in layers_of(model)]
    with torch.no_grad():
        o = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    resid = torch.stack([c[0] if c.dim() == 3 else c for c in caps]).float().numpy()
    attn = torch.stack([a[0] for a in o.attentions]).float().numpy()
    logits = o.logits[0].float().numpy() if hasattr(o, "logits") and o.logits is not None else None
    final = o.hidden_states[-1][0].float().numpy()
    return resid, attn, logits, final

def variants():
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                              Gemma2Config, Gemma2ForCausalLM, Gemma3TextConfig, Gemma3ForCausalLM,
                              GPT2Config, GPT2LMHeadModel, Phi3Config, Phi3ForCausalLM,
                              BertConfig, BertModel)
    llama = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 rms_norm_eps=1e-5, tie_word_embeddings=False)
    rp = lambda **kw: dict(rope_theta=10000.0, **kw)
    gemma3 = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                  rms_norm_eps=1e-6, query_pre_attn_scalar=16, sliding_window=5,
                  layer_types=["sliding_attention", "full_attention"],
                  rope_parameters={"sliding_attention": rp(rope_type="default"),
                                   "full_attention": dict(rope_theta=1000000.0, rope_type="linear", factor=4.0)},
                  hidden_activation="gelu_pytorch_tanh")
    # (name, config class, model class, config kwargs, off-switch kwargs or None, options)
    return [
        ("llama_default", LlamaConfig, LlamaForCausalLM,
         dict(llama, tie_word_embeddings=True, rope_parameters=rp(rope_type="default")), None, {}),
        ("llama_linear", LlamaConfig, LlamaForCausalLM,
         dict(llama, rope_parameters=rp(rope_type="linear", factor=4.0)),
         dict(rope_parameters=rp(rope_type="default")), {}),
        ("llama_dynamic", LlamaConfig, LlamaForCausalLM,
         dict(llama, max_position_embeddings=8, rope_parameters=rp(rope_type="dynamic", factor=2.0)),
         dict(rope_parameters=rp(rope_type="default")), {}),
        ("llama_llama3", LlamaConfig, LlamaForCausalLM,
         dict(llama, head_dim=16, num_attention_heads=4, num_key_value_heads=1,
              rope_parameters=rp(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=16)),
         dict(rope_parameters=rp(rope_type="default")), {}),
        ("llama_yarn", LlamaConfig, LlamaForCausalLM,
         dict(llama, rope_parameters=rp(rope_type="yarn", factor=4.0, original_max_position_embeddings=16)),
         dict(rope_parameters=rp(rope_type="default")), {}),
        ("llama_bf16_sharded", LlamaConfig, LlamaForCausalLM,
         dict(llama, rope_parameters=rp(rope_type="default")), None, dict(bf16=True, shard="20KB")),
        ("mistral_window", MistralConfig, MistralForCausalLM,
         dict(llama, sliding_window=5, rope_parameters=rp(rope_type="default")),
         dict(sliding_window=None), {}),
        ("qwen2", Qwen2Config, Qwen2ForCausalLM,
         dict(llama, num_key_value_heads=1, rope_parameters=rp(rope_type="default")), None, {}),
        ("qwen3", Qwen3Config, Qwen3ForCausalLM,
         dict(llama, head_dim=16, rope_parameters=rp(rope_type="default")), None, {}),
        ("gemma2", Gemma2Config, Gemma2ForCausalLM,
         dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
              rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=5,
              attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
              layer_types=["sliding_attention", "full_attention"],
              rope_parameters=rp(rope_type="default"), hidden_activation="gelu_pytorch_tanh"),
         dict(attn_logit_softcapping=None, final_logit_softcapping=None), dict(gemma=True)),
        ("gemma3_text", Gemma3TextConfig, Gemma3ForCausalLM, gemma3,
         dict(layer_types=["full_attention", "full_attention"]), dict(gemma=True)),
        ("gpt2", GPT2Config, GPT2LMHeadModel,
         dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=32, layer_norm_epsilon=1e-5), None, {}),
        ("phi3", Phi3Config, Phi3ForCausalLM,
         dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              original_max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
              pad_token_id=0, bos_token_id=1, eos_token_id=2,
              rope_parameters=rp(rope_type="default", partial_rotary_factor=0.5)), None, {}),
        ("bert", BertConfig, BertModel,
         dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=32, layer_norm_eps=1e-12), None, dict(encoder=True)),
        # Issue 25's loader zoo: config.json edited after saving, the reference taken from the
        # model transformers reloads from that file (what it does with the keys, not with ours).
        # Both pattern keys and an attention soft-cap: the public pattern decides, the private
        # one and the cap are stored and ignored.
        ("gemma3_pattern_keys", Gemma3TextConfig, Gemma3ForCausalLM, gemma3, None,
         dict(gemma=True, edit=lambda c: (c.pop("layer_types"), c.update(
             sliding_window_pattern=2, _sliding_window_pattern=1, attn_logit_softcapping=2.0)))),
        # Only the private pattern key: ignored, the default 6 applies (every layer local here).
        ("gemma3_private_pattern", Gemma3TextConfig, Gemma3ForCausalLM, gemma3, None,
         dict(gemma=True, edit=lambda c: (c.pop("layer_types"), c.update(_sliding_window_pattern=1)))),
        # YaRN with a pretraining length in the RoPE parameters (64) and another at the top level
        # (16): building the model standardizes the parameters again and the top-level one wins.
        ("llama_yarn_top_level_length", LlamaConfig, LlamaForCausalLM,
         dict(llama, rope_parameters=rp(rope_type="yarn", factor=4.0, original_max_position_embeddings=64)),
         None, dict(edit=lambda c: c.update(original_max_position_embeddings=16))),
    ]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tiny"))
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    for idx, (name, C, M, kw, off, opt) in enumerate(variants()):
        if a.only and name not in a.only.split(","):
            continue
        seed = SEED + idx
        torch.manual_seed(seed)
        cfg = C(**kw)
        cfg._attn_implementation = "eager"
        model = M(cfg).eval()
        reinit(model, seed, gemma_offset=opt.get("gemma", False))
        if opt.get("bf16"):
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
        ids = torch.from_numpy(np.random.default_rng(seed).integers(3, V, size=(1, T))).long()
        resid, attn, logits, final = run(model, ids)
        out = os.path.join(a.out, name)
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        sd_model = model.to(torch.bfloat16) if opt.get("bf16") else model
        sd_model.save_pretrained(out, max_shard_size=opt.get("shard", "50GB"))
        for junk in ("generation_config.json",):
            p = os.path.join(out, junk)
            if os.path.exists(p):
                os.remove(p)
        if opt.get("edit"):
            cp = os.path.join(out, "config.json")
            c = json.load(open(cp))
            opt["edit"](c)
            json.dump(c, open(cp, "w"), indent=2)
            model = M.from_pretrained(out, attn_implementation="eager").eval()
            resid, attn, logits, final = run(model, ids)
        d = {"tokens": ids[0].numpy().astype(np.int64), "resid": resid.astype(np.float32),
             "attn": attn.astype(np.float32), "final": final.astype(np.float32)}
        if logits is not None:
            d["logits"] = logits.astype(np.float32)
        if off is not None:
            cfg2 = C(**dict(kw, **off))
            cfg2._attn_implementation = "eager"
            m2 = M(cfg2).eval()
            m2.load_state_dict(model.float().state_dict())
            r2, a2, l2, f2 = run(m2, ids)
            delta = float(np.abs((l2 if l2 is not None else f2) - (logits if logits is not None else final)).max())
            assert delta > 1e-2, f"{name}: the variant does not change the output ({delta})"
            d["variant_delta"] = np.array([delta], dtype=np.float32)
        save_file(d, os.path.join(out, "expected.safetensors"))
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print(f"{name}: {size} bytes" + (f", variant delta {d['variant_delta'][0]:.3g}" if "variant_delta" in d else ""))

if __name__ == "__main__":
    main()

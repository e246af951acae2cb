#!/usr/bin/env python3
"""Make the mixture-of-experts and learned-sink parity fixtures of tests/real_arch_parity.rs
(Qwen3-MoE, gpt-oss) with Hugging Face transformers, in the format of make_tiny_fixtures.py.

Usage: /work/venv/bin/python scripts/make_moe_fixtures.py [--out tests/fixtures/tiny] [--only a,b]

Each variant is a tiny model from a seeded random initialisation (make_tiny_fixtures.reinit:
matrices N(0, 0.2^2), norm gains 1 + N(0, 0.2^2), vectors N(0, 0.1^2)), optionally edited by
`weights` (e.g. gpt-oss's learned sinks set strong or absent), saved as a Hugging Face
directory and run in float32 with eager attention on T = 12 seeded token ids. The reference
`<variant>/expected.safetensors` holds tokens, resid, attn, logits, final and variant_delta as
in make_tiny_fixtures.py; attn is what transformers' eager attention returns (for gpt-oss the
visible-key probabilities, the sink's column dropped, rows summing to 1 - p_sink), and
`sink_mass` [L, H] (gpt-oss only) is the mean over queries i >= 1 of 1 - sum_j attn[l, h, i, j].
`variant_delta` is max |logits - logits with the variant's feature switched off| on the same
weights (another router normalisation, no window, weak clamp, sinks removed), asserted > 1e-2.

Routing is discontinuous: a row whose k-th and (k+1)-th router scores were within rounding of
each other could pick another expert in another implementation. The script records the
smallest such gap over every MoE layer and row and takes the first seed SEED + index + 100 r
whose gap is > 1e-3 (far above f32 rounding of a 32-term dot product), so the fixtures never
sit on a routing tie.
"""
import argparse, json, os, sys
import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(__file__))
from make_tiny_fixtures import reinit, run, T, V  # noqa: E402

SEED = 4321
MIN_GAP = 1e-3


def qwen3_moe(**kw):
    base = dict(vocab_size=V, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                num_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters=dict(rope_theta=10000.0, rope_type="default"))
    base.update(kw)
    return base


def gpt_oss(**kw):
    base = dict(vocab_size=V, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4,
                num_experts_per_tok=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                rope_parameters=dict(rope_theta=150000.0, rope_type="yarn", factor=4.0,
                                     original_max_position_embeddings=16, beta_fast=32.0,
                                     beta_slow=1.0, truncate=False))
    base.update(kw)
    return base


def set_sinks(value, spread=0.5):
    """Sink logits `value` + N(0, spread^2) per head (seeded by the caller's generator)."""
    def f(model, g):
        with torch.no_grad():
            for ly in model.model.layers:
                s = ly.self_attn.sinks
                s.copy_(value + spread * torch.randn(s.shape, generator=g))
    return f


def variants():
    from transformers import (Qwen3MoeConfig, Qwen3MoeForCausalLM, GptOssConfig,
                              GptOssForCausalLM)
    Q, QM, G, GM = Qwen3MoeConfig, Qwen3MoeForCausalLM, GptOssConfig, GptOssForCausalLM
    no_sink = set_sinks(-1e4, 0.0)
    # (name, config class, model class, config kwargs, weight edit, off-switch config kwargs,
    #  off-switch weight edit)
    return [
        ("qwen3_moe_norm_topk", Q, QM, qwen3_moe(norm_topk_prob=True), None,
         dict(norm_topk_prob=False), None),
        ("qwen3_moe_plain_topk", Q, QM, qwen3_moe(norm_topk_prob=False), None,
         dict(norm_topk_prob=True), None),
        # Four layers, experts on (l + 1) % 2 == 0 minus layer 3: MoE at layer 1 only, dense
        # SwiGLU of width 48 elsewhere; three of eight experts per token, GQA 4:1.
        ("qwen3_moe_sparse_step", Q, QM,
         qwen3_moe(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3],
                   num_experts=8, num_experts_per_tok=3, num_key_value_heads=1,
                   norm_topk_prob=True), None, None, None),
        # Strong learned sinks (logit 2 ± 0.5) against the same weights with no sink.
        ("gpt_oss_strong_sink", G, GM, gpt_oss(), set_sinks(2.0), None, no_sink),
        # Sinks absent (logit -1e4): the attention is the plain softmax; the window of 4
        # binds at T = 12 (the off switch makes both layers full attention).
        ("gpt_oss_no_sink", G, GM, gpt_oss(), no_sink,
         dict(layer_types=["full_attention", "full_attention"]), None),
        # Another shape: three layers (sliding, full, sliding; window 3), GQA 4:1 with 16-wide
        # heads, three of eight experts of width 8, moderate sinks, and a clamp of 0.8 that
        # binds (the off switch is the default limit 7).
        ("gpt_oss_shapes_clamp", G, GM,
         gpt_oss(num_hidden_layers=3, num_key_value_heads=1, head_dim=16, num_local_experts=8,
                 num_experts_per_tok=3, intermediate_size=8, sliding_window=3,
                 layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                 swiglu_limit=0.8), set_sinks(0.0, 1.0), dict(swiglu_limit=7.0), None),
    ]


def router_gap(model, ids, k):
    """Smallest gap between the k-th and (k+1)-th router score of any row of any MoE layer."""
    gaps = []

    def hook(mod, inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        scores = logits.float()
        if hasattr(mod, "norm_topk_prob"):  # Qwen: top-k of the probabilities
            scores = torch.softmax(scores, dim=-1)
        top = torch.topk(scores, k + 1, dim=-1).values
        gaps.append(float((top[..., k - 1] - top[..., k]).min()))

    routers = [m for n, m in model.named_modules() if n.endswith("mlp.gate") or n.endswith("mlp.router")]
    hs = [r.register_forward_hook(hook) for r in routers]
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hs:
        h.remove()
    return min(gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tiny"))
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    for idx, (name, C, M, kw, wedit, off, off_w) in enumerate(variants()):
        if a.only and name not in a.only.split(","):
            continue
        # The first seed SEED + idx + 100 r (r = 0, 1, ...) whose routing has no near-tie.
        for r in range(50):
            seed = SEED + idx + 100 * r
            torch.manual_seed(seed)
            cfg = C(**kw)
            cfg._attn_implementation = "eager"
            model = M(cfg).eval()
            reinit(model, seed)
            g = torch.Generator().manual_seed(seed + 1000)
            if wedit:
                wedit(model, g)
            ids = torch.from_numpy(np.random.default_rng(seed).integers(3, V, size=(1, T))).long()
            gap = router_gap(model, ids, cfg.num_experts_per_tok)
            if gap > MIN_GAP:
                break
        assert gap > MIN_GAP, f"{name}: routing near-ties for every seed tried"
        resid, attn, logits, final = run(model, ids)
        out = os.path.join(a.out, name)
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        model.save_pretrained(out)
        p = os.path.join(out, "generation_config.json")
        if os.path.exists(p):
            os.remove(p)
        # The reference is the model transformers reloads from the saved directory.
        model = M.from_pretrained(out, attn_implementation="eager").eval()
        resid, attn, logits, final = run(model, ids)
        d = {"tokens": ids[0].numpy().astype(np.int64), "resid": resid.astype(np.float32),
             "attn": attn.astype(np.float32), "final": final.astype(np.float32),
             "logits": logits.astype(np.float32)}
        if hasattr(model.model.layers[0].self_attn, "sinks"):
            d["sink_mass"] = (1.0 - attn[:, :, 1:, :].sum(-1)).mean(-1).astype(np.float32)
        if off is not None or off_w is not None:
            cfg2 = C(**dict(kw, **(off or {})))
            cfg2._attn_implementation = "eager"
            m2 = M(cfg2).eval()
            m2.load_state_dict(model.float().state_dict())
            if off_w:
                off_w(m2, torch.Generator().manual_seed(0))
            _, _, l2, _ = run(m2, ids)
            delta = float(np.abs(l2 - logits).max())
            assert delta > 1e-2, f"{name}: the variant does not change the output ({delta})"
            d["variant_delta"] = np.array([delta], dtype=np.float32)
        save_file(d, os.path.join(out, "expected.safetensors"))
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        extra = f", variant delta {d['variant_delta'][0]:.3g}" if "variant_delta" in d else ""
        if "sink_mass" in d:
            extra += f", sink mass {d['sink_mass'].min():.3f}..{d['sink_mass'].max():.3f}"
        print(f"{name}: seed {seed}, {size} bytes, router gap {gap:.2e}{extra}")


if __name__ == "__main__":
    main()

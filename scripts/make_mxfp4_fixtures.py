#!/usr/bin/env python3
"""Make the MXFP4 gpt-oss fixture of tests/real_mxfp4.rs: a tiny seeded gpt-oss whose experts
are stored as OpenAI's checkpoints store them, with transformers' reference outputs.

Usage: /work/venv/bin/python scripts/make_mxfp4_fixtures.py [--out tests/fixtures/tiny]

The model is gpt-oss with d = 64 and expert width 32 (two MXFP4 blocks along each gate/up row,
one along each down row), 2 layers (sliding, full; window 4), 4 heads of 16, 2 KV heads, 4
experts, 2 per token, learned sinks 1 ± 0.5; weights from make_tiny_fixtures.reinit (seeded).
Each expert matrix, taken as [out, in], is quantized here to MXFP4 with the OCP/ggml rule
(shared exponent E = floor(log2 max|x|) - 2 + 127 per 32 inputs, each value the nearest E2M1
value times 2^(E-127), saturating at 6 * 2^(E-127)) and stored as
`experts.{gate_up,down}_proj_blocks` uint8 [E, out, in/32, 16] (value 2j in the low nibble of
byte j, 2j + 1 in the high one) and `_scales` uint8 [E, out, in/32], with
`quantization_config = {quant_method: mxfp4, modules_to_not_convert: [...]}`.

The reference run (T = 12 seeded ids, float32, eager attention) is transformers' model with
the expert weights replaced by transformers' own dequantization of those bytes
(`integrations.mxfp4.convert_moe_packed_tensors`), so the layout is transformers', not this
script's. The directory is then reloaded with `Mxfp4Config(dequantize=True)` and must give the
same logits (checked here, printed). `expected.safetensors` holds tokens, resid, attn, logits,
final, sink_mass as make_moe_fixtures.py, and `quant_delta`, max |logits - logits of the
unquantized weights|: what reading the blocks wrongly as the original weights would miss.
The seed is the first SEED + 100 r whose routing has no near-tie (router gap > 1e-3).
"""
import argparse, json, os, sys
import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(__file__))
from make_tiny_fixtures import reinit, run, T, V  # noqa: E402
from make_moe_fixtures import router_gap, set_sinks, MIN_GAP  # noqa: E402

SEED = 8765
NAME = "gpt_oss_mxfp4"
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)
KEEP = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def quantize(w):
    """w [..., K] (K % 32 == 0) -> (blocks uint8 [..., K/32, 16], scales uint8 [..., K/32])."""
    x = w.astype(np.float64).reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(x).max(-1)
    _, p = np.frexp(amax)  # amax = m 2^p, m in [0.5, 1): floor(log2 amax) = p - 1
    e = np.where(amax > 0, p - 1 - 2 + 127, 0).clip(0, 255)
    grid = FP4 * np.ldexp(1.0, e - 127)[..., None]  # [..., nb, 16]
    err = np.abs(grid[..., None, :] - x[..., :, None])  # [..., nb, 32, 16]
    codes = err.argmin(-1).astype(np.uint8)  # first minimum on a tie
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.astype(np.uint8), e.astype(np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tiny"))
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
              num_experts_per_tok=2, max_position_embeddings=64, rms_norm_eps=1e-5,
              sliding_window=4, layer_types=["sliding_attention", "full_attention"],
              rope_parameters=dict(rope_theta=150000.0, rope_type="yarn", factor=4.0,
                                   original_max_position_embeddings=16, beta_fast=32.0,
                                   beta_slow=1.0, truncate=False))
    for r in range(50):
        seed = SEED + 100 * r
        torch.manual_seed(seed)
        cfg = GptOssConfig(**kw)
        cfg._attn_implementation = "eager"
        model = GptOssForCausalLM(cfg).eval()
        reinit(model, seed)
        set_sinks(1.0)(model, torch.Generator().manual_seed(seed + 1000))
        ids = torch.from_numpy(np.random.default_rng(seed).integers(3, V, size=(1, T))).long()
        _, _, plain_logits, _ = run(model, ids)
        packed = {}
        for l, ly in enumerate(model.model.layers):
            ex = ly.mlp.experts
            for p in ("gate_up_proj", "down_proj"):
                w = getattr(ex, p).detach().numpy()  # [E, in, out]
                blocks, scales = quantize(np.ascontiguousarray(w.transpose(0, 2, 1)))
                deq = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                                 dtype=torch.float32)
                assert deq.shape == w.shape, (deq.shape, w.shape)
                getattr(ex, p).copy_(deq)
                packed[f"model.layers.{l}.mlp.experts.{p}_blocks"] = blocks
                packed[f"model.layers.{l}.mlp.experts.{p}_scales"] = scales
        gap = router_gap(model, ids, cfg.num_experts_per_tok)
        if gap > MIN_GAP:
            break
    assert gap > MIN_GAP, "routing near-ties for every seed tried"
    resid, attn, logits, final = run(model, ids)
    out = os.path.join(a.out, NAME)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    model.config.save_pretrained(out)
    c = json.load(open(os.path.join(out, "config.json")))
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": KEEP}
    json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=2, sort_keys=True)
    tensors = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()
               if not k.endswith("experts.gate_up_proj") and not k.endswith("experts.down_proj")}
    tensors.update(packed)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    # transformers' own MXFP4 loader, dequantizing, must give the same numbers.
    m2 = GptOssForCausalLM.from_pretrained(out, quantization_config=Mxfp4Config(dequantize=True),
                                           dtype=torch.float32, attn_implementation="eager").eval()
    _, _, l2, _ = run(m2, ids)
    loader_diff = float(np.abs(l2 - logits).max())
    assert loader_diff < 1e-5, f"transformers' MXFP4 loader disagrees: {loader_diff}"
    d = {"tokens": ids[0].numpy().astype(np.int64), "resid": resid.astype(np.float32),
         "attn": attn.astype(np.float32), "final": final.astype(np.float32),
         "logits": logits.astype(np.float32),
         "sink_mass": (1.0 - attn[:, :, 1:, :].sum(-1)).mean(-1).astype(np.float32),
         "quant_delta": np.array([np.abs(plain_logits - logits).max()], dtype=np.float32)}
    save_file(d, os.path.join(out, "expected.safetensors"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{NAME}: seed {seed}, {size} bytes, router gap {gap:.2e}, quant delta "
          f"{d['quant_delta'][0]:.3g}, transformers' MXFP4 loader {loader_diff:.2e}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Greedy ids of transformers' `generate` (KV cache on, float32, eager attention) on the
mixture-of-experts fixtures of make_moe_fixtures.py, for tests/real_hf_vs_gguf.rs.

Usage: /work/venv/bin/python scripts/moe_generate_ids.py [--fixtures tests/fixtures/tiny]

For each fixture directory the prompt is its `expected.safetensors` `tokens` (T = 12); the
script appends N_NEW = 20 greedy tokens (`do_sample=False`, no EOS) and writes
`<fixture>/generate.json` = {"prompt", "ids" (prompt + new), "transformers", "gaps"}, where
`gaps[s]` is the gap between the largest and the second largest logit at generated step s: a
step whose gap is within f32 rounding could go either way in another implementation, so the
test trusts the steps up to the first gap < 1e-4 only. Deterministic: the
same fixtures and library versions give the same file.
"""
import argparse, json, os
import torch
import transformers
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

N_NEW = 20
NAMES = ["qwen3_moe_norm_topk", "qwen3_moe_plain_topk", "qwen3_moe_sparse_step",
         "gpt_oss_strong_sink", "gpt_oss_no_sink", "gpt_oss_shapes_clamp"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tiny"))
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for name in NAMES:
        d = os.path.join(a.fixtures, name)
        prompt = [int(x) for x in load_file(os.path.join(d, "expected.safetensors"))["tokens"]]
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=N_NEW, do_sample=False, use_cache=True,
                                 pad_token_id=0, eos_token_id=None, output_scores=True,
                                 return_dict_in_generate=True)
        gaps = []
        for s in out.scores:
            top = torch.topk(s[0].float(), 2).values
            gaps.append(float(top[0] - top[1]))
        res = {"prompt": prompt, "ids": [int(x) for x in out.sequences[0]],
               "transformers": transformers.__version__, "gaps": gaps}
        with open(os.path.join(d, "generate.json"), "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        print(name, res["ids"][len(prompt):], f"min gap {min(gaps):.2e}")


if __name__ == "__main__":
    main()

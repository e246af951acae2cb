#!/usr/bin/env python3
"""Baseline of the greedy-generation bench: greedy generation of N new tokens with transformers' generate on the
same SmolLM2 GGUF file sinklab runs, CPU, 2 threads, KV cache on, no early stop at EOS.

Side by side with sinklab (same prompt, same N):
  sinklab secondary --model smollm2 --prompt "$P" --generate 512     # prints tokens/s
  python benches/generate_torch.py --model-dir ~/.cache/sinklab/smollm2/model --prompt "$P" --n 512
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--model-dir", required=True)
ap.add_argument("--gguf-file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
ap.add_argument("--prompt", required=True)
ap.add_argument("--n", type=int, default=512)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
torch.set_num_threads(a.threads)
tok = AutoTokenizer.from_pretrained(a.model_dir, gguf_file=a.gguf_file)
model = AutoModelForCausalLM.from_pretrained(a.model_dir, gguf_file=a.gguf_file, torch_dtype=torch.float32)
model.eval()
ids = tok(a.prompt, return_tensors="pt").input_ids
with torch.no_grad():
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=a.n, min_new_tokens=a.n, do_sample=False, use_cache=True)
    dt = time.perf_counter() - t0
new = out.shape[1] - ids.shape[1]
print(f"transformers generate: {new} tokens in {dt:.2f} s ({new / dt:.1f} tokens/s)")

#!/usr/bin/env python3
"""The transformers-written half of tests/real_hf_vs_gguf.rs: config.json and tokenizer.json of
SmolLM2-135M-Instruct as transformers saves them (transformers >= 5: RoPE base under
`rope_parameters.rope_theta`), read from the packaged GGUF.

Usage: /work/venv/bin/python scripts/make_smollm2_hf_fixture.py [--cache DIR]
Writes tests/fixtures/smollm2_hf/{config.json,tokenizer.json,tokenizer_config.json}. The test
writes the weights itself (the GGUF's tensors dequantized, in Hugging Face names and q/k order),
so the two loads differ only in what the directory format decides: config keys, tokenizer,
BOS policy.
"""
import argparse, os
from transformers import AutoConfig, AutoTokenizer

def cache_root():
    if os.environ.get("SINKLAB_CACHE"):
        return os.environ["SINKLAB_CACHE"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "sinklab")
    return os.path.expanduser("~/.cache/sinklab")

ap = argparse.ArgumentParser()
ap.add_argument("--cache", default=cache_root())
ap.add_argument("--out", default="tests/fixtures/smollm2_hf")
a = ap.parse_args()
d = os.path.join(a.cache, "smollm2/model")
f = "SmolLM2-135M-Instruct.Q4_1.gguf"
os.makedirs(a.out, exist_ok=True)
cfg = AutoConfig.from_pretrained(d, gguf_file=f)
cfg.save_pretrained(a.out)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
tok.save_pretrained(a.out)
for junk in ("generation_config.json", "special_tokens_map.json", "chat_template.jinja"):
    p = os.path.join(a.out, junk)
    if os.path.exists(p):
        os.remove(p)
print(sorted(os.listdir(a.out)), open(os.path.join(a.out, "config.json")).read())

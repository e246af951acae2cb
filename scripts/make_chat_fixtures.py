#!/usr/bin/env python3
"""Chat-template fixtures for tests/chat_template.rs.

Usage: /work/venv/bin/python scripts/make_chat_fixtures.py [--cache DIR] [--out tests/fixtures]
(after `sinklab fetch` of the packaged models).

For each packaged model, transformers loads its tokenizer from the same files sinklab reads
(the GGUF through `gguf_file=`, the HF directory as it is) and, when the files carry a chat
template, `tests/fixtures/chat_template_ids.json` gets the ids of
`apply_chat_template([{"role": "user", "content": m}], add_generation_prompt=True,
tokenize=True)` for each message m of MESSAGES. A model whose files carry no template is
recorded as `null` (sinklab must refuse it).
"""
import argparse, json, os
from transformers import AutoTokenizer

MESSAGES = [
    "What is 2+2?",
    "Let $a$ and $b$ be positive integers with $a + b = 20$. Find the largest possible value "
    "of $ab$. Please reason step by step, and put your final answer within \\boxed{}.",
    "  leading and trailing spaces, a newline\nand a tab\there  ",
    "Non-ASCII: café, 日本語, emoji 🙂; special-looking text <|im_end|> inside a message.",
]

def cache_root():
    if os.environ.get("SINKLAB_CACHE"):
        return os.environ["SINKLAB_CACHE"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "sinklab")
    return os.path.expanduser("~/.cache/sinklab")

MODELS = {
    "smollm2": ("smollm2/model", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b/model", "qwen2.5-coder-0.5b-instruct.gguf"),
    "gemma3-270m": ("gemma3-270m/model", "gemma-3-270m-q4_k_m.gguf"),
    "minilm": ("minilm/model", None),
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=cache_root())
    ap.add_argument("--out", default="tests/fixtures")
    a = ap.parse_args()
    out = {"messages": MESSAGES, "ids": {}}
    for name, (d, f) in MODELS.items():
        path = os.path.join(a.cache, d)
        tok = AutoTokenizer.from_pretrained(path, gguf_file=f) if f else AutoTokenizer.from_pretrained(path)
        if tok.chat_template is None:
            out["ids"][name] = None
            print(f"{name}: no chat template")
            continue
        rows = []
        for m in MESSAGES:
            enc = tok.apply_chat_template([{"role": "user", "content": m}],
                                          add_generation_prompt=True, tokenize=True)
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            rows.append([int(i) for i in ids])
        out["ids"][name] = rows
        print(f"{name}: {[len(r) for r in rows]} tokens")
    p = os.path.join(a.out, "chat_template_ids.json")
    with open(p, "w") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print("wrote", p)

if __name__ == "__main__":
    main()

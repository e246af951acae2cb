#!/usr/bin/env python3
"""Markdown rows of the engine table from scripts/bench_engine.sh's rows.jsonl ($ROWS).

Every cell is computed from the JSON lines of one run; a row measured with the load average
above the driver's limit is marked LOADED (not a result). Targets are the engine's speed targets. Each speed
row also gives the fraction of the machine's limit it reaches (the `limits/machine` row: f32
GEMM GFLOP/s for the forward, copy bandwidth for generation, which streams the weights once
per token).
"""
import json
import os
from collections import defaultdict

rows = defaultdict(dict)
order = []
LIM = {}
for line in open(os.environ["ROWS"]):
    d = json.loads(line)
    if d.get("row") == "limits/machine":
        LIM = d
        continue
    if d["row"] not in rows:
        order.append(d["row"])
    rows[d["row"]][d["side"]] = d



def frac_gemm(d):
    g = LIM.get("gemm_f32_gflops_1024")
    if not d or "gflops" not in d or not g:
        return ""
    return f"; {d['gflops']:.0f} GFLOP/s = {d['gflops'] / g:.0%} of the machine's f32 GEMM ({g:.0f})"


def frac_bw(d):
    g = LIM.get("copy_gbps_256mb")
    if not d or "implied_gbps" not in d or not g:
        return ""
    return f"; weights streamed at {d['implied_gbps']:.1f} GB/s = {d['implied_gbps'] / g:.0%} of copy bandwidth ({g:.1f})"


def mb(kb):
    return f"{kb / 1024:.0f} MB" if kb else "?"


def mark(*ds):
    ls = [d.get("runnable_before", 0) for d in ds if d]
    return f" **LOADED ({max(ls)} runnable tasks before the row): not a result**" if any(d.get("loaded") for d in ds if d) else ""


def err(d):
    return f"error: {d['error'][:80]}" if d and "error" in d else None


def gguf_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def row(kind, what, s, note, rr):
    if kind == "generate":
        b, t = rr.get("llama.cpp"), rr.get("transformers")
        cell = lambda d, name: err(d) or f"{name}{d['tokens_per_s']:.1f} tok/s ({d['new_tokens']} tokens){frac_bw(d) if name == '' else ''}"
        rat = []
        for d, n in ((b, "llama.cpp"), (t, "transformers")):
            if not (err(s) or err(d)):
                rat.append(f"{s['tokens_per_s'] / d['tokens_per_s']:.2f}× {n}")
        same = ""
        if b and s and not err(b) and not err(s):
            same = "; first 16 ids equal llama.cpp's" if s.get("first_ids") == b.get("first_ids") else "; first ids differ from llama.cpp's"
        tgt = ""
        if not (err(s) or err(b)):
            # The speed targets: ≥ 1× llama.cpp in q8 mode (its arithmetic), ≥ 0.5× in exact mode.
            want, mode = (1.0, "q8 mode") if note.startswith("--matmul q8") else (0.5, "exact mode")
            tgt = f"≥ {want:g}× llama.cpp ({mode}): " + ("met" if s["tokens_per_s"] >= want * b["tokens_per_s"] else "not met")
        print(f"| greedy generation {what}, KV cache ({note}) | {cell(s, '')} | {cell(b, 'llama.cpp ')}; {cell(t, 'transformers ')} | {', '.join(rat)}{same} | {tgt}{mark(s, b, t)} |")
    elif kind == "forward":
        t = rr.get("transformers")
        sc = err(s) or f"{s['best_s']:.3f} s (best of {len(s['times_s'])}){frac_gemm(s)}"
        tc = err(t) or f"transformers eager + attentions + hidden states {t['best_s']:.3f} s"
        ok = not (err(s) or err(t))
        ratio = f"{t['best_s'] / s['best_s']:.2f}× (transformers / sinklab)" if ok else ""
        tgt = ("≥ 1.2×: " + ("met" if t["best_s"] / s["best_s"] >= 1.2 else "not met")) if ok else ""
        print(f"| forward {what}, full capture ({note}), T = {s.get('tokens', '?') if s else '?'} | {sc} | {tc} | {ratio} | {tgt}{mark(s, t)} |")
    elif kind == "prefill":
        b = rr.get("llama.cpp")
        sc = err(s) or f"{s['best_s']:.3f} s (best of {len(s['times_s'])}, no capture){frac_gemm(s)}"
        bc = err(b) or f"llama.cpp eval from an empty cache {b['best_s']:.3f} s"
        ok = not (err(s) or err(b))
        ratio = f"{b['best_s'] / s['best_s']:.2f}× (llama.cpp / sinklab)" if ok else ""
        tgt = ""
        if ok and note.startswith("--matmul q8"):
            tgt = "≥ 1× llama.cpp (q8 mode): " + ("met" if b["best_s"] >= s["best_s"] else "not met")
        print(f"| prefill {what} ({note}), T = {s.get('tokens', '?') if s else '?'} | {sc} | {bc} | {ratio} | {tgt}{mark(s, b)} |")


print("| work | sinklab | baseline | ratio | target |")
print("|---|---|---|---|---|")
load_rss = {}
for r in order:
    kind, what = r.split("/", 1)
    s = rows[r].get("sinklab")
    if kind == "load":
        b = rows[r].get("llama.cpp")
        size = gguf_size(s["model"]) if s else None
        load_rss[what] = s.get("rss_after_load_kb") if s else None
        sc = err(s) or f"{s['load_s']:.2f} s, peak {mb(s['peak_rss_after_load_kb'])}"
        bc = err(b) or f"llama.cpp {b['load_s']:.2f} s, peak {mb(b['peak_rss_after_load_kb'])}"
        ratio = "" if err(s) or err(b) else f"{b['load_s'] / s['load_s']:.2f}× (llama.cpp time / sinklab time)"
        tgt = ""
        if s and not err(s) and size:
            ok = s["load_s"] <= 1.0
            tgt = f"≤ 1 s: {'met' if ok else 'not met'}; peak / file {s['peak_rss_after_load_kb'] * 1024 / size:.2f}"
        print(f"| load {what} (GGUF {size / 1e6 if size else 0:.0f} MB) | {sc} | {bc} | {ratio} | {tgt}{mark(s, b)} |")
    elif kind in ("generate", "forward", "prefill"):
        for side, note in (("sinklab", "weights as in the file"), ("sinklab-f32", "--weights f32"),
                           ("sinklab-q8", "--matmul q8, weights as in the file")):
            if side in rows[r]:
                row(kind, what, rows[r][side], note, rows[r])
    elif kind.startswith("stats_T"):
        res = load_rss.get(what)
        sc = err(s) or f"peak {mb(s.get('proc_max_rss_kb'))}, {s.get('proc_wall_s', 0):.1f} s"
        ok = not err(s) and res
        ratio = f"{s['proc_max_rss_kb'] / res:.2f}× resident model" if ok else ""
        tgt = ("≤ 2×: " + ("met" if s["proc_max_rss_kb"] / res <= 2.0 else "not met")) if ok else ""
        print(f"| `sinklab real --json` {what}, T = {kind[7:]}, every statistic | {sc} | resident model {mb(res)} (sinklab load row) | {ratio} | {tgt}{mark(s)} |")
    elif kind == "synth":
        sc = err(s) or f"wrote {s.get('bytes', 0) / 1e9:.2f} GB in {s.get('proc_wall_s', 0):.0f} s, writer peak {mb(s.get('proc_max_rss_kb'))}"
        print(f"| `sinklab synth --shape {what} --dtype q4km` | {sc} | | | writer peak ≪ file{mark(s)} |")
    elif kind == "big_real":
        sc = err(s) or f"peak {mb(s.get('proc_max_rss_kb'))}, {s.get('proc_wall_s', 0):.1f} s (load + forward + statistics)"
        ok = not err(s)
        tgt = ("peak ≤ 8 GB: " + ("met" if s["proc_max_rss_kb"] <= 8 * 1024 * 1024 else "not met")) if ok else ""
        print(f"| `sinklab real` synthetic {what} (Q4_K_M mix) | {sc} | | | {tgt}{mark(s)} |")
    elif kind == "big_forward":
        b = rows[r].get("llama.cpp")
        sc = err(s) or f"{s['best_s']:.1f} s per forward (T = {s['tokens']}, no capture), load {s['load_s']:.1f} s, peak {mb(s['peak_rss_kb'])}"
        bc = (err(b) or f"llama.cpp eval from an empty cache {b['best_s']:.1f} s") if b else ""
        ratio = f"{b['best_s'] / s['best_s']:.2f}× (llama.cpp / sinklab)" if b and not (err(s) or err(b)) else ""
        print(f"| forward synthetic {what} | {sc} | {bc} | {ratio} | {mark(s, b) if b else mark(s)} |")

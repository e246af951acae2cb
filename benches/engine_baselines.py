#!/usr/bin/env python3
"""Baselines of the engine benchmarks, one measurement per process (driver:
scripts/bench_engine.sh). Prints one JSON line, with the same keys as benches/engine.rs.

  engine_baselines.py llama-load     GGUF
  engine_baselines.py llama-generate GGUF IDS N
  engine_baselines.py llama-prefill  GGUF IDS REPS
  engine_baselines.py torch-load     GGUF
  engine_baselines.py torch-generate GGUF IDS N
  engine_baselines.py torch-forward  GGUF IDS REPS

IDS: comma-separated token ids (the same ids sinklab gets). Threads: --threads (default 2) for
llama.cpp (n_threads, n_threads_batch) and torch (set_num_threads). "generate" is greedy with the
KV cache and times prefill + N new tokens, like sinklab's generate_greedy; "forward" is float32
eager attention with output_attentions and output_hidden_states, best of REPS after a warm-up;
"prefill" is llama.cpp's evaluation of IDS from an empty cache (one batch when IDS fit n_batch),
best of REPS after a warm-up.
"""
import argparse
import json
import os
import resource
import sys
import time


def rss_kb():
    """(peak, current) resident set of this process in kB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cur = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1])
    return peak, cur


def out(d):
    print(json.dumps(d), flush=True)


ap = argparse.ArgumentParser()
ap.add_argument("mode")
ap.add_argument("model")
ap.add_argument("rest", nargs="*")
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
base = {"mode": a.mode, "model": a.model, "threads": a.threads}

try:
    if a.mode.startswith("llama-"):
        import llama_cpp

        base["tool"] = "llama.cpp"
        base["version"] = llama_cpp.__version__
        base["system_info"] = llama_cpp.llama_print_system_info().decode().strip()
        isa = os.path.join(sys.prefix, "llama_cpp_isa.txt")
        base["isa"] = open(isa).read().strip() if os.path.exists(isa) else "unknown"
        ids = [int(x) for x in a.rest[0].split(",")] if a.rest else []
        n = int(a.rest[1]) if len(a.rest) > 1 and a.mode == "llama-generate" else 0
        t0 = time.perf_counter()
        llm = llama_cpp.Llama(
            model_path=a.model,
            n_ctx=max(512, len(ids) + n + 8),
            n_batch=512,
            n_threads=a.threads,
            n_threads_batch=a.threads,
            verbose=False,
        )
        base["load_s"] = time.perf_counter() - t0
        base["peak_rss_after_load_kb"], base["rss_after_load_kb"] = rss_kb()
        if a.mode == "llama-generate":
            t0 = time.perf_counter()
            got = []
            # temp 0 is llama-cpp-python's greedy (argmax) sampling; no EOS stop inside generate().
            for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
                got.append(tok)
                if len(got) == n:
                    break
            dt = time.perf_counter() - t0
            base.update(prompt_tokens=len(ids), new_tokens=len(got), wall_s=dt,
                        tokens_per_s=len(got) / dt, first_ids=got[:16])
        elif a.mode == "llama-prefill":
            reps = max(1, int(a.rest[1]))

            def run():
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(ids)
                return time.perf_counter() - t0

            if reps > 1:
                run()
            times = [run() for _ in range(reps)]
            base.update(tokens=len(ids), capture="none", best_s=min(times), times_s=times)
        elif a.mode != "llama-load":
            raise SystemExit(f"unknown mode {a.mode}")
    elif a.mode.startswith("torch-"):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(a.threads)
        base["tool"] = "transformers"
        base["version"] = f"transformers {transformers.__version__}, torch {torch.__version__}"
        d, f = os.path.split(os.path.abspath(a.model))
        t0 = time.perf_counter()
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
        base["load_s"] = time.perf_counter() - t0
        base["peak_rss_after_load_kb"], base["rss_after_load_kb"] = rss_kb()
        if a.mode in ("torch-generate", "torch-forward"):
            ids = torch.tensor([[int(x) for x in a.rest[0].split(",")]])
        with torch.no_grad():
            if a.mode == "torch-generate":
                n = int(a.rest[1])
                t0 = time.perf_counter()
                o = m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True)
                dt = time.perf_counter() - t0
                new = o.shape[1] - ids.shape[1]
                base.update(prompt_tokens=ids.shape[1], new_tokens=int(new), wall_s=dt,
                            tokens_per_s=new / dt, first_ids=o[0, ids.shape[1]:ids.shape[1] + 16].tolist())
            elif a.mode == "torch-forward":
                reps = max(1, int(a.rest[1]))
                run = lambda: m(input_ids=ids, output_attentions=True, output_hidden_states=True)
                if reps > 1:
                    run()
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
                base.update(tokens=ids.shape[1], capture="attentions+hidden_states",
                            best_s=min(times), times_s=times)
            elif a.mode != "torch-load":
                raise SystemExit(f"unknown mode {a.mode}")
    else:
        raise SystemExit(f"unknown mode {a.mode} (llama-load, llama-generate, llama-prefill, torch-load, torch-generate, torch-forward)")
except SystemExit:
    raise
except Exception as e:  # a baseline that cannot run says why, as a row
    base["error"] = f"{type(e).__name__}: {e}"
    base["peak_rss_kb"] = rss_kb()[0]
    out(base)
    sys.exit(1)
base["peak_rss_kb"] = rss_kb()[0]
out(base)

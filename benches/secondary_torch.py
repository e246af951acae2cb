"""Baseline for benches/secondary.rs: the same detector (docs/theory.md §8) written with
torch tensor ops on the CPU, on the same shape (30 layers x 4096 tokens x d = 576, f32,
BOS along e_0 with a high-norm window on layers 3..26 and 40 planted sinks).

    /work/venv/bin/python benches/secondary_torch.py
"""
import time

import torch

L, T, D = 30, 4096, 576
g = torch.Generator().manual_seed(1)
h = torch.rand(L, T, D, generator=g) - 0.5
for layer in range(L):
    h[layer, 0, 0] = 500.0 if 3 <= layer < 26 else 50.0
    for k in range(40):
        if 5 + k % 10 <= layer < 15 + k % 10:
            h[layer, 100 * (k + 1), 0] = 80.0 if k % 2 == 0 else -80.0


def detect(h, tau=0.9, window=True):
    n = h[:, 0, :].norm(dim=-1)
    if window:
        d = n[1:] - n[:-1]
        start = int(torch.argmax(d)) + 1
        end = int(torch.argmin(d[start:])) + start + 1
    else:
        start, end = 0, h.shape[0]
    sinks = {}
    for layer in range(start, end):
        c = torch.nn.functional.cosine_similarity(h[layer, 1:, :], h[layer, 0:1, :], dim=-1)
        for t in (c.abs() > tau).nonzero().flatten().tolist():
            sinks.setdefault(t + 1, []).append(layer)
    return (start, end), sinks


(w, s) = detect(h)
assert w == (3, 26) and len(s) == 40, (w, len(s))
for name, win in [("window", True), ("all_layers", False)]:
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        detect(h, window=win)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"torch {torch.__version__} threads {torch.get_num_threads()} {name}: median {times[5]*1e3:.1f} ms, min {times[0]*1e3:.1f} ms")

"""A worked example of sinklab from Python, top to bottom.

Run it as a script: ``python examples/python/walkthrough.py [MODEL] [--plot out.png]``.
MODEL is a packaged name (``smollm2``), a GGUF file or a Hugging Face directory; without one it
uses the tiny seeded test model in ``tests/fixtures/tiny/llama_default`` (no download, no
tokenizer). The pytest suite runs it (python/tests/test_example.py).

1. A native run: hidden states and attention maps as numpy arrays.
2. Paper B's secondary-sink detector on those hidden states (any [L, T, d] array works:
   ``torch.stack(model(ids, output_hidden_states=True).hidden_states[1:])[:, 0]`` from
   transformers gives the same layout).
3. The attention to the first token per layer, the §9 pattern metrics of each layer's maps, and
   (with matplotlib) one layer's heatmap.
4. One's own embeddings: the half-space verdict (docs/theory.md §3) with its certificate checked in
   numpy, and the minimal sink/diagonal costs (docs/theory.md §6) on orthonormal embeddings.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import sinklab

REPO = Path(__file__).resolve().parents[2]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(REPO / "tests/fixtures/tiny/llama_default"))
    ap.add_argument("--text", default="The quick brown fox jumps over the lazy dog.")
    ap.add_argument("--plot", help="write a heatmap of the last layer's first head here (needs matplotlib)")
    a = ap.parse_args(argv)
    out = {}

    # 1. A native run.
    m = sinklab.load(a.model)
    try:
        ids = m.tokenize(a.text)
    except sinklab.Error:  # a model without a tokenizer: fixed ids
        ids = [1, 5, 9, 13, 2, 7, 33, 60, 4, 11, 3, 8]
    r = m.run(ids, hidden=True, attention=True)
    L, T = r.attention.shape[0], len(ids)
    print(f"{m!r}: T = {T}, hidden {r.hidden.shape}, attention {r.attention.shape}")
    if r.nll is not None:
        print(f"mean next-token loss {r.nll.mean():.4f} nats")

    # 2. Paper B's detector on the block outputs [L, T, d].
    det = sinklab.secondary.detect(r.hidden[1:])
    print(f"detector: BOS {det.bos}, window {det.window}, {len(det.sinks)} flagged positions, "
          f"saturated: {det.saturated}")
    out["detection"] = det

    # 3. Mean attention to position 0 over heads and queries i ≥ 1, per layer.
    to_first = r.attention[:, :, 1:, 0].mean(axis=(1, 2))
    for layer, v in enumerate(to_first):
        print(f"layer {layer:2d}: attention to the first token {v:.3f}")
    out["attn_to_first"] = to_first
    # The §9 metrics of earlier work on each layer's maps [H, T, T] (any maps work, e.g.
    # transformers' out.attentions[l][0]): the definitions `sinklab real --json` reports.
    for layer in range(L):
        met = sinklab.patterns.metrics(r.attention[layer])
        print(f"layer {layer:2d}: Gu's sink rate (ε = 0.3) {met.sink_gu_eps03:.2f}, "
              f"mean row entropy {met.mean['row_entropy']:.3f}, dominant keys {met.dominant.tolist()}")
    out["metrics"] = met
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 3.4))
        im = ax.imshow(r.attention[L - 1, 0], cmap="viridis", vmin=0, vmax=1)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(f"layer {L - 1}, head 0")
        fig.colorbar(im)
        fig.savefig(a.plot, dpi=150, bbox_inches="tight")
        print(f"wrote {a.plot}")

    # 4a. One's own instance: queries with a positive first coordinate, keys below the sink
    # along the second; the verdict's witness W is checked here by computing its attention.
    rng = np.random.default_rng(0)
    q = rng.normal(size=(20, 8))
    q[:, 0] = 0.5 + rng.random(20)
    k = rng.normal(size=(15, 8))
    k[:, 1] = -rng.random(15)
    s = np.zeros(8)
    s[1] = 2.0
    v = sinklab.half_space(q, k, s, eps=0.05)
    z = q @ v.witness @ np.vstack([s, k]).T
    p = np.exp(z - z.max(axis=1, keepdims=True))
    mass = (p[:, 0] / p.sum(axis=1)).min()
    print(f"half-space: representable {v.representable}, witness cost {v.cost:.3g}, "
          f"smallest sink mass {mass:.4f} (≥ 0.95 required)")
    assert v.representable and mass >= 0.95
    out["verdict"] = v

    # 4b. Minimal costs on orthonormal embeddings against the closed forms of docs/theory.md §6.
    t, delta = 8, 3.0
    x, _ = np.linalg.qr(rng.normal(size=(t, t)))
    sink = sinklab.cost.minimal(x, "sink", "nuclear", delta)
    diag = sinklab.cost.minimal(x, "diagonal", "nuclear", delta)
    print(f"nuclear cost, T = {t}: sink [{sink.lower:.4f}, {sink.upper:.4f}] "
          f"(exact {delta * (t - 1) / math.sqrt(t):.4f}), diagonal [{diag.lower:.4f}, {diag.upper:.4f}] "
          f"(exact {delta * sum(math.sqrt(i / (i + 1)) for i in range(1, t)):.4f})")
    out["costs"] = (sink, diag)
    return out


if __name__ == "__main__":
    main()

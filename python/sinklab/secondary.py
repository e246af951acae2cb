"""Paper B's secondary-sink detector on hidden states from anywhere (``sinklab secondary``)."""

from __future__ import annotations

import numpy as np

from . import _native
from ._arrays import as_floats
from ._native import Error

__all__ = ["detect", "Detection", "PAPER_BOS_CANDIDATES", "PAPER_CHAT_BOS_CANDIDATES"]

#: The authors' candidate BOS positions (plain prompts) and under a chat template.
PAPER_BOS_CANDIDATES = (0, 1)
PAPER_CHAT_BOS_CANDIDATES = (0, 1, 2)


class Detection:
    """The detector's output on one sequence.

    - ``records``: one dict per detected sink, the JSON lines of ``sinklab secondary --json``;
    - ``bos``, ``window`` (scanned layers ``[start, end)``), ``sinks`` (position, layers,
      cosines, creation layer, lifetime, label), ``validity`` (flagged fractions, the
      saturation rule: ``saturated=True`` means anisotropy, not sinks);
    - ``claims``: the B1–B6 measures of this sequence; ``raw``: everything as one dict."""

    def __init__(self, raw: dict):
        self.raw = raw
        self.records = raw["records"]
        det = raw["detection"]
        self.bos = det["bos"]
        self.window = tuple(det["window"].values()) if isinstance(det["window"], dict) else tuple(det["window"])
        self.sinks = det["sinks"]
        self.validity = det["validity"]
        self.saturated = bool(det["validity"]["saturated"])
        self.claims = raw["claims"]
        self.variant = raw["variant"]

    def __repr__(self) -> str:
        return (
            f"Detection(bos={self.bos}, window={self.window}, sinks={len(self.sinks)}, "
            f"saturated={self.saturated})"
        )


def detect(
    hidden,
    *,
    tau: float = 0.9,
    bos_candidates=None,
    window: bool = True,
    centered: bool = False,
    chat: bool = False,
    bos_margin: int = 15,
    noise_max: int = 4,
) -> Detection:
    """Paper B's detector on residual streams ``hidden`` ``[L, T, d]`` (block outputs; from
    :meth:`sinklab.Model.run` pass ``run.hidden[1:]``, from transformers
    ``torch.stack(out.hidden_states[1:])[:, 0]``): position ``t`` is flagged at layer ``l`` iff
    ``|cos(h_t, h_bos)| > tau``, within the window of BOS-norm jumps (``window=False`` ↔
    ``--no-window``: every layer); labels from the lifetime (``bos_margin``, ``noise_max``).
    ``bos_candidates`` default to the authors' (0, 1), or (0, 1, 2) with ``chat=True``;
    ``centered=True`` removes the mean token state first. The keyword names mirror the flags of
    ``sinklab secondary``, and the records equal its ``--json`` lines on the same states."""
    h = as_floats("hidden", hidden, 3, dtype=np.float32, what="[L, T, d]")
    if bos_candidates is None:
        bos_candidates = PAPER_CHAT_BOS_CANDIDATES if chat else PAPER_BOS_CANDIDATES
    try:
        cands = [int(c) for c in bos_candidates]
    except TypeError:
        cands = [int(bos_candidates)]
    if not cands or any(c < 0 for c in cands):
        raise Error(f"bos_candidates: give non-negative positions, got {bos_candidates!r}")
    t = float(tau)
    if not (0.0 <= t <= 1.0):
        raise Error(f"tau must lie in [0, 1], got {tau}")
    if int(bos_margin) < 0 or int(noise_max) < 0:
        raise Error("bos_margin and noise_max must be non-negative")
    raw = _native.secondary_detect(
        h, t, cands, bool(window), bool(centered), int(bos_margin), int(noise_max)
    )
    return Detection(raw)

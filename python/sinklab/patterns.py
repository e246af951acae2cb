"""The pattern metrics of earlier work (docs/theory.md §9) on attention maps from anywhere.

Every number comes from the crate's own definitions (``patterns`` and ``real::stats``), the
ones ``sinklab real --json`` reports per layer: on the maps of a native run,
:func:`metrics` equals :meth:`sinklab.Model.stats`'s per-layer values.
"""

from __future__ import annotations

import numpy as np

from . import _native
from ._arrays import as_floats
from ._native import Error

__all__ = ["metrics", "Metrics", "ROW_SUM_TOL"]

#: How far above 1 a row of probabilities may sum: a float32 softmax row of T terms is off by
#: at most about T·2⁻²⁴ (≈ 1e-3 at T = 16 384).
ROW_SUM_TOL = 1e-3

_PER_HEAD = ("alpha_first", "dominant_mass", "routed_frac", "min_a", "row_entropy", "value_norm_ratio")


class Metrics:
    """The §9 metrics of one layer's maps ``[H, T, T]``.

    Layer values (as ``Model.stats()["layers"][l]``):

    - ``attn_to_first``: mean over heads and queries i ≥ 1 of A[i, 0];
    - ``sink_gu_eps03``, ``sink_gu_eps08``: Gu's sink rate, the fraction of heads with α₀ > ε.

    Per head, arrays ``[H]`` (NaN where undefined):

    - ``alpha_first``: Gu's α₀ = (1/T) Σᵢ A[i, 0] (every row); ``to_first``: the head's share
      of ``attn_to_first`` (rows i ≥ 1);
    - ``dominant``, ``dominant_mass``, ``routed_frac``, ``min_a``: the dominant column
      s = argmaxⱼ meanᵢ A[i, j], its mean mass, the fraction of queries with A[i, s] ≥ 0.5,
      minᵢ A[i, s];
    - ``row_entropy``: mean row entropy normalised by ln(visible keys); ``column_entropy``:
      entropy of the column masses normalised by ln T;
    - ``value_norm_ratio`` (with ``values``): ‖v_s‖ / mean_{j≠s} ‖v_j‖;
    - ``gu_alpha`` ``[H, T]``: Gu's α_k = (1/(T−k)) Σ_{i≥k} A[i, k] of every key.

    ``heads``: the per-head records exactly as ``Model.stats()`` prints them (with ``class``:
    NopLike / Broadcast / Intermediate when ``values`` are given); ``mean``: the per-head
    values averaged over the heads (over those where defined); ``raw``: everything as a dict."""

    def __init__(self, raw: dict):
        self.raw = raw
        self.heads = raw["heads"]
        self.attn_to_first = raw["attn_to_first"]
        self.sink_gu_eps03 = raw["sink_gu_eps03"]
        self.sink_gu_eps08 = raw["sink_gu_eps08"]
        self.causal = raw["causal"]

        def col(k):
            return np.array([np.nan if h[k] is None else h[k] for h in self.heads], dtype=np.float64)

        for k in _PER_HEAD:
            setattr(self, k, col(k))
        self.dominant = np.array([h["dominant"] for h in self.heads], dtype=np.int64)
        self.to_first = np.array(raw["to_first"], dtype=np.float64)
        self.column_entropy = np.array(
            [np.nan if c is None else c for c in raw["column_entropy"]], dtype=np.float64
        )
        self.gu_alpha = np.array(raw["gu_alpha"], dtype=np.float64)
        self.mean = {}
        for k in (*_PER_HEAD, "column_entropy", "to_first"):
            v = getattr(self, k)
            ok = v[~np.isnan(v)]
            self.mean[k] = float(ok.mean()) if ok.size else None

    def __repr__(self) -> str:
        return (
            f"Metrics(H={len(self.heads)}, attn_to_first={self.attn_to_first:.4g}, "
            f"sink_gu_eps03={self.sink_gu_eps03}, sink_gu_eps08={self.sink_gu_eps08})"
        )


def _causal_of(a: np.ndarray, causal):
    """Whether every map is zero above the diagonal (``causal=None``), or the caller's word,
    refused when the maps contradict it."""
    upper = np.triu(np.ones(a.shape[1:], dtype=bool), 1)
    above = np.abs(a[:, upper]) if upper.any() else np.zeros((a.shape[0], 0))
    zero_above = not above.any()
    if causal is None:
        return zero_above
    if bool(causal) and not zero_above:
        h, k = np.unravel_index(int(np.argmax(above)), above.shape)
        i, j = np.argwhere(upper)[k]
        raise Error(
            f"maps: causal=True but head {h} puts {a[h, i, j]:.3g} on key {j} > query {i} "
            "(give causal=False for bidirectional maps)"
        )
    return bool(causal)


def metrics(maps, *, values=None, causal=None, window=None) -> Metrics:
    """The §9 metrics of one layer's attention probabilities ``maps`` ``[H, T, T]`` (row =
    query, column = key), e.g. ``run.attention[l]`` of :meth:`sinklab.Model.run` or
    ``out.attentions[l][0]`` of transformers.

    ``values`` ``[H_kv, T, d_head]`` (``run.values[l]``; optional) adds each head's value-norm
    ratio and NOP/broadcast class (query head h reads kv head h // (H / H_kv)). ``causal``:
    None detects it (every map zero above the diagonal), True refuses maps that are not,
    False treats the maps as bidirectional (every key visible to the row entropy).
    ``window``: a sliding window of that many keys (the row entropy's visible keys).

    The maps must be probabilities: entries in [0, 1], rows summing to at most
    1 + :data:`ROW_SUM_TOL`, finite, non-empty, square; anything else raises
    :class:`sinklab.Error` naming the argument."""
    a = as_floats("maps", maps, 3, what="[H, T, T]")
    h, t, tk = a.shape
    if t != tk:
        raise Error(f"maps: expected square maps [H, T, T], got shape {a.shape}")
    lo = a.min()
    if lo < 0.0 or a.max() > 1.0 + ROW_SUM_TOL:
        bad = np.argwhere((a < 0.0) | (a > 1.0 + ROW_SUM_TOL))[0]
        raise Error(f"maps: entry {a[tuple(bad)]:.6g} at {tuple(int(i) for i in bad)} is not a probability")
    rows = a.sum(axis=2)
    if rows.max() > 1.0 + ROW_SUM_TOL:
        hh, i = np.unravel_index(int(np.argmax(rows)), rows.shape)
        raise Error(
            f"maps: row {i} of head {hh} sums to {rows[hh, i]:.9g} > 1 "
            f"(rows of attention probabilities sum to at most 1, tolerance {ROW_SUM_TOL})"
        )
    c = _causal_of(a, causal)
    if window is not None and int(window) < 1:
        raise Error(f"window: must be at least 1 key, got {window}")
    v, h_kv = None, 1
    if values is not None:
        vv = as_floats("values", values, 3, dtype=np.float32, what="[H_kv, T, d_head]")
        h_kv, tv, dh = vv.shape
        if tv != t or h % h_kv != 0:
            raise Error(
                f"values: expected [H_kv, T, d_head] with T = {t} and H_kv dividing H = {h}, "
                f"got shape {vv.shape}"
            )
        v = np.ascontiguousarray(vv.transpose(1, 0, 2).reshape(t, h_kv * dh))
    raw = _native.pattern_metrics(a, v, h_kv, c, None if window is None else int(window))
    raw["causal"] = c
    return Metrics(raw)

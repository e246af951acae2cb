"""The oversmoothing prediction of docs/theory.md §7 (claim A2) for one head, on the user's
W_VO and hidden-state statistics: ``oversmoothing::predict::head_prediction`` of the crate.

With the head's attention replaced by A_λ = (1−λ)I + λU and tokens x with mean μ and covariance
Σ, the mean token cosine after y = N(x + W A_λ X) tends (n → ∞, bidirectional) to
ρ₀ = ‖m′‖² / (‖m′‖² + tr C′), m′ = L(I+W)μ, C′ = L B Σ Bᵀ Lᵀ, B = I + (1−λ)W, L the norm's
readout (identity and RMSNorm: I; LayerNorm: the centring projection; a gain multiplies on the
left). ρ₂ adds the delta-method correction. Sign condition: dense (λ = 1) smooths more than
identity (λ = 0) iff tr(L(I+W)Σ(I+W)ᵀLᵀ) > tr(LΣLᵀ), when m′ ≠ 0.
"""

from __future__ import annotations

import numpy as np

from . import _native
from ._arrays import as_floats
from ._native import Error

__all__ = ["predict", "Prediction"]


class Prediction:
    """The prediction for one head.

    - ``cos_identity``, ``cos_uniform``: ρ₀ with the head's attention replaced by the identity
      (λ = 0) and by uniform attention (λ = 1);
    - ``identity``, ``uniform``: dicts ``rho0``, ``rho2`` (delta-method value), ``eta`` (scale of
      ρ₀'s first-order error), ``mean_sq`` ‖m′‖², ``trace`` tr C′, ``eff_rank``;
    - ``dense_smooths_more``: the sign condition (True, False, or None when the prediction is
      the same at both ends); ``gap`` = ρ₀(λ=1) − ρ₀(λ=0); ``sign``: the condition's traces
      ``tr_identity``, ``tr_dense`` and ``mean_sq``."""

    def __init__(self, raw: dict):
        self.raw = raw
        self.identity = raw["identity"]
        self.uniform = raw["uniform"]
        self.sign = raw["sign"]
        self.cos_identity = self.identity["rho0"]
        self.cos_uniform = self.uniform["rho0"]
        self.dense_smooths_more = self.sign["dense_smooths_more"]
        self.gap = self.sign["gap"]

    def __repr__(self) -> str:
        return (
            f"Prediction(cos_identity={self.cos_identity:.6g}, cos_uniform={self.cos_uniform:.6g}, "
            f"dense_smooths_more={self.dense_smooths_more})"
        )


def predict(w_vo, *, mu=None, sigma=None, hidden=None, norm: str = "rms", gain=None) -> Prediction:
    """The §7 prediction for a head with value-output map ``w_vo`` ``[d, d]`` (the head writes
    ``w_vo @ x`` for an attended token x; W = W_O,h W_V,h in a model's column convention).

    The hidden-state statistics are either ``mu`` ``[d]`` and ``sigma`` ``[d, d]`` (symmetric
    positive semi-definite to 1e-8 relative; a singular estimate is fine), or ``hidden``
    ``[n, d]``, the head's input tokens, whose mean and covariance (over n, as ``sinklab real``
    estimates them) are used; pass ``hidden[1:]`` to leave the sink row out as it does.
    ``norm``: the norm after the residual, ``"identity"``, ``"rms"`` or ``"layer"``; ``gain``
    ``[d]``: its learned gain (none for ``"identity"``)."""
    w = as_floats("w_vo", w_vo, 2, what="[d, d]")
    d = w.shape[0]
    if w.shape != (d, d):
        raise Error(f"w_vo: expected a square [d, d] map, got shape {w.shape}")
    if hidden is not None:
        if mu is not None or sigma is not None:
            raise Error("hidden: give either hidden or mu and sigma, not both")
        x = as_floats("hidden", hidden, 2, what="[n, d]")
        if x.shape[1] != d:
            raise Error(f"hidden: width {x.shape[1]} differs from w_vo's d = {d}")
        m = x.mean(axis=0)
        xc = x - m
        s = (xc.T @ xc) / x.shape[0]
    else:
        if mu is None or sigma is None:
            raise Error("mu, sigma: give both (or hidden [n, d] instead)")
        m = as_floats("mu", mu, 1, what="[d]")
        s = as_floats("sigma", sigma, 2, what="[d, d]")
        if m.shape[0] != d:
            raise Error(f"mu: length {m.shape[0]} differs from w_vo's d = {d}")
        if s.shape != (d, d):
            raise Error(f"sigma: expected [{d}, {d}], got shape {s.shape}")
    g = None if gain is None else as_floats("gain", gain, 1, what="[d]")
    if g is not None and g.shape[0] != d:
        raise Error(f"gain: length {g.shape[0]} differs from w_vo's d = {d}")
    if norm not in ("identity", "rms", "layer"):
        raise Error(f'norm={norm!r}: give "identity", "rms" or "layer"')
    # The norm's ε leaves every cosine unchanged (scale invariance), so any value serves.
    return Prediction(_native.oversmoothing_predict(w, np.ascontiguousarray(m), np.ascontiguousarray(s), norm, 1e-6, g))

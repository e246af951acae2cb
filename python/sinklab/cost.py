"""The minimal cost of a sink or diagonal pattern on given embeddings (docs/theory.md §6)."""

from __future__ import annotations

from . import _native
from ._arrays import as_floats
from ._native import Cost, Error

__all__ = ["minimal", "Cost"]


def minimal(
    x,
    pattern: str,
    norm: str,
    delta: float,
    scope: str = "qk",
    *,
    on_rate: float = 0.25,
    seed: int = 0,
    tol: float = 1e-3,
    max_iter: int = 20000,
    max_mem=None,
) -> Cost:
    """``min ‖W‖ s.t. x_iᵀ W (x_{t(i)} − x_j) ≥ delta`` for every query ``i ≥ 1`` and visible key
    ``j ≤ i``, ``j ≠ t(i)`` (``t(i) = 0`` for ``pattern="sink"``, ``i`` for ``"diagonal"``);
    ``x`` ``[T, d]`` the embeddings, row 0 the sink; ``norm`` ``"fro"`` or ``"nuclear"``;
    ``scope="qk"`` prices W_QK alone, ``"head"`` the whole head on copy-paste (``on_rate``,
    ``seed`` of its sources). Returns a certified bracket: ``lower ≤ min ≤ upper = value``
    (relative gap ≤ ``tol`` unless ``max_iter`` ran out), or ``feasible=False``."""
    a = as_floats("x", x, 2, what="[T, d]")
    if a.shape[0] < 2:
        raise Error(f"x: needs at least 2 rows (the sink and a query), got shape {a.shape}")
    d = float(delta)
    if not (d > 0.0 and d < float("inf")):
        raise Error(f"delta: must be positive and finite, got {delta}")
    if not (0.0 < float(tol) < 1.0):
        raise Error(f"tol: must lie in (0, 1), got {tol}")
    if int(max_iter) < 1:
        raise Error(f"max_iter: must be at least 1, got {max_iter}")
    if scope == "head" and not (0.0 < float(on_rate) < 1.0):
        raise Error(f"on_rate: must lie in (0, 1), got {on_rate}")
    return _native.cost_minimal(
        a, str(pattern), str(norm), d, str(scope), float(on_rate), int(seed), float(tol),
        int(max_iter), max_mem,
    )

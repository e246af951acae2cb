"""sinklab's analyses on arrays from anywhere: the half-space verdict with its certificate
checked in numpy, minimal costs against the closed forms, paper B's detector against the
command line, and refusals of bad arrays."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import sinklab
from conftest import FIXTURES, cli, read_safetensors, write_safetensors


def planted(seed=0, n=12, m=9, d=6):
    """Queries with a·x ≥ 0.5 (a = e0) and keys with b·(s − k) ≥ 1 (b = e1, s = 2 e1):
    conditions (a) and (b) of docs/theory.md §3 hold by construction."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, d))
    q[:, 0] = 0.5 + rng.random(n)
    k = rng.normal(size=(m, d))
    k[:, 1] = -rng.random(m)
    s = rng.normal(size=d)
    s[1] = 2.0
    return q, k, s


def sink_mass(w, q, k, s):
    """The attention each query puts on the sink under logits xᵀ W k, computed here."""
    keys = np.vstack([s, k])
    z = q @ w @ keys.T
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p[:, 0] / p.sum(axis=1)


@pytest.mark.parametrize("seed", range(3))
def test_representable_instance_has_a_witness_checked_here(seed):
    q, k, s = planted(seed)
    eps = 0.05
    v = sinklab.half_space(q, k, s, eps=eps)
    assert v.representable and v.verified and bool(v)
    assert v.witness.shape == (6, 6)
    assert sink_mass(v.witness, q, k, s).min() >= 1 - eps - 1e-12
    # Margins: γ_a = min a·x > 0 and γ_b = min b·(s − k) > 0, as recomputed from a and b.
    assert v.gamma_a == pytest.approx((q @ v.a).min(), rel=1e-12) and v.gamma_a > 0
    assert v.gamma_b == pytest.approx(((s - k) @ v.b).min(), rel=1e-12) and v.gamma_b > 0
    assert v.margin >= 0
    assert v.weights == {"queries": None, "keys": None}
    # Any layout and dtype: a Fortran-ordered float32 copy gives the same verdict.
    v32 = sinklab.half_space(np.asfortranarray(q.astype(np.float32)), k.astype(np.float32), s)
    assert v32.representable


def test_queries_around_the_origin_are_not_representable():
    q, k, s = planted(1)
    q = np.vstack([q, -q[:3]])  # x and −x: 0 is in the hull of the queries, (a) fails
    v = sinklab.half_space(q, k, s)
    assert not v.representable and v.queries_fail and not v.sink_fails and v.verified
    assert v.witness is None
    lam = v.weights["queries"]
    assert lam.shape == (len(q),) and lam.min() >= 0 and lam.sum() == pytest.approx(1, abs=1e-9)
    assert np.linalg.norm(lam @ q) <= 1e-6 * np.abs(q).max()


def test_a_sink_inside_the_keys_is_not_representable():
    q, k, s = planted(2)
    s = 0.3 * k[0] + 0.7 * k[4]  # s in the hull of the keys: (b) fails
    v = sinklab.half_space(q, k, s)
    assert not v.representable and v.sink_fails and not v.queries_fail and v.verified
    mu = v.weights["keys"]
    assert mu.min() >= 0 and mu.sum() == pytest.approx(1, abs=1e-9)
    assert np.linalg.norm(mu @ k - s) <= 1e-6 * max(1.0, np.abs(k).max())


def orthonormal(t, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(t, t)))
    return q


@pytest.mark.parametrize("t", [4, 8, 16])
def test_minimal_costs_on_orthonormal_embeddings_equal_the_closed_forms(t):
    delta = 3.0
    x = orthonormal(t, seed=t)
    closed = {
        # src/cost/exact.rs: sink nuclear Δ(T−1)/√T, diagonal nuclear Δ Σ √(i/(i+1)),
        # Frobenius (both) Δ √(T − H_T).
        ("sink", "nuclear"): delta * (t - 1) / math.sqrt(t),
        ("diagonal", "nuclear"): delta * sum(math.sqrt(i / (i + 1)) for i in range(1, t)),
        ("sink", "fro"): delta * math.sqrt(t - sum(1 / i for i in range(1, t + 1))),
        ("diagonal", "fro"): delta * math.sqrt(t - sum(1 / i for i in range(1, t + 1))),
    }
    for (pattern, norm), exact in closed.items():
        c = sinklab.cost.minimal(x, pattern, norm, delta, tol=1e-4)
        assert c.feasible
        # A certified bracket: lower ≤ exact ≤ upper (up to rounding), and it is tight.
        assert c.lower <= exact * (1 + 1e-9) and exact <= c.upper * (1 + 1e-9), (pattern, norm, c)
        assert c.upper == c.value and (c.upper - c.lower) / c.upper <= 1e-4 + 1e-12


def tiny_resid(name="llama_default"):
    return read_safetensors(FIXTURES / "tiny" / name / "expected.safetensors")["resid"]


def synthetic(seed=0, L=8, T=24, d=16):
    """A residual stream with a BOS whose norm jumps at layer 2 and a token aligned with it
    from layer 3 to 6 (a planted secondary sink), the rest random."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(L, T, d)).astype(np.float32)
    u = np.zeros(d, np.float32)
    u[0] = 1
    h[2:, 0] += 40 * u
    h[3:7, 9] += 30 * u
    return h


@pytest.mark.parametrize("source", ["synthetic", "tiny"])
@pytest.mark.parametrize("window", [True, False])
def test_detector_records_equal_the_command_line(tmp_path, source, window):
    h = synthetic() if source == "synthetic" else tiny_resid()
    f = tmp_path / "h.safetensors"
    write_safetensors(f, {f"hidden.{l}": h[l] for l in range(h.shape[0])})
    args = ["secondary", "--activations", f, "--json"] + ([] if window else ["--no-window"])
    lines = [json.loads(x) for x in cli(*args).splitlines() if x.strip()]
    det = sinklab.secondary.detect(h, window=window)
    assert det.records == lines
    if source == "synthetic" and window:
        assert any(s["position"] == 9 for s in det.sinks)
    # float64 and a non-contiguous view give the same records.
    h64 = np.asfortranarray(h.astype(np.float64))
    assert sinklab.secondary.detect(h64, window=window).records == lines


@pytest.mark.parametrize(
    "call",
    [
        lambda: sinklab.half_space(np.full((3, 2), np.nan), np.ones((2, 2)), np.ones(2)),
        lambda: sinklab.half_space(np.ones((3, 2)), np.ones((2, 3)), np.ones(2)),
        lambda: sinklab.half_space(np.ones((0, 2)), np.ones((2, 2)), np.ones(2)),
        lambda: sinklab.half_space(np.ones(3), np.ones((2, 3)), np.ones(3)),
        lambda: sinklab.half_space(np.array([["a", "b"]]), np.ones((2, 2)), np.ones(2)),
        lambda: sinklab.half_space(np.ones((3, 2)), np.ones((2, 2)), np.ones(2), eps=1.5),
        lambda: sinklab.cost.minimal(np.eye(4), "sink", "spectral", 1.0),
        lambda: sinklab.cost.minimal(np.eye(4), "sink", "fro", -1.0),
        lambda: sinklab.cost.minimal(np.eye(4)[:1], "sink", "fro", 1.0),
        lambda: sinklab.cost.minimal(np.array([[1.0, np.inf], [0, 1]]), "sink", "fro", 1.0),
        lambda: sinklab.secondary.detect(np.ones((4, 5))),
        lambda: sinklab.secondary.detect(np.ones((2, 4, 3)), tau=2.0),
        lambda: sinklab.secondary.detect(np.ones((2, 4, 3)), bos_candidates=[7]),
        lambda: sinklab.check("no_such_theorem"),
    ],
)
def test_bad_arrays_and_arguments_raise_sinklab_error(call):
    with pytest.raises(sinklab.Error):
        call()


def test_the_argument_is_named():
    with pytest.raises(sinklab.Error, match="keys"):
        sinklab.half_space(np.ones((3, 2)), np.array([[1.0, np.nan]]), np.ones(2))
    with pytest.raises(sinklab.Error, match="hidden"):
        sinklab.secondary.detect(np.zeros((0, 3, 2)))


class Wrapped:
    """Anything with __array__ (as a torch tensor) is accepted."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


def test_array_likes_are_accepted():
    q, k, s = planted(0)
    assert sinklab.half_space(Wrapped(q), Wrapped(k), list(s)).representable


def test_registered_check_runs():
    assert "half_space" in sinklab.checks()
    o = sinklab.check("half_space", cases=5, seed=1)
    assert o["cases"] == 5 and o["failed"] == 0

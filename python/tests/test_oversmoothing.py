"""The §7 oversmoothing prediction for one head (`oversmoothing::predict::head_prediction`)
against its formulas evaluated here in numpy, on seeded cases and on both sides of the sign
condition."""

from __future__ import annotations

import numpy as np
import pytest

import sinklab


def case(seed, d=6, scale=0.4):
    rng = np.random.default_rng(seed)
    w = scale * rng.normal(size=(d, d))
    mu = rng.normal(size=d)
    a = rng.normal(size=(d, d))
    sigma = a @ a.T / d
    return w, mu, sigma


def readout(norm, d, gain=None):
    l = np.eye(d) if norm in ("identity", "rms") else np.eye(d) - np.ones((d, d)) / d
    return l if gain is None else np.diag(gain) @ l


def expected(w, mu, sigma, lam, l):
    """ρ₀ and ρ₂ of docs/theory.md §7 / src/oversmoothing/predict.rs, written out here."""
    d = len(mu)
    b = np.eye(d) + (1 - lam) * w
    m = l @ (np.eye(d) + w) @ mu
    c = l @ b @ sigma @ b.T @ l.T
    msq, tr = m @ m, np.trace(c)
    big = msq + tr
    mcm = m @ c @ m
    rho2 = (msq - 2 * mcm / big + 0.75 * msq * (2 * np.sum(c * c) + 4 * mcm) / big**2) / big
    return msq / big, rho2, msq, tr


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", ["identity", "rms", "layer"])
def test_prediction_equals_its_formulas(seed, norm):
    w, mu, sigma = case(seed)
    p = sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma, norm=norm)
    l = readout(norm, len(mu))
    for lam, got in ((0.0, p.identity), (1.0, p.uniform)):
        rho0, rho2, msq, tr = expected(w, mu, sigma, lam, l)
        assert got["rho0"] == pytest.approx(rho0, rel=1e-12)
        assert got["rho2"] == pytest.approx(rho2, rel=1e-10)
        assert got["mean_sq"] == pytest.approx(msq, rel=1e-12)
        assert got["trace"] == pytest.approx(tr, rel=1e-12)
    assert p.cos_identity == p.identity["rho0"] and p.cos_uniform == p.uniform["rho0"]
    assert p.gap == pytest.approx(p.cos_uniform - p.cos_identity, abs=1e-15)
    # The sign condition: dense smooths more iff tr(L(I+W)Σ(I+W)ᵀLᵀ) > tr(LΣLᵀ).
    d = len(mu)
    t_id = np.trace(l @ (np.eye(d) + w) @ sigma @ (np.eye(d) + w).T @ l.T)
    t_dense = np.trace(l @ sigma @ l.T)
    assert p.sign["tr_identity"] == pytest.approx(t_id, rel=1e-12)
    assert p.sign["tr_dense"] == pytest.approx(t_dense, rel=1e-12)
    assert p.dense_smooths_more == bool(t_id > t_dense)
    assert (p.gap > 0) == p.dense_smooths_more


@pytest.mark.parametrize("c,dense_more", [(0.5, True), (-0.5, False)])
def test_the_sign_condition_flips_with_w(c, dense_more):
    # W = cI: tr((I+W)Σ(I+W)ᵀ) = (1+c)² tr Σ, above tr Σ for c = 0.5, below for c = −0.5.
    _, mu, sigma = case(7)
    d = len(mu)
    p = sinklab.oversmoothing.predict(c * np.eye(d), mu=mu, sigma=sigma, norm="rms")
    assert p.sign["tr_identity"] == pytest.approx((1 + c) ** 2 * np.trace(sigma), rel=1e-12)
    assert p.dense_smooths_more is dense_more
    assert (p.cos_uniform > p.cos_identity) is dense_more


def test_hidden_states_give_their_mean_and_covariance():
    w, _, _ = case(3)
    x = np.random.default_rng(11).normal(size=(40, 6)) + 2.0
    p = sinklab.oversmoothing.predict(w, hidden=x, norm="layer", gain=np.linspace(0.5, 1.5, 6))
    mu = x.mean(axis=0)
    sigma = (x - mu).T @ (x - mu) / len(x)
    q = sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma, norm="layer", gain=np.linspace(0.5, 1.5, 6))
    assert p.identity == pytest.approx(q.identity) and p.sign == pytest.approx(q.sign)
    rho0, *_ = expected(w, mu, sigma, 0.0, readout("layer", 6, np.linspace(0.5, 1.5, 6)))
    assert p.cos_identity == pytest.approx(rho0, rel=1e-12)


def test_bad_inputs_raise_naming_the_argument():
    w, mu, sigma = case(0)
    with pytest.raises(sinklab.Error, match="w_vo"):
        sinklab.oversmoothing.predict(w[:, :5], mu=mu, sigma=sigma)
    with pytest.raises(sinklab.Error, match="sigma"):
        sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma[:5, :5])
    with pytest.raises(sinklab.Error, match="mu"):
        sinklab.oversmoothing.predict(w, mu=np.full(6, np.nan), sigma=sigma)
    with pytest.raises(sinklab.Error, match="not a covariance"):
        sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma + np.triu(np.ones((6, 6)), 1))
    with pytest.raises(sinklab.Error, match="not a covariance"):
        sinklab.oversmoothing.predict(w, mu=mu, sigma=-np.eye(6))
    with pytest.raises(sinklab.Error, match="norm"):
        sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma, norm="batch")
    with pytest.raises(sinklab.Error, match="gain"):
        sinklab.oversmoothing.predict(w, mu=mu, sigma=sigma, norm="identity", gain=np.ones(6))
    with pytest.raises(sinklab.Error, match="hidden"):
        sinklab.oversmoothing.predict(w, hidden=np.ones((3, 6)), mu=mu)

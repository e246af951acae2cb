"""The §9 pattern metrics on maps from anywhere: equal to the per-layer statistics of a native
run (`Model.stats`, what `sinklab real --json` prints), the definitions on hand-made maps, and
refusals of maps that are not attention probabilities."""

from __future__ import annotations

import numpy as np
import pytest

import sinklab
from conftest import FIXTURES

TOKS = [1, 5, 9, 13, 2, 7, 33, 60, 4, 11, 3, 17]

# The maps reach `metrics` as the float32 the forward produced, widened exactly to f64; the
# statistics read the same float32 maps. Both sum in f64 in the same order, so the values agree
# to f64 rounding of sums of ≤ T·H terms; 1e-9 absolute leaves room for a map that differs in
# its last f32 bit between the two passes (each entry ≤ 2⁻²⁴ relative, averaged).
TOL = 1e-6

FIELDS = ("alpha_first", "dominant_mass", "routed_frac", "min_a", "row_entropy", "value_norm_ratio")


def compare_layers(model, toks):
    c = model.config
    r = model.run(toks, hidden=True, attention=True, qkv=True)
    st = model.stats(toks)
    assert len(st["layers"]) == c["n_layer"]
    for layer, want in enumerate(st["layers"]):
        m = sinklab.patterns.metrics(r.attention[layer], values=r.values[layer])
        assert m.causal
        assert m.attn_to_first == pytest.approx(want["attn_to_first"], abs=TOL)
        assert m.sink_gu_eps03 == pytest.approx(want["sink_gu_eps03"], abs=TOL)
        assert m.sink_gu_eps08 == pytest.approx(want["sink_gu_eps08"], abs=TOL)
        assert len(m.heads) == len(want["heads"]) == c["n_head"]
        for h, (ours, theirs) in enumerate(zip(m.heads, want["heads"])):
            assert ours["dominant"] == theirs["dominant"], (layer, h)
            assert ours["class"] == theirs["class"], (layer, h)
            for k in FIELDS:
                if theirs[k] is None:
                    assert ours[k] is None, (layer, h, k)
                else:
                    assert ours[k] == pytest.approx(theirs[k], abs=TOL), (layer, h, k)
        # The per-head arrays are the records' columns; the layer's value their mean.
        np.testing.assert_allclose(m.alpha_first, [x["alpha_first"] for x in want["heads"]], atol=TOL)
        assert m.mean["to_first"] == pytest.approx(want["attn_to_first"], abs=TOL)


def test_metrics_of_a_native_run_equal_its_statistics():
    compare_layers(sinklab.load(str(FIXTURES / "tiny" / "llama_default")), TOKS)


def test_metrics_of_a_packaged_model_equal_its_statistics():
    if sinklab._native.cached("smollm2") is None:
        pytest.skip("model `smollm2` not in the cache (run `sinklab fetch smollm2`)")
    m = sinklab.load("smollm2")
    compare_layers(m, m.tokenize("The quick brown fox jumps over the lazy dog, and then it sleeps."))


def uniform_causal(t):
    return np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]


def test_definitions_on_hand_made_maps():
    t = 64
    sink = np.zeros((t, t))
    sink[:, 0] = 1.0
    maps = np.stack([sink, uniform_causal(t)])
    m = sinklab.patterns.metrics(maps)
    assert m.causal
    # A perfect sink: α₀ = 1, every query routed to key 0, row entropy 0.
    assert m.alpha_first[0] == 1.0 and m.dominant[0] == 0 and m.routed_frac[0] == 1.0
    assert m.row_entropy[0] == 0.0 and m.to_first[0] == 1.0
    # Uniform causal attention: α₀ = H_T / T (docs/theory.md §9's fixture 0.0741233 at T = 64),
    # α_k = (1/(T−k)) Σ_{i≥k} 1/(i+1), normalised row entropy 1, share of rows i ≥ 1 to key 0
    # = (H_T − 1)/(T − 1).
    harmonic = np.cumsum(1.0 / np.arange(1, t + 1))
    assert m.alpha_first[1] == pytest.approx(harmonic[-1] / t, rel=1e-14)
    assert m.alpha_first[1] == pytest.approx(0.0741233, abs=5e-8)
    want = [(harmonic[-1] - (harmonic[k - 1] if k else 0.0)) / (t - k) for k in range(t)]
    np.testing.assert_allclose(m.gu_alpha[1], want, rtol=1e-13)
    assert m.row_entropy[1] == pytest.approx(1.0, abs=1e-12)
    assert m.to_first[1] == pytest.approx((harmonic[-1] - 1) / (t - 1), rel=1e-13)
    # Layer values: the mean of the shares; one head of two has α₀ > 0.3 and > 0.8.
    assert m.attn_to_first == pytest.approx((1.0 + m.to_first[1]) / 2, rel=1e-14)
    assert m.sink_gu_eps03 == 0.5 and m.sink_gu_eps08 == 0.5
    # Column entropy: 0 for the sink; no values, no value-norm ratio.
    assert m.column_entropy[0] == 0.0 and 0 < m.column_entropy[1] < 1
    assert np.isnan(m.value_norm_ratio).all() and m.heads[0]["class"] is None


def test_values_give_the_value_norm_class():
    t = 8
    sink = np.zeros((1, t, t))
    sink[0, :, 0] = 1.0
    v = np.ones((1, t, 4), np.float32)
    v[0, 0] *= 0.1  # the sink's value is 10× smaller than the others: NOP-like
    m = sinklab.patterns.metrics(sink, values=v)
    assert m.value_norm_ratio[0] == pytest.approx(0.1, rel=1e-6)
    assert m.heads[0]["class"] == "NopLike"


def test_bidirectional_maps():
    t = 6
    full = np.full((2, t, t), 1.0 / t)
    m = sinklab.patterns.metrics(full)
    assert not m.causal
    # Every key visible: normalised row entropy 1 (with causal=True it would be refused).
    assert np.allclose(m.row_entropy, 1.0)
    with pytest.raises(sinklab.Error, match="causal=True"):
        sinklab.patterns.metrics(full, causal=True)


@pytest.mark.parametrize(
    "maps,match",
    [
        (np.full((4, 4), 0.25), r"maps: expected \[H, T, T\]"),
        (np.full((2, 3, 4), 0.25), "maps: expected square"),
        (np.ones((1, 3, 3)), r"maps: row \d+ of head 0 sums to 3"),
        (np.full((1, 3, 3), np.nan), "maps: non-finite"),
        (np.zeros((0, 3, 3)), "maps: empty"),
        (-np.eye(3)[None], "maps: entry"),
        (np.array([[["a"]]]), "maps: dtype"),
    ],
)
def test_bad_maps_raise_naming_the_argument(maps, match):
    with pytest.raises(sinklab.Error, match=match):
        sinklab.patterns.metrics(maps)


def test_bad_values_and_window_raise_naming_the_argument():
    maps = uniform_causal(5)[None]
    with pytest.raises(sinklab.Error, match="values"):
        sinklab.patterns.metrics(maps, values=np.ones((1, 4, 2)))
    with pytest.raises(sinklab.Error, match="values"):
        sinklab.patterns.metrics(maps, values=np.ones((5, 2)))
    with pytest.raises(sinklab.Error, match="window"):
        sinklab.patterns.metrics(maps, window=0)

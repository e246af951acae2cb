"""Native runs from Python: parity with transformers on the committed fixtures, the contract
of Model and Run, the command line's statistics, refusals and thread safety."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import sinklab
from conftest import FIXTURES, cli, read_safetensors

TINY = sorted(p.name for p in (FIXTURES / "tiny").iterdir() if (p / "expected.safetensors").exists())

# The tolerance of tests/real_arch_parity.rs: τ = (L+1)·K·N·u·A with K = 8 reductions a layer,
# N = 48 the longest dot product, u = 2^-24, A = 4 the amplification of the tiny random weights;
# relative to max(1, max|ref|) for states, absolute for probabilities.
U, N, K, A = 2.0**-24, 48.0, 8.0, 4.0


@pytest.mark.parametrize("name", TINY)
def test_tiny_hidden_and_attention_match_transformers(name):
    fx = read_safetensors(FIXTURES / "tiny" / name / "expected.safetensors")
    m = sinklab.load(str(FIXTURES / "tiny" / name))
    toks = [int(t) for t in fx["tokens"]]
    r = m.run(toks, hidden=True, attention=True)
    c = m.config
    L, T, d, H = c["n_layer"], len(toks), c["d_model"], c["n_head"]
    tau = (L + 1) * K * N * U * A
    assert r.hidden.shape == (L + 1, T, d) and r.hidden.dtype == np.float32
    assert r.attention.shape == (L, H, T, T) and r.attention.dtype == np.float32
    resid, attn = fx["resid"], fx["attn"]
    s = max(1.0, float(np.abs(resid).max()))
    assert np.abs(r.hidden[1:] - resid).max() <= tau * s
    assert np.abs(r.attention - attn).max() <= tau
    # The sinklab-owned buffers reach numpy without a copy: the array does not own its data.
    assert not r.hidden.flags.owndata and r.hidden.flags.c_contiguous


PACKAGED = [
    # (model, fixture, attention tolerance): tests/real_parity.rs's bars (1e-3; Qwen's
    # attention 2e-3, its summation-order spread over 24 layers).
    ("smollm2", "parity_smollm2.safetensors", 1e-3),
    ("gemma3-270m", "parity_gemma3-270m.safetensors", 1e-3),
    ("minilm", "parity_minilm.safetensors", 1e-3),
    ("qwen2.5-coder-0.5b", "parity_qwen2.5-coder-0.5b_0.safetensors", 2e-3),
]


@pytest.mark.parametrize("name,file,attn_tol", PACKAGED)
def test_packaged_models_match_transformers(name, file, attn_tol):
    path = sinklab._native.cached(name)
    if path is None:
        msg = f"model `{name}` not in the cache (run `sinklab fetch {name}`)"
        if os.environ.get("SINKLAB_REQUIRE_MODELS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    fx = read_safetensors(FIXTURES / file)
    m = sinklab.load(name)
    toks = [int(t) for t in fx["tokens"]]
    r = m.run(toks, hidden=True, attention=True)
    pos = [int(p) for p in fx["positions"]]
    sel = fx["hidden_sel"].astype(np.float64)
    ours = r.hidden[1:, pos, :].astype(np.float64)
    for layer in range(sel.shape[0]):
        rel = np.linalg.norm(ours[layer] - sel[layer]) / np.linalg.norm(sel[layer])
        assert rel <= 1e-3, f"{name}: layer {layer}: relative error {rel:.2e}"
    a0 = r.attention[:, :, 1:, 0].astype(np.float64).mean(axis=(1, 2))
    assert np.abs(a0 - fx["attn_to_first"]).max() <= attn_tol
    if r.nll is not None:
        assert abs(r.nll.mean() - float(fx["nll_mean"][0])) <= 1e-3


@pytest.fixture(scope="module")
def tiny():
    return sinklab.load(str(FIXTURES / "tiny" / "llama_default"))


TOKS = [1, 5, 9, 13, 2, 7, 33, 60, 4, 11]


def test_run_contract(tiny):
    c = tiny.config
    assert isinstance(c, dict) and c["n_layer"] == 2
    r = tiny.run(TOKS, hidden=True, attention=True, qkv=True, mlp=True)
    L, H, Hk, dh, d, T = c["n_layer"], c["n_head"], c["n_kv_head"], c["head_dim"], c["d_model"], len(TOKS)
    assert r.tokens == TOKS
    assert r.queries.shape == (L, H, T, dh) and r.keys.shape == (L, Hk, T, dh)
    assert r.values.shape == (L, Hk, T, dh) and r.mlp_out.shape == (L, T, d)
    assert r.nll.shape == (T - 1,) and np.all(r.nll > 0)
    # nll=False skips the LM head and leaves the other tensors as they were.
    r2 = tiny.run(TOKS, hidden=True, attention=True, nll=False)
    assert r2.nll is None
    assert np.array_equal(r2.hidden, r.hidden) and np.array_equal(r2.attention, r.attention)
    # The attention is softmax(scale · q kᵀ) under the causal mask, from the returned q and k.
    g = H // Hk
    s = c["attn_scale"]
    for layer in range(L):
        for h in range(H):
            z = s * r.queries[layer, h].astype(np.float64) @ r.keys[layer, h // g].astype(np.float64).T
            z[np.triu_indices(T, 1)] = -np.inf
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            assert np.abs(p - r.attention[layer, h]).max() < 1e-5
    # Only what was asked for.
    r2 = tiny.run(np.array(TOKS))
    assert r2.attention is None and r2.queries is None and r2.mlp_out is None
    np.testing.assert_array_equal(r2.hidden, r.hidden)


def test_stats_equal_the_command_line(tiny):
    ours = tiny.stats(TOKS)
    theirs = json.loads(
        cli("real", "--model", FIXTURES / "tiny" / "llama_default", "--tokens", ",".join(map(str, TOKS)), "--bos", "no", "--json")
    )
    assert ours["layers"] == theirs["layers"]
    assert ours["nll_mean"] == pytest.approx(theirs["nll_mean"], rel=1e-12)


def test_generate_extends_the_prompt_greedily(tiny):
    out = tiny.generate(TOKS, 4)
    assert out[: len(TOKS)] == TOKS and len(out) == len(TOKS) + 4
    # The first new token is the argmax of the next-token distribution: its loss is minimal.
    r = tiny.run(out[: len(TOKS) + 1])
    assert r.nll.shape == (len(TOKS),)


def test_refusals_raise_sinklab_error(tiny, tmp_path):
    assert issubclass(sinklab.Error, ValueError)
    with pytest.raises(sinklab.Error, match="outside the vocabulary"):
        tiny.run([1, 2, 10_000])
    with pytest.raises(sinklab.Error, match="empty"):
        tiny.run([])
    with pytest.raises(sinklab.Error, match="tokens"):
        tiny.run([[1, 2], [3, 4]])
    with pytest.raises(sinklab.Error, match="no tokenizer"):
        tiny.tokenize("hello")
    with pytest.raises(sinklab.Error, match="needs about"):
        tiny.run(TOKS, attention=True, max_mem="1K")
    with pytest.raises(sinklab.Error):
        sinklab.load(str(tmp_path / "nothing.gguf"))
    with pytest.raises(sinklab.Error, match="weights"):
        sinklab.load(str(FIXTURES / "tiny" / "llama_default"), weights="f16")


def test_two_threads_running_at_once_agree(tiny):
    toks = list(range(1, 40))
    ref = tiny.run(toks, hidden=True, attention=True)
    out = [None, None]

    def work(i):
        out[i] = tiny.run(toks, hidden=True, attention=True)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in out:
        np.testing.assert_array_equal(r.hidden, ref.hidden)
        np.testing.assert_array_equal(r.attention, ref.attention)


def test_a_dump_holds_the_run(tiny, tmp_path):
    from conftest import read_safetensors as rd

    f = tmp_path / "d.safetensors"
    cli("real", "--model", FIXTURES / "tiny" / "llama_default", "--tokens", ",".join(map(str, TOKS)),
        "--bos", "no", "--dump", f)
    x = rd(f)
    r = tiny.run(TOKS, hidden=True, attention=True, qkv=True, mlp=True)
    np.testing.assert_array_equal(x["embedding"], r.hidden[0])
    for layer in range(r.hidden.shape[0] - 1):
        np.testing.assert_array_equal(x[f"hidden.{layer}"], r.hidden[layer + 1])
        np.testing.assert_array_equal(x[f"attn.{layer}"], r.attention[layer])
        np.testing.assert_array_equal(x[f"queries.{layer}"], r.queries[layer])
        np.testing.assert_array_equal(x[f"keys.{layer}"], r.keys[layer])
        np.testing.assert_array_equal(x[f"mlp_out.{layer}"], r.mlp_out[layer])


def page_blob(path):
    """The JSON blob of a `sinklab view` page."""
    html = open(path, encoding="utf-8").read()
    tag = '<script type="application/json" id="sinklab-data">'
    i = html.index(tag) + len(tag)
    return json.loads(html[i : html.index("</script>", i)])


def test_view_writes_the_command_lines_page(tiny, tmp_path):
    model = FIXTURES / "tiny" / "llama_default"
    ours = tmp_path / "ours.html"
    w = tiny.view(TOKS, ours, heads=[(1, 0)], max_res=4)
    assert w["path"] == str(ours) and w["bytes"] == ours.stat().st_size
    assert w["t"] == len(TOKS) and w["res"] == 4 and w["exact"] == 1
    theirs = tmp_path / "theirs.html"
    cli("view", "--model", model, "--tokens", ",".join(map(str, TOKS)), "--bos", "no",
        "--heads", "1.0", "--max-res", "4", "--out", theirs)
    a, b = page_blob(ours), page_blob(theirs)
    a.pop("source"), b.pop("source")  # the model path as each was given
    assert a == b
    # The page's statistics are the run's.
    assert a["layers"] == tiny.stats(TOKS)["layers"]


def test_view_refuses_as_the_command_line(tiny, tmp_path):
    model = FIXTURES / "tiny" / "llama_default"
    with pytest.raises(sinklab.Error, match="input file"):
        tiny.view(TOKS, model / "config.json")
    with pytest.raises(sinklab.Error, match="needs about"):
        tiny.view(TOKS, tmp_path / "v.html", max_mem="1K")
    with pytest.raises(sinklab.Error, match="heads"):
        tiny.view(TOKS, tmp_path / "v.html", heads="7.0")
    with pytest.raises(sinklab.Error, match="heads"):
        tiny.view(TOKS, tmp_path / "v.html", heads=[1, 2])
    with pytest.raises(sinklab.Error, match="max_res"):
        tiny.view(TOKS, tmp_path / "v.html", max_res=0)
    with pytest.raises(sinklab.Error, match="outside the vocabulary"):
        tiny.view([1, 99_999], tmp_path / "v.html")
    assert not (tmp_path / "v.html").exists()
    # Nothing of the model was touched.
    assert (model / "config.json").stat().st_size > 0

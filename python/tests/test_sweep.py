"""`sinklab.sweep`: a tiny cost-scaling spec (seconds) run into a directory as `sinklab sweep`
runs it, from a dict, TOML text and a file; resumed; its records against the closed forms;
bad specs refused."""

from __future__ import annotations

import json
import math

import pytest

import sinklab
from conftest import cli

TINY = {
    "name": "py_tiny",
    "bootstrap": 20,
    "exact": [
        {
            "patterns": ["sink", "diagonal"],
            "norms": ["fro"],
            "embeddings": ["orthonormal"],
            "t": [4, 8],
            "d_factor": 1,
            "seeds": [0],
            "delta": 3.0,
            "tol": 1e-4,
        }
    ],
}

TINY_TOML = """
name = "py_tiny"
bootstrap = 20
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["orthonormal"]
t = [4, 8]
d_factor = 1
seeds = [0]
delta = 3.0
tol = 1e-4
"""


def fro_closed_form(t, delta=3.0):
    # src/cost/exact.rs: on orthonormal embeddings both patterns cost Δ √(T − H_T) in ‖·‖_F.
    return delta * math.sqrt(t - sum(1 / i for i in range(1, t + 1)))


def test_a_tiny_sweep_runs_resumes_and_matches_the_closed_forms(tmp_path):
    out = tmp_path / "s"
    r = sinklab.sweep(TINY, out, progress=False)
    assert r["name"] == "py_tiny" and r["total"] == 4 and r["computed"] == 4 and r["failed"] == 0
    recs = r["records"]
    assert len(recs) == 4
    # The returned records are the lines of results.jsonl (each field of a line, by id; the
    # records also spell out the optional fields a line leaves out, as None).
    lines = {
        x["id"]: x for x in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if x
    }
    assert sorted(lines) == sorted(x["id"] for x in recs)
    for rec in recs:
        assert {k: rec[k] for k in lines[rec["id"]]} == lines[rec["id"]]
    for rec in recs:
        exact = fro_closed_form(rec["t"])
        assert rec["feasible"] and rec["lower"] <= exact * (1 + 1e-9) <= rec["value"] * (1 + 2e-9)
    assert r["fits"] is not None and (out / "fit.json").exists()
    # A rerun computes nothing: every point is already there.
    again = sinklab.sweep(TINY, out, progress=False, analysis=False)
    assert again["computed"] == 0 and again["skipped"] == 4 and again["fits"] is None
    assert len(again["records"]) == 4


def test_toml_text_and_file_give_the_dicts_points(tmp_path):
    a = sinklab.sweep(TINY, tmp_path / "a", progress=False, analysis=False)
    b = sinklab.sweep(TINY_TOML, tmp_path / "b", progress=False, analysis=False)
    f = tmp_path / "tiny.toml"
    f.write_text(TINY_TOML)
    c = sinklab.sweep(f, tmp_path / "c", progress=False, analysis=False)
    ids = lambda r: sorted(x["id"] for x in r["records"])  # noqa: E731
    assert ids(a) == ids(b) == ids(c)
    # The same spec file through the command line: the same point ids and values.
    cli("sweep", f, "--out", tmp_path / "cli", "--no-analysis")
    theirs = [json.loads(x) for x in (tmp_path / "cli" / "results.jsonl").read_text().splitlines() if x]
    assert sorted(x["id"] for x in theirs) == ids(c)
    by_id = {x["id"]: x["value"] for x in theirs}
    for x in c["records"]:
        assert x["value"] == pytest.approx(by_id[x["id"]], rel=1e-12)


def test_bad_specs_raise_sinklab_error(tmp_path):
    with pytest.raises(sinklab.Error, match="unknown field"):
        sinklab.sweep({**TINY, "bogus": 1}, tmp_path / "x", progress=False)
    bad = {**TINY, "exact": [{**TINY["exact"][0], "delta": -1.0}]}
    with pytest.raises(sinklab.Error, match="delta"):
        sinklab.sweep(bad, tmp_path / "x", progress=False)
    with pytest.raises(sinklab.Error, match="no such file"):
        sinklab.sweep(str(tmp_path / "missing.toml"), tmp_path / "x")
    with pytest.raises(sinklab.Error, match="spec"):
        sinklab.sweep(42, tmp_path / "x")
    with pytest.raises(sinklab.Error, match="threads"):
        sinklab.sweep(TINY, tmp_path / "x", threads=0)

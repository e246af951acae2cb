"""The worked example (examples/python/walkthrough.py) runs top to bottom as a script."""

from __future__ import annotations

import importlib.util
import math

import pytest

from conftest import REPO


def test_the_walkthrough_runs(tmp_path):
    spec = importlib.util.spec_from_file_location("walkthrough", REPO / "examples/python/walkthrough.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = []
    try:
        import matplotlib  # noqa: F401

        args = ["--plot", str(tmp_path / "heat.png")]
    except ImportError:
        pass
    out = mod.main(args)
    if args:
        assert (tmp_path / "heat.png").stat().st_size > 0
    sink, diag = out["costs"]
    assert sink.lower <= 3.0 * 7 / math.sqrt(8) * (1 + 1e-9) <= sink.upper * (1 + 2e-9)
    assert out["verdict"].representable
    # The last layer's §9 metric agrees with the mean the example computes in numpy.
    assert out["metrics"].attn_to_first == pytest.approx(float(out["attn_to_first"][-1]), abs=1e-6)

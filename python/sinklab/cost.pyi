from typing import Optional
from . import ArrayLike, Cost as Cost

def minimal(
    x: ArrayLike,
    pattern: str,
    norm: str,
    delta: float,
    scope: str = "qk",
    *,
    on_rate: float = 0.25,
    seed: int = 0,
    tol: float = 1e-3,
    max_iter: int = 20000,
    max_mem: Optional[str] = None,
) -> Cost: ...

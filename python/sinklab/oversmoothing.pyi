from typing import Any, Optional
from . import ArrayLike

class Prediction:
    raw: dict[str, Any]
    identity: dict[str, float]
    uniform: dict[str, float]
    sign: dict[str, Any]
    cos_identity: float
    cos_uniform: float
    dense_smooths_more: Optional[bool]
    gap: float

def predict(
    w_vo: ArrayLike,
    *,
    mu: Optional[ArrayLike] = None,
    sigma: Optional[ArrayLike] = None,
    hidden: Optional[ArrayLike] = None,
    norm: str = "rms",
    gain: Optional[ArrayLike] = None,
) -> Prediction: ...

from typing import Any, Optional
import numpy as np
import numpy.typing as npt
from . import ArrayLike

ROW_SUM_TOL: float

class Metrics:
    raw: dict[str, Any]
    heads: list[dict[str, Any]]
    attn_to_first: float
    sink_gu_eps03: Optional[float]
    sink_gu_eps08: Optional[float]
    causal: bool
    alpha_first: npt.NDArray[np.float64]
    to_first: npt.NDArray[np.float64]
    dominant: npt.NDArray[np.int64]
    dominant_mass: npt.NDArray[np.float64]
    routed_frac: npt.NDArray[np.float64]
    min_a: npt.NDArray[np.float64]
    row_entropy: npt.NDArray[np.float64]
    column_entropy: npt.NDArray[np.float64]
    value_norm_ratio: npt.NDArray[np.float64]
    gu_alpha: npt.NDArray[np.float64]
    mean: dict[str, Optional[float]]

def metrics(
    maps: ArrayLike,
    *,
    values: Optional[ArrayLike] = None,
    causal: Optional[bool] = None,
    window: Optional[int] = None,
) -> Metrics: ...

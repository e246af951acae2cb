from typing import Any, Optional, Sequence
from . import ArrayLike

PAPER_BOS_CANDIDATES: tuple[int, ...]
PAPER_CHAT_BOS_CANDIDATES: tuple[int, ...]

class Detection:
    raw: dict[str, Any]
    records: list[dict[str, Any]]
    bos: int
    window: tuple[int, int]
    sinks: list[dict[str, Any]]
    validity: dict[str, Any]
    saturated: bool
    claims: dict[str, Any]
    variant: str

def detect(
    hidden: ArrayLike,
    *,
    tau: float = 0.9,
    bos_candidates: Optional[Sequence[int]] = None,
    window: bool = True,
    centered: bool = False,
    chat: bool = False,
    bos_margin: int = 15,
    noise_max: int = 4,
) -> Detection: ...

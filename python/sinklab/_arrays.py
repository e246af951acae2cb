"""Input arrays: anything numpy can read (numpy arrays of any layout, lists, torch tensors
through ``__array__``), refused with the argument named when the dtype, shape or values are
wrong, and returned C-contiguous in the dtype the native code takes (copied only when needed)."""

from __future__ import annotations

import numpy as np

from ._native import Error

_FLOATS = (np.float32, np.float64, np.float16)


def as_floats(name: str, x, ndim: int, dtype=np.float64, what: str = "") -> np.ndarray:
    """``x`` as a C-contiguous ``dtype`` array of ``ndim`` dimensions, finite and non-empty."""
    if x is None:
        raise Error(f"{name}: expected an array, got None")
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        # A torch tensor: off the autograd graph and the device first.
        x = x.detach().cpu()
    try:
        a = np.asarray(x)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the caller's input
        raise Error(f"{name}: cannot be read as an array ({e})") from None
    if a.dtype.kind != "f" or a.dtype.type not in _FLOATS:
        if a.dtype.kind in "iu" and a.size > 0:
            a = a.astype(dtype)
        else:
            raise Error(
                f"{name}: dtype {a.dtype} is not a floating-point type (give float32 or float64)"
            )
    if a.ndim != ndim:
        shape = what or f"a {ndim}-D array"
        raise Error(f"{name}: expected {shape}, got shape {tuple(a.shape)}")
    if a.size == 0:
        raise Error(f"{name}: empty array of shape {tuple(a.shape)}")
    a = np.ascontiguousarray(a, dtype=dtype)
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0]
        raise Error(f"{name}: non-finite value {a[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return a


def as_tokens(name: str, tokens) -> list:
    """Token ids as a list of non-negative ints."""
    if hasattr(tokens, "detach") and hasattr(tokens, "cpu"):
        tokens = tokens.detach().cpu()
    a = np.asarray(tokens)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1:
        raise Error(f"{name}: expected a 1-D sequence of token ids, got shape {tuple(a.shape)}")
    if a.size == 0:
        raise Error(f"{name}: empty token sequence")
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise Error(f"{name}: token ids must be integers, got dtype {a.dtype}")
    if (a < 0).any() or (a > 2**32 - 1).any():
        raise Error(f"{name}: token ids must lie in [0, 2^32)")
    return [int(v) for v in a]

"""NumPy array aliases of the session operator, and the one-element array of the scalar path."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "one"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def one(x: int) -> IntArray:
    """A one-element int64 array (the scalar path reuses the batch helpers)."""
    return np.array([x], dtype=np.int64)

"""NumPy array aliases shared by the package (one place, so annotations stay short)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "ObjArray", "one"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]
AnyArray = npt.NDArray[Any]


def one(x: int) -> IntArray:
    """A one-element int64 array (scalar paths reuse the batch helpers)."""
    return np.array([x], dtype=np.int64)

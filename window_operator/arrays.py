"""NumPy array aliases shared by the package (one place, so annotations stay short)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "ObjArray", "distinct", "one"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]
AnyArray = npt.NDArray[Any]


def one(x: int) -> IntArray:
    """A one-element int64 array (scalar paths reuse the batch helpers)."""
    return np.array([x], dtype=np.int64)


def distinct(values: IntArray) -> list[int]:
    """The distinct values in ascending order (``np.unique``).

    A batch usually holds one input partition: then one comparison pass answers, where
    ``np.unique`` hashes every value.
    """
    if len(values) and bool((values == values[0]).all()):
        return [int(values[0])]
    return list(np.unique(values).tolist())

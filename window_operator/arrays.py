"""NumPy array aliases shared by the package (one place, so annotations stay short)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "ObjArray", "distinct", "one", "present_ids"]

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


def present_ids(parts: list[IntArray], n: int) -> IntArray:
    """The distinct ids in ``parts`` (all in ``0 .. n-1``), ascending: ``np.unique`` of
    their concatenation, by one pass over a mask of ``n`` instead of a sort."""
    held = np.zeros(n, dtype=np.bool_)
    for part in parts:
        held[part] = True
    return np.flatnonzero(held).astype(np.int64, copy=False)

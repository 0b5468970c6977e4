"""Shared vocabulary of the join package: sources, join keys and message positions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stores.keys import FieldValue
from window_operator.arrays import ObjArray
from window_operator.errors import UnknownSourceError

__all__ = [
    "EMPTY",
    "LEFT",
    "MAX_OFFSET",
    "MAX_PARTITION",
    "POSITION_BITS",
    "RIGHT",
    "JoinKey",
    "UnknownSourceError",
    "message_position",
    "obj_array",
]

#: Source indexes of the two inputs.
LEFT = 0
RIGHT = 1

JoinKey = FieldValue | tuple[FieldValue, ...]
"""A join key: the value of the single ``on`` field, else the tuple of the values."""

#: Bits of a message position taken by the offset; the partition is above them.
POSITION_BITS = 48
MAX_OFFSET = (1 << POSITION_BITS) - 1
MAX_PARTITION = (1 << (63 - POSITION_BITS)) - 1

EMPTY = np.zeros(0, dtype=np.int64)


def message_position(partition: int, offset: int) -> int:
    """The position of a message in its input: ``partition * 2**48 + offset``."""
    if not 0 <= partition <= MAX_PARTITION or not 0 <= offset <= MAX_OFFSET:
        raise ValueError(
            f"partition {partition} / offset {offset} out of range: partitions must be in "
            f"[0, {MAX_PARTITION}] and offsets in [0, {MAX_OFFSET}]"
        )
    return (partition << POSITION_BITS) | offset


def obj_array(values: Sequence[Any]) -> ObjArray:
    """``values`` as a one-dimensional object array (never split into sub-arrays)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr

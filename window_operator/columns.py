"""Hand-made columns checked as the decoders would judge their values: keys, times,
positions and integer columns, each a clear :class:`InvalidArgumentError` (a
``ValueError``) raised before an operator changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from window_operator.arrays import IntArray
from window_operator.errors import InvalidArgumentError
from window_operator.eventtime import MAX_ABS_TS
from window_operator.rejections import show

__all__ = [
    "MAX_KEY_BYTES",
    "check_column_lengths",
    "check_column_values",
    "check_keys",
    "int_column",
    "position_columns",
    "time_column",
]

#: Keys longer than this (UTF-8 bytes) are rejected: they would bloat every store key.
MAX_KEY_BYTES = 4096


def position_columns(
    n: int,
    partition: int | Sequence[int] | IntArray,
    offset: Sequence[int] | IntArray | None,
    wall_ms: Sequence[int] | IntArray | None,
    names: tuple[str, str] = ("partition", "offset"),
) -> tuple[IntArray, IntArray, IntArray | None]:
    """The partition, offset and arrival columns of ``n`` rows as int64 arrays.

    A single partition (a Python or NumPy integer) is every row's; offsets not given are
    ``-1`` ("the next offset of the partition"); ``wall_ms`` stays ``None`` when not
    given. ``names``: the caller's names of the partition and offset columns, for its
    messages.
    """
    if isinstance(partition, int | np.integer):
        part = np.full(n, partition, dtype=np.int64)
    else:
        part = int_column(names[0], partition)
    off = np.full(n, -1, dtype=np.int64) if offset is None else int_column(names[1], offset)
    wall = None if wall_ms is None else int_column("wall_ms", wall_ms)
    return part, off, wall


def int_column(name: str, values: Sequence[int] | IntArray) -> IntArray:
    """``values`` as an int64 column, or :class:`InvalidArgumentError` where one is not
    an integer of 64 bits (before, ``1.5`` was taken as 1, and ``None`` or ``2**63``
    raised a bare ``TypeError`` or ``OverflowError`` after the operator had changed)."""
    arr = np.asarray(values)
    if arr.dtype == np.int64:
        return arr
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind == "i" or (arr.dtype.kind == "u" and int(arr.max()) < 2**63):
        return arr.astype(np.int64)
    raise InvalidArgumentError(f"{name} must hold integers of 64 bits, got {arr.dtype} values")


def time_column(values: Sequence[int] | Sequence[float] | IntArray) -> IntArray:
    """Event times in ms as an int64 column: whole numbers as they are, other numbers
    floored, as the decoders floor a time field's value (before, ``-1.5`` was taken as
    -1, and ``NaN`` as -2^63, refused as a time "out of range"); a value that is not a
    finite number, or beyond +-2^61 ms, is :class:`InvalidArgumentError`."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f":
        return int_column("ts", arr)
    bad = ~(np.abs(arr) < MAX_ABS_TS)  # NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgumentError(
            f"ts[{i}] = {float(arr[i])!r} is not an event time (finite ms within +-2^61)"
        )
    floored: IntArray = np.floor(arr).astype(np.int64)
    return floored


def check_keys(keys: list[Any]) -> None:
    """Raise :class:`InvalidArgumentError` for a key the decoders would reject (before,
    ``None``, bytes or a number failed the operator with a ``KeyEncodingError``, and a
    5000-byte key was taken): keys are text, valid Unicode, of at most
    :data:`MAX_KEY_BYTES` UTF-8 bytes."""
    if not all(isinstance(k, str) for k in keys):
        i = next(i for i, k in enumerate(keys) if not isinstance(k, str))
        raise InvalidArgumentError(f"keys[{i}] = {show(keys[i])}: keys are text (str)")
    try:
        "".join(keys).encode()
    except UnicodeEncodeError:
        i = next(i for i, k in enumerate(keys) if _utf8(k) is None)
        raise InvalidArgumentError(f"keys[{i}] is not valid Unicode (a lone surrogate)") from None
    if max(map(len, keys), default=0) * 4 > MAX_KEY_BYTES:  # a character is at most 4 bytes
        for i, k in enumerate(keys):
            if len(k.encode()) > MAX_KEY_BYTES:
                raise InvalidArgumentError(
                    f"keys[{i}] is {len(k.encode())} bytes; the limit is {MAX_KEY_BYTES}"
                )


def _utf8(text: str) -> bytes | None:
    """``text`` in UTF-8, ``None`` where it holds a lone surrogate."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return None


def check_column_lengths(n: int, lengths: Iterable[tuple[str, int]]) -> None:
    """Raise :class:`InvalidArgumentError` (a ``ValueError``) for the first named column
    whose length is not ``n`` (the keys')."""
    for name, length in lengths:
        if length != n:
            raise InvalidArgumentError(f"column {name} has {length} rows, keys have {n}")


def check_column_values(ts: IntArray, part: IntArray, off: IntArray) -> None:
    """Raise :class:`InvalidArgumentError` for a row the job would never decode: a time
    outside +-2^61 ms (a decoder's ``BAD_TIMESTAMP``; taken, it moved the watermark to
    where every later event was out of retention), a negative partition, or an offset
    below -1 (which made the row a replay)."""
    if len(ts) and (int(ts.min()) <= -MAX_ABS_TS or int(ts.max()) >= MAX_ABS_TS):
        i = int(np.flatnonzero((ts <= -MAX_ABS_TS) | (ts >= MAX_ABS_TS))[0])
        raise InvalidArgumentError(
            f"ts[{i}] = {int(ts[i])} is out of range (event times are within +-2^61 ms)"
        )
    if len(part) and int(part.min()) < 0:
        i = int(np.flatnonzero(part < 0)[0])
        raise InvalidArgumentError(f"partition[{i}] = {int(part[i])}: partitions are >= 0")
    if len(off) and int(off.min()) < -1:
        i = int(np.flatnonzero(off < -1)[0])
        raise InvalidArgumentError(
            f"offset[{i}] = {int(off[i])}: offsets are >= 0 (or -1: the next one)"
        )

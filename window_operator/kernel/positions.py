"""Input positions: the last applied offset of every input partition of every source.

An operator reads one or two inputs (sources ``0`` and ``1``), each with partitions; a
record is identified by ``(source, partition, offset)``. A record at or below the last
applied offset of its ``(source, partition)``, or at or below an earlier record of the
same batch, is a replay and a no-op. Library users may leave offsets out (``-1``): they
get the next offsets of their partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, TypeGuard

import numpy as np

from window_operator.arrays import BoolArray, IntArray, distinct
from window_operator.errors import InvalidArgumentError

__all__ = [
    "MAX_OFFSET",
    "MAX_PARTITION",
    "MAX_WALL",
    "InputPosition",
    "Positions",
    "check_record_position",
    "check_source",
    "check_time",
    "input_position",
]


#: The largest partition and offset a Kafka record can have (its partition ids are 32-bit,
#: its offsets 64-bit: one short, so that the next offset is one too); a position beyond
#: them has no 64-bit form in the checkpoint or the columns.
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 2
#: Wall clocks (``wall_ms``, ``timeout``) are within +-2^62 ms (``END_OF_TIME``).
MAX_WALL = 2**62


def _whole(value: object) -> TypeGuard[int | np.integer[Any]]:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def check_record_position(
    partition: object, offset: object, wall_ms: object = None, *, next_offset: bool = True
) -> tuple[int, int | None, int | None]:
    """``partition``, ``offset`` and ``wall_ms`` as Python ints (NumPy ones converted:
    the checkpoint's JSON takes no other), or :class:`InvalidArgumentError` unless
    ``partition`` is an integer >= 0, ``offset`` an integer >= 0 or, with
    ``next_offset``, ``None`` (the next one), and ``wall_ms`` ``None`` or an integer.
    Before, ``partition="0"`` was taken and failed the next flush, and a negative
    offset made the record a replay, silently."""
    p, o, w = partition, offset, wall_ms
    if (
        type(p) is int
        and 0 <= p <= MAX_PARTITION
        and (type(o) is int and 0 <= o <= MAX_OFFSET or (o is None and next_offset))
        and (w is None or type(w) is int and -MAX_WALL <= w <= MAX_WALL)
    ):
        return p, o, w  # the usual case, first: a record of the library's add_message
    if not _whole(p) or p < 0:
        raise InvalidArgumentError(f"partition must be an integer >= 0, got {p!r}")
    if p > MAX_PARTITION:
        raise InvalidArgumentError(f"partition must be at most 2^31 - 1 (Kafka's), got {p!r}")
    if o is None and not next_offset:
        raise InvalidArgumentError("offset must be an integer >= 0, got None")
    if o is not None and (not _whole(o) or o < 0):
        raise InvalidArgumentError(f"offset must be None or an integer >= 0, got {o!r}")
    if o is not None and o > MAX_OFFSET:
        raise InvalidArgumentError(f"offset must be at most 2^63 - 2 (Kafka's), got {o!r}")
    if w is not None and not _whole(w):
        raise InvalidArgumentError(f"wall_ms must be None or an integer (ms), got {w!r}")
    if w is not None and not -MAX_WALL <= w <= MAX_WALL:
        raise InvalidArgumentError(f"wall_ms must be within +-2^62 ms, got {w!r}")
    return int(p), None if o is None else int(o), None if w is None else int(w)


def check_time(now_ms: object) -> int:
    """A wall clock given to ``timeout`` as a Python int (epoch ms), or
    :class:`InvalidArgumentError` (before, ``"soon"`` failed the operator)."""
    if type(now_ms) is int and -MAX_WALL <= now_ms <= MAX_WALL:
        return now_ms
    if not _whole(now_ms):
        raise InvalidArgumentError(f"now_ms must be an integer (epoch ms), got {now_ms!r}")
    # beyond +-2^62 (END_OF_TIME) a clock is at the end (or the start) of time: before,
    # -2^64 was taken and failed the next flush (no 64-bit form in the checkpoint)
    return max(-MAX_WALL, min(int(now_ms), MAX_WALL))


def check_source(source: object, sources: int) -> int:
    """``source`` as an int, or :class:`InvalidArgumentError` unless it is one of the
    operator's ``sources`` input indexes (0, or 0 and 1 for a join)."""
    if not _whole(source) or not 0 <= source < sources:
        within = "0" if sources == 1 else f"0 to {sources - 1}"
        raise InvalidArgumentError(f"source must be {within}, got {source!r}")
    return int(source)


class InputPosition(NamedTuple):
    """An input partition: which source (0, or 0 / 1 for a join) and which partition."""

    source: int
    partition: int


_INTERNED: dict[tuple[int, int], InputPosition] = {}


def input_position(source: int, partition: int) -> InputPosition:
    """The :class:`InputPosition` of a partition, one shared object per partition: the
    per-record paths look positions up several times a record, and building a named
    tuple costs four times a plain tuple and a dict lookup."""
    pos = _INTERNED.get((source, partition))
    if pos is None:  # Python ints only: the checkpoint's JSON takes no NumPy ones
        pos = _INTERNED[(source, partition)] = InputPosition(int(source), int(partition))
    return pos


class Positions:
    """Last applied offset per :class:`InputPosition` (checkpointed with the state)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[InputPosition, int] = {}

    def get(self, source: int, partition: int) -> int:
        """The last applied offset of a partition (``-1``: none yet)."""
        return self.last.get(input_position(source, partition), -1)

    def assign(self, source: int, part: IntArray, off: IntArray) -> IntArray:
        """``off`` with every ``-1`` replaced by the next offset of its partition, in order."""
        auto = off < 0
        if not auto.any():
            return off
        off = off.copy()
        for p in distinct(part[auto]):
            in_p = part == p
            nxt = self.get(source, p) + 1
            if (auto | ~in_p).all():
                # the usual case: no explicit offsets in this partition
                idx = np.flatnonzero(in_p)
                off[idx] = nxt + np.arange(len(idx))
                continue
            for i in np.flatnonzero(in_p).tolist():
                if off[i] < 0:
                    off[i] = nxt
                nxt = max(nxt, int(off[i]) + 1)
        return off

    def fresh(self, source: int, part: IntArray, off: IntArray) -> BoolArray:
        """Rows whose offset is above everything applied before them (the rest are replays)."""
        fresh = np.empty(len(off), dtype=np.bool_)
        for p in distinct(part):
            m = part == p
            o = off[m]
            prev = np.maximum.accumulate(np.concatenate(([self.get(source, p)], o[:-1])))
            fresh[m] = o > prev
        return fresh

    def mark(self, source: int, partition: int, offset: int) -> bool:
        """Record ``offset`` as handled; whether the position moved."""
        return self.mark_at(input_position(source, partition), offset)

    def mark_at(self, pos: InputPosition, offset: int) -> bool:
        """:meth:`mark` for a position at hand."""
        if offset > self.last.get(pos, -1):
            self.last[pos] = int(offset)
            return True
        return False

    def advance(self, source: int, part: IntArray, off: IntArray) -> None:
        """Record the largest offset of every partition in ``part`` as handled."""
        if not len(part):
            return
        for p in distinct(part):
            self.mark(source, p, int(off[part == p].max()))

    def items(self) -> Iterable[tuple[InputPosition, int]]:
        """``(position, last offset)`` pairs in position order."""
        return sorted(self.last.items())

    def as_dict(self) -> dict[InputPosition, int]:
        """A copy, in position order."""
        return dict(self.items())

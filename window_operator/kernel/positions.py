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

__all__ = ["InputPosition", "Positions", "check_record_position", "input_position"]


def _whole(value: object) -> TypeGuard[int | np.integer[Any]]:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def check_record_position(partition: object, offset: object, wall_ms: object = None) -> None:
    """Raise :class:`InvalidArgumentError` unless ``partition`` is an integer >= 0,
    ``offset`` ``None`` (the next one) or an integer >= 0, and ``wall_ms`` ``None`` or an
    integer: before, ``partition="0"`` was taken and failed the next flush, and a
    negative offset made the record a replay, silently."""
    if not _whole(partition) or partition < 0:
        raise InvalidArgumentError(f"partition must be an integer >= 0, got {partition!r}")
    if offset is not None and (not _whole(offset) or offset < 0):
        raise InvalidArgumentError(f"offset must be None or an integer >= 0, got {offset!r}")
    if wall_ms is not None and not _whole(wall_ms):
        raise InvalidArgumentError(f"wall_ms must be None or an integer (ms), got {wall_ms!r}")


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
    if pos is None:
        pos = _INTERNED[(source, partition)] = InputPosition(source, partition)
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
            self.last[pos] = offset
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

"""What a join operator hands out: results (row and columnar, with their JSON form), and
the stored messages and window metadata it can be asked for.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from stores.keys import FieldValue
from window_operator.arrays import IntArray
from window_operator.join.common import POSITION_BITS, message_position

#: The longest Kafka key of a join result (two partitions and offsets in JSON), rounded up.
MAX_PAIR_KEY_BYTES = 128
_OFFSET_MASK = (1 << POSITION_BITS) - 1

__all__ = [
    "MAX_PAIR_KEY_BYTES",
    "JoinKind",
    "JoinMessage",
    "JoinResult",
    "JoinResultBatch",
    "JoinWindow",
    "pair_key",
]


class JoinKind(enum.StrEnum):
    """What a join result says."""

    #: A left and a right message satisfy the condition.
    MATCH = "MATCH"
    #: A left row (left/full joins) that no right row can match any more.
    LEFT_UNMATCHED = "LEFT_UNMATCHED"
    #: A right row (full joins) that no left row can match any more.
    RIGHT_UNMATCHED = "RIGHT_UNMATCHED"
    #: Withdraws an earlier unmatched record (repeated exactly) that a late row matched.
    RETRACT = "RETRACT"


_LINE_FORMATS = {
    (True, True): b'{"kind":"%b","key":%b,"left":%b,"right":%b,"left_ts":%d,"right_ts":%d}',
    (True, False): b'{"kind":"%b","key":%b,"left":%b,"right":null,"left_ts":%d,"right_ts":null}',
    (False, True): b'{"kind":"%b","key":%b,"left":null,"right":%b,"left_ts":null,"right_ts":%d}',
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    """One join result (see the package docstring for the meaning of each kind)."""

    kind: JoinKind
    key: dict[str, Any]
    left: dict[str, Any] | None
    right: dict[str, Any] | None
    left_ts: int | None
    right_ts: int | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written by ``simulate``."""
        return {
            "kind": self.kind.value,
            "key": self.key,
            "left": self.left,
            "right": self.right,
            "left_ts": self.left_ts,
            "right_ts": self.right_ts,
        }


@dataclass(slots=True)
class JoinResultBatch:
    """Join results of one kind in columnar form (the hot-path output).

    ``keys`` hold the JSON of the join key object, ``left``/``right`` the JSON of the
    records; a side is ``None`` for the whole batch when its records are null
    (unmatched rows and their retractions).
    """

    kind: JoinKind
    keys: list[bytes]
    left: list[bytes] | None
    right: list[bytes] | None
    left_ts: IntArray | None
    right_ts: IntArray | None
    #: positions (``partition * 2**48 + offset``) of the left / right messages: with both,
    #: a pair's identity (what the output topic is keyed by)
    left_pos: IntArray | None = None
    right_pos: IntArray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def to_records(self) -> list[tuple[bytes | None, bytes | None]]:
        """The results' records in the output topic: keyed by the pair's positions
        (:func:`pair_key`), the value a result's JSON; a RETRACT is a tombstone."""
        n = len(self)
        left, right = _positions(self.left_pos, n), _positions(self.right_pos, n)
        keys = [pair_key(lp, rp) for lp, rp in zip(left, right, strict=True)]
        if self.kind is JoinKind.RETRACT:
            return [(k, None) for k in keys]
        values = self.to_json_lines().split(b"\n")[:n]
        return list(zip(keys, values, strict=True))

    def to_json_lines(self) -> bytes:
        """One JSON object per result, each followed by a newline (byte-stable)."""
        fmt = _LINE_FORMATS[(self.left is not None, self.right is not None)]
        kind = self.kind.value.encode()
        if self.left is not None and self.right is not None:
            assert self.left_ts is not None and self.right_ts is not None
            rows: Iterable[tuple[Any, ...]] = zip(
                self.keys,
                self.left,
                self.right,
                self.left_ts.tolist(),
                self.right_ts.tolist(),
                strict=True,
            )
            lines = [fmt % (kind, k, lr, rr, lt, rt) for k, lr, rr, lt, rt in rows]
        elif self.left is not None:
            assert self.left_ts is not None
            lines = [
                fmt % (kind, k, r, t)
                for k, r, t in zip(self.keys, self.left, self.left_ts.tolist(), strict=True)
            ]
        else:
            assert self.right is not None and self.right_ts is not None
            lines = [
                fmt % (kind, k, r, t)
                for k, r, t in zip(self.keys, self.right, self.right_ts.tolist(), strict=True)
            ]
        lines.append(b"")
        return b"\n".join(lines)

    def to_results(self) -> list[JoinResult]:
        """Materialize one :class:`JoinResult` per row."""
        loads = orjson.loads
        n = len(self.keys)
        lefts = [None] * n if self.left is None else [loads(x) for x in self.left]
        rights = [None] * n if self.right is None else [loads(x) for x in self.right]
        lts = [None] * n if self.left_ts is None else self.left_ts.tolist()
        rts = [None] * n if self.right_ts is None else self.right_ts.tolist()
        return [
            JoinResult(self.kind, loads(self.keys[i]), lefts[i], rights[i], lts[i], rts[i])
            for i in range(n)
        ]


@dataclass(frozen=True, slots=True)
class JoinMessage:
    """A stored message, as returned by :meth:`JoinOperator.get_messages`."""

    source: str
    key: tuple[FieldValue, ...]
    ts: int
    partition: int
    offset: int
    record: dict[str, Any]

    @property
    def position(self) -> int:
        """``partition * 2**48 + offset``."""
        return message_position(self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class JoinWindow:
    """Window metadata of one input over one event-time frame ``[start, end)``.

    ``key`` is the join key the window was asked for (``None``: all keys). Positions are
    ``partition * 2**48 + offset`` (:func:`message_position`).
    """

    source: str
    key: tuple[FieldValue, ...] | None
    start: int
    end: int
    count: int
    min_ts: int
    max_ts: int
    first_position: int
    last_position: int


def _positions(pos: IntArray | None, n: int) -> list[tuple[int, int] | None]:
    if pos is None:
        return [None] * n
    return [(p >> POSITION_BITS, p & _OFFSET_MASK) for p in pos.tolist()]


def pair_key(left: tuple[int, int] | None, right: tuple[int, int] | None) -> bytes:
    """The Kafka key of a join result: the (partition, offset) of each message it pairs."""
    return orjson.dumps(
        {
            "left": None if left is None else list(left),
            "right": None if right is None else list(right),
        }
    )

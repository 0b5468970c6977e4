"""The stored state of count windows: keyspaces and value codecs.

A key's open frames live in a ring of ``k = size // step`` slots (frame ``f`` in slot
``f % k``), so a frame is dropped by overwriting its slot and state stays bounded
without deletes. Key-first, in the Window Meta and Message stores::

    R + str(key) + i64(slot)          ->  frame record of ring slot ``frame % k``
    str(key) + i64(n % (k * step))    ->  message n: (n, partition, offset, values)

A frame record is ``version, frame, count, seq, flags, float64 row``, then one
length-prefixed payload per object operation that is not full-state. ``count`` is the
key's message count when the record was written (the largest one is the key's count),
``seq`` the next ``update_seq`` of the window starting at that frame, and ``flags``
remember which frames changed since the last EARLY and end-of-input emissions. Messages
are kept for full-state operations only (their values come back on restore).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from stores.errors import StateCorruptError
from stores.keyspace import KeySlotKeyspace
from stores.rocks import ColumnFamily
from window_operator.aggregations.base import ObjectOp
from window_operator.aggset import AggregationSet, load_object
from window_operator.arrays import BoolArray, FloatArray, IntArray

__all__ = [
    "MESSAGES",
    "RING",
    "FrameCodec",
    "FrameRecord",
    "MessageCodec",
    "StoredMessage",
]

RING = KeySlotKeyspace("count-window frame", ColumnFamily.WINDOW_META, b"R")
MESSAGES = KeySlotKeyspace("count-window message", ColumnFamily.MESSAGES)

_RECORD_VERSION = 1
_FLAG_EARLY = 1
_FLAG_UNFINAL = 2
_LEN = struct.Struct(">I")
_MSG_HEAD = struct.Struct(">qqq")


@dataclass(frozen=True, slots=True)
class FrameRecord:
    """A decoded frame record (its object payloads go into the caller's list)."""

    frame: int
    count: int
    seq: int
    #: changed since the last EARLY results
    early: bool
    #: changed since the end-of-input emission
    unfinal: bool
    acc: FloatArray


class FrameCodec:
    """Frame records of one job's aggregations (see module doc)."""

    def __init__(self, aggs: AggregationSet) -> None:
        self.aggs = aggs
        self.dtype = np.dtype(
            [
                ("v", "u1"),
                ("frame", ">i8"),
                ("count", ">i8"),
                ("seq", ">i8"),
                ("flags", "u1"),
                ("acc", "<f8", (aggs.width,)),
            ]
        )
        #: object operations whose accumulator is stored in the record
        self.stored_objects: list[tuple[int, ObjectOp]] = [
            (j, op) for j, (_, op) in enumerate(aggs.objects) if not op.full_state
        ]

    def encode_heads(
        self,
        frames: IntArray,
        counts: IntArray,
        seqs: IntArray,
        early: BoolArray,
        unfinal: BoolArray,
        acc: FloatArray,
    ) -> list[bytes]:
        """The fixed-size part of many records, one NumPy pass."""
        rec = np.zeros(len(frames), dtype=self.dtype)
        rec["v"] = _RECORD_VERSION
        rec["frame"] = frames
        rec["count"] = counts
        rec["seq"] = seqs
        rec["flags"] = early.astype(np.uint8) * _FLAG_EARLY + unfinal.astype(np.uint8) * (
            _FLAG_UNFINAL
        )
        rec["acc"] = acc
        width = self.dtype.itemsize
        data = rec.tobytes()
        return [data[i : i + width] for i in range(0, len(data), width)]

    def with_objects(self, head: bytes, objs: list[Any]) -> bytes:
        """A whole record: its head followed by the object payloads."""
        parts = [head]
        for j, op in self.stored_objects:
            payload = op.dumps(objs[j])
            parts.append(_LEN.pack(len(payload)))
            parts.append(payload)
        return b"".join(parts)

    def _head(self, data: bytes) -> Any:
        if len(data) < self.dtype.itemsize or data[0] != _RECORD_VERSION:
            raise StateCorruptError(
                f"not a count-window frame record (version {data[:1]!r}, {len(data)} bytes)"
            )
        return np.frombuffer(data, dtype=self.dtype, count=1)[0]

    def count_of(self, data: bytes) -> int:
        """The key's message count a record carries."""
        return int(self._head(data)["count"])

    def decode(self, data: bytes, objs: list[Any] | None) -> FrameRecord:
        """A record's fields; its object payloads into ``objs``."""
        head = self._head(data)
        flags = int(head["flags"])
        if objs is not None:
            pos = self.dtype.itemsize
            try:
                for j, op in self.stored_objects:
                    (length,) = _LEN.unpack_from(data, pos)
                    pos += _LEN.size
                    objs[j] = load_object(op, data[pos : pos + length])
                    pos += length
            except (ValueError, struct.error) as exc:
                raise StateCorruptError(f"count-window frame record: {exc}") from exc
        return FrameRecord(
            frame=int(head["frame"]),
            count=int(head["count"]),
            seq=int(head["seq"]),
            early=bool(flags & _FLAG_EARLY),
            unfinal=bool(flags & _FLAG_UNFINAL),
            acc=head["acc"],
        )


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message of a full-state operation: its index, position and values."""

    n: int
    partition: int
    offset: int
    values: list[Any]


class MessageCodec:
    """Message values: numbers as raw float64 (infinities survive), anything else JSON."""

    @staticmethod
    def encode(n: int, partition: int, offset: int, values: Sequence[Any]) -> bytes:
        """The stored bytes of one message."""
        head = _MSG_HEAD.pack(n, partition, offset)
        if all(v is None or type(v) is float for v in values):
            row = np.array([np.nan if v is None else v for v in values], dtype="<f8")
            return head + b"d" + row.tobytes()
        return head + b"j" + orjson.dumps(list(values))

    @staticmethod
    def decode(data: bytes) -> StoredMessage:
        """Inverse of :meth:`encode` (NaN, the columnar null, back to None)."""
        try:
            n, part, off = _MSG_HEAD.unpack_from(data)
            body = data[_MSG_HEAD.size :]
            if body[:1] == b"d":
                row = np.frombuffer(body, dtype="<f8", offset=1).tolist()
                values: list[Any] = [None if v != v else v for v in row]
            elif body[:1] == b"j":
                values = orjson.loads(body[1:])
            else:
                raise ValueError(f"unknown value tag {body[:1]!r}")
        except (ValueError, struct.error) as exc:
            raise StateCorruptError(f"count-window message record: {exc}") from exc
        return StoredMessage(n, part, off, values)

"""The stored state of time windows: keyspaces and the frame record codec.

Window Meta Store (time-first, so retention expiry is one range delete)::

    F + i64(frame_start) + str(key)   ->  frame record (accumulators)
    W + i64(window_start) + str(key)  ->  window bookkeeping (next update_seq, LATE pending)

Message Store (key-first, full-state operations only)::

    str(key) + i64(ts) + i64(partition) + i64(offset)  ->  JSON list of the values

A frame record is a version byte (its high bit: the frame changed since the last EARLY
results, so a restarted task still emits them), the float64 accumulator row, then one
length-prefixed payload per object operation that is not full-state.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from stores.errors import StateCorruptError
from stores.keyspace import KeyTimeKeyspace, TimeFirstKeyspace
from stores.rocks import ColumnFamily
from window_operator.aggset import AggregationSet, load_object
from window_operator.arrays import BoolArray, FloatArray, IntArray

__all__ = [
    "FRAMES",
    "MESSAGES",
    "WINDOWS",
    "FrameCodec",
    "WindowRecord",
]

FRAMES = TimeFirstKeyspace("frame", ColumnFamily.WINDOW_META, b"F")
WINDOWS = TimeFirstKeyspace("window bookkeeping", ColumnFamily.WINDOW_META, b"W")
MESSAGES = KeyTimeKeyspace("message", ColumnFamily.MESSAGES)

_RECORD_VERSION = 1
_EARLY_DIRTY = 0x80
_LEN = struct.Struct(">I")
_WMETA = struct.Struct(">qB")
_WMETA_DTYPE = np.dtype([("seq", ">i8"), ("pending", "u1")])


class WindowRecord:
    """The value codec of window bookkeeping: ``(next update_seq, LATE pending)``."""

    @staticmethod
    def encode(next_seq: int, pending: bool) -> bytes:
        """The stored bytes."""
        return _WMETA.pack(next_seq, int(pending))

    @staticmethod
    def decode(data: bytes) -> tuple[int, bool]:
        """``(next_seq, pending)`` of stored bytes."""
        try:
            seq, pending = _WMETA.unpack(data)
        except struct.error as exc:
            raise StateCorruptError(f"window bookkeeping record of {len(data)} bytes") from exc
        return int(seq), bool(pending)

    @staticmethod
    def encode_many(next_seq: IntArray, pending: BoolArray) -> list[bytes]:
        """The stored bytes of many records."""
        rows = np.empty(len(next_seq), dtype=_WMETA_DTYPE)
        rows["seq"], rows["pending"] = next_seq, pending
        raw = rows.tobytes()
        size = _WMETA.size
        return [raw[i : i + size] for i in range(0, len(raw), size)]

    @staticmethod
    def decode_many(values: Sequence[bytes]) -> tuple[IntArray, BoolArray]:
        """``next_seq`` and ``pending`` arrays of many stored records."""
        if any(len(v) != _WMETA.size for v in values):
            bad = next(len(v) for v in values if len(v) != _WMETA.size)
            raise StateCorruptError(f"window bookkeeping record of {bad} bytes")
        rows = np.frombuffer(b"".join(values), dtype=_WMETA_DTYPE)
        return rows["seq"].astype(np.int64), rows["pending"] != 0


class FrameCodec:
    """Frame records of one job's aggregations (see module doc)."""

    def __init__(self, aggs: AggregationSet) -> None:
        self.aggs = aggs
        self.row_bytes = 1 + aggs.width * 8
        #: object operations whose accumulator is stored in the record
        self.stored_objects = [
            (j, op) for j, (_, op) in enumerate(aggs.objects) if not op.full_state
        ]

    def encode_rows(self, acc: FloatArray, early: BoolArray) -> bytes:
        """Version bytes and float64 rows of many frames, concatenated (one NumPy pass)."""
        n = len(acc)
        buf = np.empty((n, self.row_bytes), dtype=np.uint8)
        buf[:, 0] = _RECORD_VERSION | (early.astype(np.uint8) << 7)
        buf[:, 1:] = np.ascontiguousarray(acc).view(np.uint8).reshape(n, -1)
        return buf.tobytes()

    def split_rows(self, data: bytes, n: int) -> list[bytes]:
        """:meth:`encode_rows` output cut into one record per frame."""
        w = self.row_bytes
        return [data[i : i + w] for i in range(0, n * w, w)]

    def with_objects(self, head: bytes, objs: list[Any] | None) -> bytes:
        """A frame record: its row head followed by the object payloads."""
        parts = [head]
        if objs is not None:
            for j, op in self.stored_objects:
                payload = op.dumps(objs[j])
                parts.append(_LEN.pack(len(payload)))
                parts.append(payload)
        return b"".join(parts)

    def decode(self, data: bytes, objs: list[Any] | None) -> tuple[FloatArray, bool]:
        """The accumulator row and the EARLY flag of a record; object payloads into ``objs``."""
        if not data or data[0] & 0x7F != _RECORD_VERSION:
            raise StateCorruptError(f"unknown frame record version {data[:1]!r}")
        width = self.aggs.width
        try:
            row = np.frombuffer(data, dtype=np.float64, count=width, offset=1)
            pos = 1 + width * 8
            if objs is not None:
                for j, op in self.stored_objects:
                    (length,) = _LEN.unpack_from(data, pos)
                    pos += 4
                    objs[j] = load_object(op, data[pos : pos + length])
                    pos += length
        except (ValueError, struct.error) as exc:
            raise StateCorruptError(f"frame record does not decode: {exc}") from exc
        return row, bool(data[0] & _EARLY_DIRTY)

    def decode_rows(self, values: Sequence[bytes]) -> tuple[FloatArray, BoolArray]:
        """Rows and EARLY flags of many vector-only records at once."""
        n = len(values)
        raw = np.frombuffer(b"".join(values), dtype=np.uint8)
        heads = raw[:: self.row_bytes] if n else raw[:0]
        if len(raw) != n * self.row_bytes or ((heads & 0x7F) != _RECORD_VERSION).any():
            raise StateCorruptError("frame records of an unexpected layout in the store")
        rows: FloatArray = raw.reshape(n, self.row_bytes)[:, 1:].copy().view(np.float64)
        early: BoolArray = (heads & _EARLY_DIRTY) != 0
        return rows, early

"""The stored state of session windows: keyspaces and value codecs.

Window Meta Store (key-first, as the seed's session window metadata)::

    S + key + i64(start)                        ->  session record
    X + i64(bucket of end) + key + i64(start)   ->  b""  (time sessions: expiry / restore index)
    P + key + i64(start)                        ->  b""  (a LATE update is pending)

``key`` is ``str(key)``, for tuple sessions ``str(key) + i64(partition)``
(:class:`~stores.keyspace.GroupKeyLayout`). Message Store, for full-state operations
(keyed by key and time, not by session, so a merge or extension never moves it)::

    str(key) + i64(ts) + i64(partition) + i64(offset)  ->  JSON [*values]      (time)
    str(key) + i64(partition) + i64(offset)            ->  JSON [ts, *values]  (tuple)

A session record is a fixed head (version, flags, reported end, next ``update_seq``,
last emitted bounds, the accumulator row in :class:`AggregationSet` layout) followed by
a tail: further emitted bounds (after merges, :data:`FLAG_EXTRA`) and the payloads of
non-full-state object operations. Heads are read and written for many records in one
NumPy pass.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from stores.errors import StateCorruptError
from stores.keyspace import (
    BucketIndexKeyspace,
    EncodedKey,
    KeyFirstKeyspace,
    KeyRange,
    KeyTimeKeyspace,
)
from stores.rocks import ColumnFamily
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage, load_object
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.jsonbytes import json_bytes, loads_as

__all__ = [
    "FLAG_CLOSED",
    "FLAG_EARLY",
    "FLAG_EMITTED",
    "FLAG_EXTRA",
    "FLAG_PENDING",
    "INDEX",
    "INDEX_HEADROOM",
    "MAX_BUCKET_MS",
    "MIN_BUCKET_MS",
    "PENDING",
    "SESSIONS",
    "MessageLayout",
    "RecordHeads",
    "RecordTail",
    "SessionRecordCodec",
    "StoredMessage",
    "message_layout",
]

SESSIONS = KeyFirstKeyspace("session", ColumnFamily.WINDOW_META, b"S")
PENDING = KeyFirstKeyspace("pending session", ColumnFamily.WINDOW_META, b"P")
INDEX = BucketIndexKeyspace("session index", ColumnFamily.WINDOW_META, b"X")
_TIME_MESSAGES = KeyTimeKeyspace("session message", ColumnFamily.MESSAGES)
_TUPLE_MESSAGES = KeyFirstKeyspace("tuple session message", ColumnFamily.MESSAGES)

# Record flags.
FLAG_CLOSED = 1
FLAG_PENDING = 2
FLAG_EARLY = 4
FLAG_EMITTED = 8
FLAG_EXTRA = 16

#: Index bucket width bounds (ms): a bucket is about one gap, so a session that keeps
#: growing is re-indexed at most about once per gap, and restore reads at most one
#: bucket of already-closed sessions.
MIN_BUCKET_MS = 1_000
MAX_BUCKET_MS = 60_000
#: An index entry is written this many buckets ahead of the session's end, so a growing
#: session is re-indexed only every ``1 + INDEX_HEADROOM`` buckets. Restore and expiry
#: only need "entry bucket >= bucket of the end"; the price is that restore reads, and
#: expiry keeps, that many more buckets of closed sessions.
INDEX_HEADROOM = 1

_RECORD_VERSION = 1
_LEN = struct.Struct(">I")
_PAIR = struct.Struct(">qq")
_HEAD = struct.Struct(">BBq")  # version, flags, end: the fields read without decoding


@dataclass(frozen=True, slots=True)
class RecordHeads:
    """The fixed heads of many session records, as columns (``end``: the reported end)."""

    flags: IntArray
    end: IntArray
    seq: IntArray
    em_start: IntArray
    em_end: IntArray
    acc: FloatArray

    def take(self, idx: IntArray) -> RecordHeads:
        """The heads of rows ``idx``."""
        return RecordHeads(
            self.flags[idx],
            self.end[idx],
            self.seq[idx],
            self.em_start[idx],
            self.em_end[idx],
            self.acc[idx],
        )


@dataclass(frozen=True, slots=True)
class RecordTail:
    """A record's tail: emitted bounds beyond the head's, object accumulators."""

    extra: list[tuple[int, int]] | None
    objs: list[Any] | None


class SessionRecordCodec:
    """Session records of one job's aggregations (see module doc)."""

    def __init__(self, aggs: AggregationSet) -> None:
        self.aggs = aggs
        fields: list[Any] = [
            ("version", "u1"),
            ("flags", "u1"),
            ("end", ">i8"),
            ("seq", ">i8"),
            ("em_start", ">i8"),
            ("em_end", ">i8"),
        ]
        if aggs.width:
            fields.append(("acc", "<f8", (aggs.width,)))
        self.dtype = np.dtype(fields)

    @staticmethod
    def flags(
        closed: BoolArray,
        pending: BoolArray,
        early: BoolArray,
        emitted: BoolArray,
        extra: BoolArray,
    ) -> IntArray:
        """The flags column of sessions in these states."""
        flags: IntArray = (
            closed * FLAG_CLOSED
            + pending * FLAG_PENDING
            + early * FLAG_EARLY
            + emitted * FLAG_EMITTED
            + extra * FLAG_EXTRA
        ).astype(np.int64)
        return flags

    def encode(self, heads: RecordHeads) -> list[bytes]:
        """Record heads in one NumPy pass (tails are appended by the caller)."""
        n = len(heads.flags)
        rec = np.zeros(n, dtype=self.dtype)
        rec["version"] = _RECORD_VERSION
        rec["flags"] = heads.flags
        rec["end"] = heads.end
        rec["seq"] = heads.seq
        rec["em_start"] = heads.em_start
        rec["em_end"] = heads.em_end
        if self.aggs.width:
            rec["acc"] = heads.acc
        data = rec.tobytes()
        w = self.dtype.itemsize
        return [data[i : i + w] for i in range(0, n * w, w)]

    def encode_tail(self, extra: list[tuple[int, int]] | None, objs: list[Any] | None) -> bytes:
        """A record's tail (see :class:`RecordTail`)."""
        parts: list[bytes] = []
        if extra:
            parts.append(_LEN.pack(len(extra)))
            parts.extend(_PAIR.pack(a, b) for a, b in extra)
        if objs is not None:
            for j, (_, op) in enumerate(self.aggs.objects):
                if not op.full_state:
                    payload = op.dumps(objs[j])
                    parts.append(_LEN.pack(len(payload)))
                    parts.append(payload)
        return b"".join(parts)

    def decode(self, values: Sequence[bytes]) -> tuple[RecordHeads, list[bytes]]:
        """Heads (vectorized) and the undecoded tails of many records."""
        size = self.dtype.itemsize
        if any(len(v) < size for v in values):
            raise StateCorruptError(f"session records shorter than their {size}-byte head")
        head = np.frombuffer(b"".join(v[:size] for v in values), dtype=self.dtype)
        bad = head["version"] != _RECORD_VERSION
        if bad.any():
            raise StateCorruptError(
                f"unknown session record version {int(head['version'][bad][0])}"
            )
        n = len(head)
        acc: FloatArray = (
            head["acc"].astype(np.float64) if self.aggs.width else np.zeros((n, 0), np.float64)
        )
        heads = RecordHeads(
            head["flags"].astype(np.int64),
            head["end"].astype(np.int64),
            head["seq"].astype(np.int64),
            head["em_start"].astype(np.int64),
            head["em_end"].astype(np.int64),
            acc,
        )
        return heads, [v[size:] for v in values]

    def decode_tail(self, flags: int, tail: bytes) -> RecordTail:
        """A record's tail (``flags`` from its head)."""
        try:
            return self._decode_tail(flags, tail)
        except (struct.error, ValueError) as exc:
            raise StateCorruptError(f"session record tail does not decode: {exc}") from exc

    def _decode_tail(self, flags: int, tail: bytes) -> RecordTail:
        pos = 0
        extra: list[tuple[int, int]] | None = None
        if flags & FLAG_EXTRA:
            (n,) = _LEN.unpack_from(tail, 0)
            pos = _LEN.size
            extra = []
            for _ in range(n):
                a, b = _PAIR.unpack_from(tail, pos)
                extra.append((int(a), int(b)))
                pos += _PAIR.size
        if not self.aggs.objects:
            return RecordTail(extra, None)
        objs = self.aggs.create_objects()
        for j, (_, op) in enumerate(self.aggs.objects):
            if op.full_state:
                continue
            (length,) = _LEN.unpack_from(tail, pos)
            pos += _LEN.size
            objs[j] = load_object(op, tail[pos : pos + length])
            pos += length
        return RecordTail(extra, objs)

    @staticmethod
    def end_of(value: bytes) -> int:
        """The reported end of one stored record (without decoding the rest)."""
        try:
            return int(_HEAD.unpack_from(value)[2])
        except struct.error as exc:
            raise StateCorruptError(f"session record of {len(value)} bytes") from exc

    @staticmethod
    def pending_of(value: bytes) -> bool:
        """Whether one stored record has a LATE update pending."""
        try:
            return bool(_HEAD.unpack_from(value)[1] & FLAG_PENDING)
        except struct.error as exc:
            raise StateCorruptError(f"session record of {len(value)} bytes") from exc


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A full-state message read back: its order and its values."""

    order: Ordering
    values: list[Any]


class MessageLayout(Protocol):
    """Keys and values of the Message Store records of one session shape."""

    @property
    def cf(self) -> ColumnFamily:
        """The column family of the messages."""
        ...

    def key(self, key: EncodedKey, message: PendingMessage) -> bytes:
        """The store key of a message of session key ``key``."""
        ...

    def value(self, message: PendingMessage) -> bytes:
        """The stored value of a message."""
        ...

    def span(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        """The messages of ``key`` with ``lo <= time < hi`` (offsets for tuple sessions)."""
        ...

    def parse(self, key: EncodedKey, partition: int, data: bytes, value: bytes) -> StoredMessage:
        """A stored message of ``key`` (whose partition is ``partition``)."""
        ...


class _TimeMessages:
    """Time sessions: ``str(key) + i64(ts) + i64(partition) + i64(offset) -> [*values]``."""

    cf = ColumnFamily.MESSAGES

    def key(self, key: EncodedKey, message: PendingMessage) -> bytes:
        return _TIME_MESSAGES.key(key, message.ts, message.partition, message.offset)

    def value(self, message: PendingMessage) -> bytes:
        return json_bytes(list(message.values))

    def span(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        return _TIME_MESSAGES.times(key, lo, hi)

    def parse(self, key: EncodedKey, partition: int, data: bytes, value: bytes) -> StoredMessage:
        e = _TIME_MESSAGES.parse(data, key)
        return StoredMessage(Ordering(e.time, e.a, e.b), _json_list(value))


class _TupleMessages:
    """Tuple sessions: ``str(key) + i64(partition) + i64(offset) -> [ts, *values]``."""

    cf = ColumnFamily.MESSAGES

    def key(self, key: EncodedKey, message: PendingMessage) -> bytes:
        return _TUPLE_MESSAGES.key(key, message.offset)

    def value(self, message: PendingMessage) -> bytes:
        return json_bytes([message.ts, *message.values])

    def span(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        return _TUPLE_MESSAGES.times(key, lo, hi)

    def parse(self, key: EncodedKey, partition: int, data: bytes, value: bytes) -> StoredMessage:
        offset = _TUPLE_MESSAGES.parse(data).time
        vals = _json_list(value)
        if not vals:
            raise StateCorruptError(f"tuple session message {data[:40]!r} has no timestamp")
        return StoredMessage(Ordering(int(vals[0]), partition, offset), vals[1:])


def _json_list(value: bytes) -> list[Any]:
    return loads_as(value, list, "a stored session message", StateCorruptError)


def message_layout(by_offsets: bool) -> MessageLayout:
    """The Message Store layout of time (``False``) or tuple (``True``) sessions."""
    return _TupleMessages() if by_offsets else _TimeMessages()

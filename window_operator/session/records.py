"""The stored session record layout and its (de)serialization.

A session record is a fixed head (version, flags, reported end, next ``update_seq``,
last emitted bounds, accumulator row) followed by a tail: further emitted bounds (after
merges, flag :data:`FLAG_EXTRA`) and the payloads of non-full-state object operations.
The head is read and written for many records in one NumPy pass.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from stores.keys import decode_i64, encode_i64
from window_operator.aggset import AggregationSet
from window_operator.session.arrays import IntArray
from window_operator.session.keys import SESSION_TAG, SessionKeys, i64_bytes
from window_operator.session.slots import Slots

__all__ = [
    "FLAG_CLOSED",
    "FLAG_EARLY",
    "FLAG_EMITTED",
    "FLAG_EXTRA",
    "FLAG_PENDING",
    "INDEX_HEADROOM",
    "MAX_BUCKET_MS",
    "MIN_BUCKET_MS",
    "Decoded",
    "PendingMessage",
    "RecordCodec",
    "record_end",
]

_RECORD_VERSION = 1
_LEN = struct.Struct(">I")
_PAIR = struct.Struct(">qq")

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


def record_end(value: bytes) -> int:
    """The reported end stored in a session record (a big-endian i64 after two bytes)."""
    return int.from_bytes(value[2:10], "big", signed=True)


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """A full-state message waiting to be written to the Message Store."""

    kid: int
    ts: int
    partition: int
    offset: int
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Decoded:
    """Session records read from the store (not yet in the cache)."""

    kid: IntArray
    start: IntArray
    head: npt.NDArray[Any]
    tails: list[bytes]


class RecordCodec:
    """Encodes cached sessions as store records and decodes records read back.

    ``pad`` is added to a session's last event (time or offset) to give its reported
    end, the ``end`` field of a record.
    """

    def __init__(self, keys: SessionKeys, slots: Slots, aggs: AggregationSet, pad: int) -> None:
        self.keys = keys
        self.slots = slots
        self.aggs = aggs
        self._pad = pad
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

    def decode(self, keys: Sequence[bytes], values: Sequence[bytes]) -> Decoded:
        """Parse session records (fixed head vectorized, tails kept as bytes)."""
        size = self.dtype.itemsize
        head = np.frombuffer(b"".join(v[:size] for v in values), dtype=self.dtype)
        if len(head) and (head["version"] != _RECORD_VERSION).any():
            bad = int(head["version"][head["version"] != _RECORD_VERSION][0])
            raise ValueError(f"unknown session record version {bad}")
        kid = np.fromiter(
            (self.keys.id_of_encoded(k[1:-8]) for k in keys), dtype=np.int64, count=len(keys)
        )
        self.keys.sync()
        start = np.fromiter((decode_i64(k, len(k) - 8) for k in keys), np.int64, len(keys))
        return Decoded(kid, start, head, [v[size:] for v in values])

    def decode_tail(self, slot: int, flags: int, tail: bytes) -> None:
        """Put a record's tail (extra emitted bounds, object payloads) into ``slot``."""
        pos = 0
        if flags & FLAG_EXTRA:
            (n,) = _LEN.unpack_from(tail, 0)
            pos = 4
            pairs = []
            for _ in range(n):
                pairs.append(_PAIR.unpack_from(tail, pos))
                pos += _PAIR.size
            self.slots.extra[slot] = [(int(a), int(b)) for a, b in pairs]
        if not self.aggs.objects:
            return
        objs = self.aggs.create_objects()
        for j, (_, op) in enumerate(self.aggs.objects):
            if op.full_state:
                continue
            (length,) = _LEN.unpack_from(tail, pos)
            pos += 4
            objs[j] = op.loads(tail[pos : pos + length])
            pos += length
        self.slots.objs[slot] = objs

    def encode(self, slots: IntArray) -> list[bytes]:
        """Session records: the fixed head in one NumPy pass, tails where needed."""
        sl = self.slots
        n = len(slots)
        rec = np.zeros(n, dtype=self.dtype)
        flags = (
            sl.closed[slots] * FLAG_CLOSED
            + sl.pending[slots] * FLAG_PENDING
            + sl.early[slots] * FLAG_EARLY
            + sl.emitted[slots] * FLAG_EMITTED
        ).astype(np.uint8)
        extra = sl.extra
        has_extra = np.isin(slots, list(extra)) if extra else np.zeros(n, dtype=np.bool_)
        flags[has_extra] |= FLAG_EXTRA
        rec["version"] = _RECORD_VERSION
        rec["flags"] = flags
        rec["end"] = sl.last[slots] + self._pad
        rec["seq"] = sl.seq[slots]
        rec["em_start"] = sl.em_start[slots]
        rec["em_end"] = sl.em_end[slots]
        if self.aggs.width:
            rec["acc"] = sl.acc[slots]
        data = rec.tobytes()
        w = self.dtype.itemsize
        values = [data[i : i + w] for i in range(0, n * w, w)]
        if self.aggs.objects or has_extra.any():
            tail_at = range(n) if self.aggs.objects else np.flatnonzero(has_extra).tolist()
            for j in tail_at:
                values[j] += self._encode_tail(int(slots[j]))
        return values

    def _encode_tail(self, slot: int) -> bytes:
        parts: list[bytes] = []
        pairs = self.slots.extra.get(slot)
        if pairs:
            parts.append(_LEN.pack(len(pairs)))
            parts.extend(_PAIR.pack(a, b) for a, b in pairs)
        objs = self.slots.objs[slot]
        if objs is not None:
            for j, (_, op) in enumerate(self.aggs.objects):
                if not op.full_state:
                    payload = op.dumps(objs[j])
                    parts.append(_LEN.pack(len(payload)))
                    parts.append(payload)
        return b"".join(parts)

    def skey(self, tag: bytes, kid: int, start: int) -> bytes:
        """The store key ``tag + enc(key) + i64(start)`` of one session."""
        return tag + self.keys.enc[kid] + encode_i64(start)

    def skeys(self, tag: bytes, kids: IntArray, starts: IntArray) -> list[bytes]:
        """:meth:`skey` of many sessions."""
        sb = i64_bytes(starts)
        if tag == SESSION_TAG:
            pre = self.keys.prefix
            return [pre[k] + sb[8 * j : 8 * j + 8] for j, k in enumerate(kids.tolist())]
        enc = self.keys.enc
        return [tag + enc[k] + sb[8 * j : 8 * j + 8] for j, k in enumerate(kids.tolist())]

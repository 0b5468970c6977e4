"""The stored state of a join: its keyspaces and value codecs.

Message Store (column family ``messages``), one keyspace per input behind its tag byte
(``L`` / ``R``), in the job's :class:`~window_operator.join.layouts.StoreLayout` (the
seed's key matrix); the value is the record's JSON, preceded by what the key lacks::

    L|R + <timestamp><offset>             ->  u32(len) + equal fields + JSON
    L|R + <equal_flds><timestamp><offset> ->  JSON
    L|R + <timestamp><equal_flds><offset> ->  JSON
    L|R + <equal_flds><seq>               ->  i64(ts) + i64(position) + JSON  (plain >q)

The "offset" of a time layout is the message position ``partition * 2**48 + offset``;
rows joins key by an arrival sequence number instead.

Window Meta Store (column family ``window_meta``)::

    W + L|R + i64(frame)             ->  count, min/max ts, min/max position (>qqqqq)
    U + L|R + i64(ts) + i64(position) ->  emitted flag, >qqI (ts, position, len), fields, JSON
    X + L|R + i64(bucket) + fields    ->  empty (the per-prefix expiry index)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stores.errors import StateCorruptError
from stores.keyspace import (
    EncodedKey,
    IntKeyspace,
    MessageKeyspace,
    MessageLayout,
    TimeIndexKeyspace,
)
from stores.rocks import ColumnFamily
from window_operator.arrays import IntArray, ObjArray
from window_operator.join.common import obj_array

__all__ = [
    "FRAMES",
    "OUTER",
    "SWEEP",
    "FrameRecord",
    "MessageCodec",
    "OuterRecord",
    "OuterValue",
    "StoredMessages",
]

_SIDE_TAGS = (b"L", b"R")
FRAMES = tuple(
    IntKeyspace("join window frame", ColumnFamily.WINDOW_META, b"W" + t, 1) for t in _SIDE_TAGS
)
OUTER = tuple(
    IntKeyspace("outer-join row", ColumnFamily.WINDOW_META, b"U" + t, 2) for t in _SIDE_TAGS
)
SWEEP = tuple(
    TimeIndexKeyspace("join expiry index", ColumnFamily.WINDOW_META, b"X" + t) for t in _SIDE_TAGS
)

_FRAME = struct.Struct(">qqqqq")
_OUTER = struct.Struct(">qqI")
_FIELDS_LEN = struct.Struct(">I")
_PAIR = 16


class FrameRecord:
    """Window frame metadata: ``[count, min_ts, max_ts, min_position, max_position]``."""

    @staticmethod
    def encode(meta: Sequence[int]) -> bytes:
        """The stored bytes."""
        return _FRAME.pack(*meta)

    @staticmethod
    def decode(data: bytes) -> list[int]:
        """The metadata of stored bytes."""
        try:
            return list(_FRAME.unpack(data))
        except struct.error as exc:
            raise StateCorruptError(f"join frame record of {len(data)} bytes") from exc


@dataclass(frozen=True, slots=True)
class OuterValue:
    """A stored outer-join row: whether it was emitted unmatched, and its message."""

    emitted: bool
    ts: int
    pos: int
    fields: EncodedKey
    rec: bytes


class OuterRecord:
    """The value codec of outer-join rows (see the module doc)."""

    @staticmethod
    def encode(emitted: bool, ts: int, pos: int, fields: EncodedKey, rec: bytes) -> bytes:
        """The stored bytes."""
        return bytes((emitted,)) + _OUTER.pack(ts, pos, len(fields)) + fields + rec

    @staticmethod
    def decode(data: bytes) -> OuterValue:
        """The row of stored bytes."""
        head = 1 + _OUTER.size
        try:
            ts, pos, n = _OUTER.unpack_from(data, 1)
        except struct.error as exc:
            raise StateCorruptError(f"outer-join record of {len(data)} bytes") from exc
        if len(data) < head + n:
            raise StateCorruptError(f"outer-join record of {len(data)} bytes holds {n} fields")
        fields = EncodedKey(data[head : head + n])
        return OuterValue(bool(data[0]), ts, pos, fields, data[head + n :])


@dataclass(slots=True)
class StoredMessages:
    """Messages read back from the Message Store, one column per part.

    ``seq`` is the arrival sequence number of rows joins (``None`` for time layouts).
    """

    fields: list[EncodedKey]
    ts: IntArray
    pos: IntArray
    rec: list[bytes]
    seq: IntArray | None = None

    def __len__(self) -> int:
        return len(self.rec)


class MessageCodec:
    """Keys and values of one input's messages in one layout (see the module doc)."""

    def __init__(self, layout: MessageLayout, side: int) -> None:
        self.layout = layout
        self.keyspace = MessageKeyspace(
            "join message", ColumnFamily.MESSAGES, _SIDE_TAGS[side], layout
        )

    def encode(
        self,
        encoded: Sequence[EncodedKey],
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        seqs: IntArray,
        recs: ObjArray,
    ) -> tuple[list[bytes], list[bytes]]:
        """Keys and values of messages, in key order (RocksDB inserts sorted batches faster).

        ``encoded[kid]`` are the encoded equal fields of join key ``kid``; ``seqs``
        (arrival sequence numbers) are only read by the ``fields_offset`` layout.
        """
        ks, layout = self.keyspace, self.layout
        rank = None
        if layout.holds_fields:
            # the encodings sort like the keys: rank the distinct ones, not every row
            ukids, inv = np.unique(kids, return_inverse=True)
            rank = np.argsort(np.argsort(obj_array([encoded[k] for k in ukids.tolist()])))[inv]
        rows_join = layout is MessageLayout.FIELDS_OFFSET
        order = ks.sort_order(field_rank=rank, ts=ts, offset=seqs if rows_join else pos)
        kids, ts, pos = kids[order], ts[order], pos[order]
        offset = seqs[order] if rows_join else pos
        fields = [encoded[k] for k in kids.tolist()]
        records: list[bytes] = recs[order].tolist()
        keys = ks.keys(
            fields=fields if layout.holds_fields else None,
            ts=ts if layout.holds_ts else None,
            offset=offset,
        )
        if layout is MessageLayout.TS_OFFSET:
            pack = _FIELDS_LEN.pack
            return keys, [pack(len(f)) + f + r for f, r in zip(fields, records, strict=True)]
        if layout is MessageLayout.FIELDS_OFFSET:
            data = np.column_stack([ts, pos]).astype(">i8").tobytes()
            heads = [data[i : i + _PAIR] for i in range(0, len(data), _PAIR)]
            return keys, [h + r for h, r in zip(heads, records, strict=True)]
        return keys, records

    def decode(self, keys: Sequence[bytes], values: Sequence[bytes]) -> StoredMessages:
        """The messages of stored keys and values."""
        cols = self.keyspace.parse_many(keys)
        layout = self.layout
        if layout is MessageLayout.TS_OFFSET:
            assert cols.ts is not None
            fields, recs = _split_fields(values)
            return StoredMessages(fields, cols.ts, cols.offset, recs)
        assert cols.fields is not None
        if layout is MessageLayout.FIELDS_OFFSET:
            if any(len(v) < _PAIR for v in values):
                raise StateCorruptError("a rows-join message value is shorter than its header")
            heads = np.frombuffer(b"".join([v[:_PAIR] for v in values]), dtype=">i8")
            pairs = heads.astype(np.int64).reshape(len(values), 2)
            recs = [v[_PAIR:] for v in values]
            return StoredMessages(cols.fields, pairs[:, 0], pairs[:, 1], recs, cols.offset)
        assert cols.ts is not None
        return StoredMessages(cols.fields, cols.ts, cols.offset, list(values))


def _split_fields(values: Sequence[bytes]) -> tuple[list[EncodedKey], list[bytes]]:
    """``ts_offset`` values: the length-prefixed equal fields and the record JSON."""
    fields: list[EncodedKey] = []
    recs: list[bytes] = []
    w = _FIELDS_LEN.size
    for v in values:
        try:
            (n,) = _FIELDS_LEN.unpack_from(v, 0)
        except struct.error as exc:
            raise StateCorruptError(f"join message value of {len(v)} bytes") from exc
        if len(v) < w + n:
            raise StateCorruptError(f"join message value of {len(v)} bytes holds {n} fields")
        fields.append(EncodedKey(v[w : w + n]))
        recs.append(v[w + n :])
    return fields, recs

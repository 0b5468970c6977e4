"""The Samza seed's Message Store key matrix, and records named by integers (or by a time
and an encoded key) only."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from stores.keys import (
    I64_WIDTH,
    MAX_I64,
    MIN_I64,
    decode_i64,
    encode_i64,
    prefix_upper_bound,
    ts_range,
)
from stores.keyspace.base import (
    SIGN,
    EncodedKey,
    IntArray,
    Keyspace,
    corrupt,
)
from stores.rocks import ColumnFamily, KeyRange

__all__ = [
    "IntKeyspace",
    "MessageColumns",
    "MessageEntry",
    "MessageKeyspace",
    "MessageLayout",
    "TimeIndexEntry",
    "TimeIndexKeyspace",
]

# ------------------------------------------------------------------------ message layouts
# The Samza seed's Message Store key matrix, and records named by integers (or by a time
# and an encoded key) only.


class MessageLayout(enum.StrEnum):
    """The Samza seed's Message Store key matrix (each key behind its keyspace's tag).

    ``fields`` are a message's equal fields, already encoded
    (:func:`~stores.keys.encode_fields`: self-delimiting); ``offset`` is its position in
    its input (for ``fields_offset``: an arrival sequence number).
    """

    #: ``<timestamp><offset>``
    TS_OFFSET = "ts_offset"
    #: ``<equal_flds><timestamp><offset>``
    FIELDS_TS_OFFSET = "fields_ts_offset"
    #: ``<timestamp><equal_flds><offset>``
    TS_FIELDS_OFFSET = "ts_fields_offset"
    #: ``<equal_flds><offset>``
    FIELDS_OFFSET = "fields_offset"

    @property
    def key_first(self) -> bool:
        """Whether keys start with the equal fields (one key's messages are one range)."""
        return self in (MessageLayout.FIELDS_TS_OFFSET, MessageLayout.FIELDS_OFFSET)

    @property
    def holds_fields(self) -> bool:
        """Whether keys hold the equal fields."""
        return self is not MessageLayout.TS_OFFSET

    @property
    def holds_ts(self) -> bool:
        """Whether keys hold the timestamp."""
        return self is not MessageLayout.FIELDS_OFFSET


class MessageEntry(NamedTuple):
    """A parsed message key: the parts its layout holds (``None``: not in the key)."""

    fields: EncodedKey | None
    ts: int | None
    offset: int


class MessageColumns(NamedTuple):
    """Many parsed message keys, one column per part (``None``: not in the keys)."""

    fields: list[EncodedKey] | None
    ts: IntArray | None
    offset: IntArray


def _i64_rows(head: bytes, *columns: IntArray) -> list[bytes]:
    """Per row, ``head`` followed by the ``encode_i64`` of each column (one NumPy pass)."""
    n, h = len(columns[0]), len(head)
    width = h + I64_WIDTH * len(columns)
    flipped = np.column_stack(
        [c.astype(np.int64, copy=False).view(np.uint64) ^ SIGN for c in columns]
    ).astype(">u8")
    if h:
        buf = np.empty((n, width), dtype=np.uint8)
        buf[:, :h] = np.frombuffer(head, dtype=np.uint8)
        buf[:, h:] = flipped.view(np.uint8).reshape(n, width - h)
        data = buf.tobytes()
    else:
        data = flipped.tobytes()
    return [data[i : i + width] for i in range(0, n * width, width)]


def _i64_at(keys: Sequence[bytes], at: int) -> IntArray:
    """The i64 at byte ``at`` of every key (negative: from the end), as one array."""
    end = at + I64_WIDTH or None
    raw = np.frombuffer(b"".join([k[at:end] for k in keys]), dtype=">u8")
    out: IntArray = (raw.astype(np.uint64) ^ SIGN).view(np.int64)
    return out


class MessageKeyspace(Keyspace):
    """Message Store keys of one :class:`MessageLayout` behind ``tag`` (see its doc).

    Every method takes and gives only the parts the layout holds.
    """

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes, layout: MessageLayout) -> None:
        super().__init__(name, cf, tag)
        self.layout = layout
        h = len(tag)
        # where the fixed-width parts are (negative: from the end) and the fields span
        ts_first = h if layout is not MessageLayout.FIELDS_TS_OFFSET else -2 * I64_WIDTH
        self._ts_at = ts_first if layout.holds_ts else None
        self._offset_at = h + I64_WIDTH if layout is MessageLayout.TS_OFFSET else -I64_WIDTH
        self._fields_from = h + I64_WIDTH if layout is MessageLayout.TS_FIELDS_OFFSET else h
        self._fields_to = -(2 if layout is MessageLayout.FIELDS_TS_OFFSET else 1) * I64_WIDTH
        self._min_len = h + (2 if layout.holds_ts else 1) * I64_WIDTH

    def key(self, *, fields: EncodedKey | None = None, ts: int | None = None, offset: int) -> bytes:
        """The store key of one message."""
        self._require(fields is not None, ts is not None)
        f = (fields or b"") if self.layout.holds_fields else b""
        t = encode_i64(ts) if ts is not None and self.layout.holds_ts else b""
        if self.layout is MessageLayout.TS_FIELDS_OFFSET:
            return self.tag + t + f + encode_i64(offset)
        return self.tag + f + t + encode_i64(offset)

    def keys(
        self,
        *,
        fields: Sequence[EncodedKey] | None = None,
        ts: IntArray | None = None,
        offset: IntArray,
    ) -> list[bytes]:
        """Store keys of many messages (row ``i`` of each column), built column-wise."""
        self._require(fields is not None, ts is not None)
        layout, tag, flds = self.layout, self.tag, fields or ()
        t = offset if ts is None else ts  # only read by the layouts that hold a time
        if layout is MessageLayout.TS_OFFSET:
            return _i64_rows(tag, t, offset)
        if layout is MessageLayout.FIELDS_OFFSET:
            return [tag + f + o for f, o in zip(flds, _i64_rows(b"", offset), strict=True)]
        if layout is MessageLayout.FIELDS_TS_OFFSET:
            return [tag + f + r for f, r in zip(flds, _i64_rows(b"", t, offset), strict=True)]
        heads, tails = _i64_rows(tag, t), _i64_rows(b"", offset)
        return [h + f + o for h, f, o in zip(heads, flds, tails, strict=True)]

    def sort_order(
        self, *, field_rank: IntArray | None = None, ts: IntArray | None = None, offset: IntArray
    ) -> IntArray:
        """The row order that sorts the keys of :meth:`keys`.

        ``field_rank[i]`` ranks row ``i``'s encoded fields in byte order (equal fields,
        equal ranks); the layout decides which part sorts first.
        """
        self._require(field_rank is not None, ts is not None)
        rank = offset if field_rank is None else field_rank  # (as t in :meth:`keys`)
        t = offset if ts is None else ts
        by: dict[MessageLayout, tuple[IntArray, ...]] = {
            MessageLayout.TS_OFFSET: (offset, t),
            MessageLayout.FIELDS_OFFSET: (offset, rank),
            MessageLayout.FIELDS_TS_OFFSET: (offset, t, rank),
            MessageLayout.TS_FIELDS_OFFSET: (offset, rank, t),
        }
        order: IntArray = np.lexsort(by[self.layout])
        return order

    def parse(self, data: bytes) -> MessageEntry:
        """The parts of a store key."""
        self._check(data)
        n = len(data)
        fields = None
        if self.layout.holds_fields:
            fields = EncodedKey(data[self._fields_from : n + self._fields_to])
        ts = None if self._ts_at is None else decode_i64(data, self._ts_at % n)
        return MessageEntry(fields, ts, decode_i64(data, self._offset_at % n))

    def parse_many(self, keys: Sequence[bytes]) -> MessageColumns:
        """The parts of many store keys, the integers as arrays."""
        for k in keys:
            self._check(k)
        fields = None
        if self.layout.holds_fields:
            a, b = self._fields_from, self._fields_to
            fields = [EncodedKey(k[a:b]) for k in keys]
        ts = None if self._ts_at is None else _i64_at(keys, self._ts_at)
        return MessageColumns(fields, ts, _i64_at(keys, self._offset_at))

    def times(self, lo: int, hi: int) -> KeyRange:
        """Time-first layouts: every message with ``lo <= ts < hi`` (``hi = MAX_I64 + 1``:
        unbounded)."""
        if self.layout.key_first or not self.layout.holds_ts:
            raise ValueError(f"the {self.layout} layout is not ordered by time")
        return KeyRange(self.cf, *ts_range(self.tag, lo, hi))

    def of_key(self, fields: EncodedKey) -> KeyRange:
        """Key-first layouts: every message with these equal fields."""
        if not self.layout.key_first:
            raise ValueError(f"the {self.layout} layout is not ordered by key")
        p = self.tag + fields
        return KeyRange(self.cf, p, prefix_upper_bound(p))

    def key_times(self, fields: EncodedKey, lo: int, hi: int) -> KeyRange:
        """``fields_ts_offset``: the messages of ``fields`` with ``lo <= ts < hi``."""
        return self.key_times_many([fields], lo, hi)[0]

    def key_times_many(self, fields: Iterable[EncodedKey], lo: int, hi: int) -> list[KeyRange]:
        """:meth:`key_times` of many keys (e.g. one range delete per key at expiry)."""
        if self.layout is not MessageLayout.FIELDS_TS_OFFSET:
            raise ValueError(f"the {self.layout} layout is not ordered by key, then time")
        heads = [self.tag + f for f in fields]
        if hi > MAX_I64:  # unbounded above (or out of range): each key's own bound
            return [KeyRange(self.cf, *ts_range(h, lo, hi)) for h in heads]
        a = encode_i64(lo)
        b = encode_i64(hi) if hi > lo else a
        return [KeyRange(self.cf, h + a, h + b) for h in heads]

    def _check(self, data: bytes) -> None:
        exact = self.layout is MessageLayout.TS_OFFSET
        n = len(data)
        if n < self._min_len or (exact and n != self._min_len) or not data.startswith(self.tag):
            raise corrupt(self.name, data, ValueError(f"not a {self.layout} key"))

    def _require(self, has_fields: bool, has_ts: bool) -> None:
        layout = self.layout
        if (layout.holds_fields and not has_fields) or (layout.holds_ts and not has_ts):
            raise ValueError(f"{layout} keys need the parts they hold (fields, ts, offset)")


class _TimeTagged(Keyspace):
    """Records whose keys are ``tag + i64(time) + ...``: ranges by time."""

    def before(self, time: int) -> KeyRange:
        """Every record with a time below ``time``."""
        return KeyRange(self.cf, *ts_range(self.tag, MIN_I64, time))


class IntKeyspace(_TimeTagged):
    """``tag + i64(a) [+ i64(b) ...]``: records named by ``width`` integers, ordered by
    them in turn (the first one a time, for :meth:`before`)."""

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes, width: int) -> None:
        super().__init__(name, cf, tag)
        self.width = width

    def key(self, *values: int) -> bytes:
        """The store key of one record."""
        if len(values) != self.width:
            raise ValueError(f"{self.name} keys have {self.width} integers, got {values!r}")
        return self.tag + b"".join(map(encode_i64, values))

    def parse(self, data: bytes) -> tuple[int, ...]:
        """The integers of a store key."""
        h = len(self.tag)
        if len(data) != h + self.width * I64_WIDTH or not data.startswith(self.tag):
            raise corrupt(self.name, data, ValueError("unexpected layout"))
        return tuple(decode_i64(data, h + i * I64_WIDTH) for i in range(self.width))


class TimeIndexEntry(NamedTuple):
    """A parsed time-index key."""

    time: int
    key: EncodedKey


class TimeIndexKeyspace(_TimeTagged):
    """``tag + i64(time) + key``: which keys have records at which time (e.g. per expiry
    bucket). The key part is any prefix-free encoding and is given back as stored."""

    def key(self, time: int, key: EncodedKey) -> bytes:
        """The store key of one entry."""
        return self.tag + encode_i64(time) + key

    def keys(self, time: int, keys: Iterable[EncodedKey]) -> list[bytes]:
        """The store keys of many entries of one time."""
        head = self.tag + encode_i64(time)
        return [head + k for k in keys]

    def parse(self, data: bytes) -> TimeIndexEntry:
        """The time and key part of a store key."""
        head = len(self.tag) + I64_WIDTH
        if len(data) < head or not data.startswith(self.tag):
            raise corrupt(self.name, data, ValueError("unexpected layout"))
        return TimeIndexEntry(decode_i64(data, len(self.tag)), EncodedKey(data[head:]))

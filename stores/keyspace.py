"""Typed keyspaces: one declaration per kind of stored record, bytes only inside.

An operator declares each of its keyspaces once (which column family, which tag, which
layout) and then builds, parses and scans keys only through it: no byte offsets or
slicing outside this module and :mod:`stores.keys`. Keys that do not parse raise
:class:`~stores.errors.StateCorruptError`.

Layouts (``str`` parts are :func:`~stores.keys.encode_str` encodings, which the callers
usually cache per key as :data:`EncodedKey`):

* :class:`TimeFirstKeyspace` ``tag + i64(time) + str(key)``: ordered by time, so the
  records of a time range (retention expiry) are one range;
* :class:`KeyTimeKeyspace` ``tag + str(key) + i64(time) + i64(a) + i64(b)``: ordered by
  key, then time (and two tie-breaking integers, e.g. partition and offset): one key's
  records of a time range are one range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, NewType

import numpy as np
import numpy.typing as npt

from stores.errors import StateCorruptError
from stores.keys import (
    I64_WIDTH,
    MAX_I64,
    MIN_I64,
    KeyEncodingError,
    decode_i64,
    decode_key_first_key,
    decode_str,
    encode_i64,
    encode_str,
    prefix_upper_bound,
)
from stores.rocks import ColumnFamily, KeyRange

__all__ = [
    "EncodedKey",
    "KeyRange",
    "KeySlotEntry",
    "KeySlotKeyspace",
    "KeyTimeEntry",
    "KeyTimeKeyspace",
    "TimeFirstEntry",
    "TimeFirstKeyspace",
    "clamp_i64",
    "encode_key",
    "i64_column",
]

IntArray = npt.NDArray[np.int64]

EncodedKey = NewType("EncodedKey", bytes)
"""A grouping key in its store encoding (:func:`encode_key`)."""

_SIGN = np.uint64(1 << 63)
MIN_I64_BYTES = encode_i64(MIN_I64)
_TERMINATOR = b"\x00\x01"


def encode_key(key: str) -> EncodedKey:
    """The store encoding of a grouping key (order-preserving, prefix-free)."""
    return EncodedKey(encode_str(key))


def clamp_i64(x: int) -> int:
    """``x`` clamped to the signed 64-bit range (for scan bounds)."""
    return min(max(x, MIN_I64), MAX_I64)


def i64_column(values: IntArray) -> bytes:
    """``encode_i64`` of every value, concatenated (8 bytes each), in one NumPy pass."""
    flipped = values.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    return flipped.astype(">u8").tobytes()


def _corrupt(what: str, data: bytes, exc: Exception) -> StateCorruptError:
    return StateCorruptError(f"not a {what} key: {data[:40]!r}: {exc}")


class TimeFirstEntry(NamedTuple):
    """A parsed time-first key."""

    time: int
    key: str


class TimeFirstKeyspace:
    """``tag + i64(time) + str(key)`` records in one column family (see module doc)."""

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes) -> None:
        self.name = name
        self.cf = cf
        self.tag = tag
        self._head = len(tag) + I64_WIDTH

    def key(self, time: int, key: EncodedKey) -> bytes:
        """The store key of one record."""
        return self.tag + encode_i64(time) + key

    def keys(self, times: Sequence[int], keys: Sequence[EncodedKey]) -> list[bytes]:
        """Store keys of many records (few distinct times: their prefixes are shared)."""
        prefixes = {t: self.tag + encode_i64(t) for t in dict.fromkeys(times)}
        return [prefixes[t] + k for t, k in zip(times, keys, strict=True)]

    def parse(self, data: bytes) -> TimeFirstEntry:
        """The time and key of a store key."""
        try:
            time = decode_i64(data, len(self.tag))
            key, end = decode_str(data, self._head)
        except KeyEncodingError as exc:
            raise _corrupt(self.name, data, exc) from exc
        if end != len(data) or not data.startswith(self.tag):
            raise _corrupt(self.name, data, ValueError("unexpected layout"))
        return TimeFirstEntry(time, key)

    def parse_many(self, keys: Sequence[bytes]) -> tuple[IntArray, list[str]]:
        """Times (one array) and keys of many store keys."""
        head = self._head
        try:
            times = np.fromiter(
                (decode_i64(k, len(self.tag)) for k in keys), dtype=np.int64, count=len(keys)
            )
            names = [
                k[head:-2].decode()
                if k.endswith(_TERMINATOR) and b"\x00" not in k[head:-2]
                else decode_str(k, head)[0]
                for k in keys
            ]
        except (KeyEncodingError, UnicodeDecodeError) as exc:
            raise StateCorruptError(f"{self.name} keys do not parse: {exc}") from exc
        return times, names

    def time_of(self, data: bytes) -> int:
        """The time part of a store key."""
        try:
            return decode_i64(data, len(self.tag))
        except KeyEncodingError as exc:
            raise _corrupt(self.name, data, exc) from exc

    def holds_key(self, data: bytes, key: EncodedKey) -> bool:
        """Whether a store key of this keyspace is a record of ``key``."""
        return len(data) == self._head + len(key) and data.endswith(key)

    def times(self, lo: int, hi: int) -> KeyRange:
        """Every record with ``lo <= time < hi`` (clamped to the i64 range)."""
        lo, hi = clamp_i64(lo), clamp_i64(hi)
        return KeyRange(self.cf, self.tag + encode_i64(lo), self.tag + encode_i64(hi))

    def since(self, lo: int) -> KeyRange:
        """Every record with ``time >= lo``."""
        return KeyRange(self.cf, self.tag + encode_i64(clamp_i64(lo)), prefix_upper_bound(self.tag))

    def upto(self, hi: int) -> KeyRange:
        """Every record with ``time <= hi``."""
        return KeyRange(self.cf, self.tag + MIN_I64_BYTES, self.tag + encode_i64(clamp_i64(hi + 1)))

    def all(self) -> KeyRange:
        """Every record of this keyspace."""
        return KeyRange(self.cf, self.tag, prefix_upper_bound(self.tag))


class KeyTimeEntry(NamedTuple):
    """A parsed key-time key (after the key part)."""

    time: int
    a: int
    b: int


class KeyTimeKeyspace:
    """``tag + str(key) + i64(time) + i64(a) + i64(b)`` records (see module doc)."""

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes = b"") -> None:
        self.name = name
        self.cf = cf
        self.tag = tag

    def prefix(self, key: EncodedKey) -> bytes:
        """The common prefix of one key's records."""
        return self.tag + key

    def key(self, key: EncodedKey, time: int, a: int, b: int) -> bytes:
        """The store key of one record."""
        return self.tag + key + encode_i64(time) + encode_i64(a) + encode_i64(b)

    def parse(self, data: bytes, key: EncodedKey) -> KeyTimeEntry:
        """The integer parts of a store key of ``key``."""
        pos = len(self.tag) + len(key)
        if len(data) != pos + 3 * I64_WIDTH or data[:pos] != self.tag + key:
            raise _corrupt(self.name, data, ValueError(f"not a record of key {key!r}"))
        return KeyTimeEntry(
            decode_i64(data, pos),
            decode_i64(data, pos + I64_WIDTH),
            decode_i64(data, pos + 2 * I64_WIDTH),
        )

    def times(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        """The records of ``key`` with ``lo <= time < hi`` (clamped to the i64 range)."""
        p = self.tag + key
        return KeyRange(self.cf, p + encode_i64(clamp_i64(lo)), p + encode_i64(clamp_i64(hi)))


# --------------------------------------------------------------------------- per-key layouts
# Key-first records of opaque grouping keys (sessions), and time-bucket indexes of them.

__all__ += [
    "BucketEntry",
    "BucketIndexKeyspace",
    "GroupKeyLayout",
    "KeyFirstEntry",
    "KeyFirstKeyspace",
    "KeyPartition",
]


class KeyPartition(NamedTuple):
    """A parsed grouping key: the key and its input partition (``0`` when not kept)."""

    key: str
    partition: int


class GroupKeyLayout:
    """The key part of per-key records: ``str(key)``, or ``str(key) + i64(partition)``.

    State kept per input partition (e.g. tuple sessions, which count a partition's
    offsets) appends the partition; both forms are prefix-free, so they can be
    followed by further parts, and one key's records of every partition share the
    ``str(key)`` prefix.
    """

    def __init__(self, per_partition: bool) -> None:
        self.per_partition = per_partition

    def encode(self, key: EncodedKey, partition: int) -> EncodedKey:
        """The key part of ``key`` (already :func:`encode_key`-encoded) in ``partition``."""
        return EncodedKey(key + encode_i64(partition)) if self.per_partition else key

    def parse(self, data: bytes) -> KeyPartition:
        """The key and partition of an encoded key part."""
        try:
            key, end = decode_str(data, 0)
            partition = decode_i64(data, end) if self.per_partition else 0
            end += I64_WIDTH if self.per_partition else 0
        except KeyEncodingError as exc:
            raise _corrupt("grouping", data, exc) from exc
        if end != len(data):
            raise _corrupt("grouping", data, ValueError("trailing bytes"))
        return KeyPartition(key, partition)


class KeyFirstEntry(NamedTuple):
    """A parsed key-first key."""

    key: EncodedKey
    time: int


def _i64_parts(times: IntArray) -> list[bytes]:
    data = i64_column(times)
    return [data[i : i + I64_WIDTH] for i in range(0, len(data), I64_WIDTH)]


class KeyFirstKeyspace:
    """``tag + key + i64(time)`` records: one key's records in time order.

    ``key`` is any prefix-free key part (an :data:`EncodedKey`, or a
    :class:`GroupKeyLayout` encoding), so the time is always the last 8 bytes.
    """

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes = b"") -> None:
        self.name = name
        self.cf = cf
        self.tag = tag

    def prefix(self, key: EncodedKey) -> bytes:
        """The common prefix of one key's records."""
        return self.tag + key

    def key(self, key: EncodedKey, time: int) -> bytes:
        """The store key of one record."""
        return self.tag + key + encode_i64(time)

    def keys_of(self, prefixes: Sequence[bytes], ids: IntArray, times: IntArray) -> list[bytes]:
        """Store keys of many records: record ``j`` is of the key with prefix ``prefixes[ids[j]]``.

        ``prefixes`` is a table of :meth:`prefix` values (e.g. per interned key id), so the
        hot path builds each key with one concatenation.
        """
        parts = _i64_parts(times)
        return [prefixes[k] + t for k, t in zip(ids.tolist(), parts, strict=True)]

    def parse(self, data: bytes) -> KeyFirstEntry:
        """The key part and time of a store key."""
        head = len(self.tag)
        if len(data) < head + 1 + I64_WIDTH or not data.startswith(self.tag):
            raise _corrupt(self.name, data, ValueError("unexpected layout"))
        return KeyFirstEntry(
            EncodedKey(data[head:-I64_WIDTH]), decode_i64(data, len(data) - I64_WIDTH)
        )

    def parse_many(self, keys: Sequence[bytes]) -> tuple[list[EncodedKey], IntArray]:
        """Key parts and times (one array) of many store keys."""
        entries = [self.parse(k) for k in keys]
        times = np.fromiter((e.time for e in entries), dtype=np.int64, count=len(entries))
        return [e.key for e in entries], times

    def times(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        """The records of ``key`` with ``lo <= time < hi`` (clamped to the i64 range)."""
        p = self.tag + key
        return KeyRange(self.cf, p + encode_i64(clamp_i64(lo)), p + encode_i64(clamp_i64(hi)))

    def starting_with(self, key: EncodedKey) -> KeyRange:
        """Every record whose key part starts with ``key``.

        With a per-partition :class:`GroupKeyLayout` and ``key`` a plain encoded key:
        the key's records of every partition.
        """
        p = self.tag + key
        return KeyRange(self.cf, p, prefix_upper_bound(p))

    def all(self) -> KeyRange:
        """Every record of this keyspace."""
        return KeyRange(self.cf, self.tag, prefix_upper_bound(self.tag))


class BucketEntry(NamedTuple):
    """A parsed bucket index key."""

    bucket: int
    key: EncodedKey
    time: int


class BucketIndexKeyspace:
    """``tag + i64(bucket) + key + i64(time)``: an index of key-first records by time bucket.

    The entries of a range of buckets are one range (restore what is still open,
    expire what is past retention) while the records stay ordered by key.
    """

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes) -> None:
        self.name = name
        self.cf = cf
        self.tag = tag
        self._head = len(tag) + I64_WIDTH

    def key(self, bucket: int, key: EncodedKey, time: int) -> bytes:
        """The store key of one entry."""
        return self.tag + encode_i64(bucket) + key + encode_i64(time)

    def keys_of(
        self, keys: Sequence[EncodedKey], ids: IntArray, buckets: IntArray, times: IntArray
    ) -> list[bytes]:
        """Store keys of many entries: entry ``j`` is of key ``keys[ids[j]]``."""
        tag = self.tag
        return [
            tag + b + keys[k] + t
            for k, b, t in zip(ids.tolist(), _i64_parts(buckets), _i64_parts(times), strict=True)
        ]

    def parse(self, data: bytes) -> BucketEntry:
        """The bucket, key part and time of a store key."""
        if len(data) < self._head + 1 + I64_WIDTH or not data.startswith(self.tag):
            raise _corrupt(self.name, data, ValueError("unexpected layout"))
        return BucketEntry(
            decode_i64(data, len(self.tag)),
            EncodedKey(data[self._head : -I64_WIDTH]),
            decode_i64(data, len(data) - I64_WIDTH),
        )

    def buckets(self, lo: int, hi: int) -> KeyRange:
        """The entries of buckets ``lo <= bucket < hi`` (clamped to the i64 range)."""
        t = self.tag
        return KeyRange(self.cf, t + encode_i64(clamp_i64(lo)), t + encode_i64(clamp_i64(hi)))

    def since(self, lo: int) -> KeyRange:
        """The entries of buckets ``>= lo``."""
        return KeyRange(self.cf, self.tag + encode_i64(clamp_i64(lo)), prefix_upper_bound(self.tag))


# -- key-first records in numbered slots per key (count windows) ------------------------


class KeySlotEntry(NamedTuple):
    """A parsed key-slot key."""

    key: str
    slot: int


class KeySlotKeyspace:
    """``tag + str(key) + i64(slot)`` records: a key's records in slot order, one range.

    For state a key keeps in a fixed set of numbered slots (a ring), so a record is
    replaced by overwriting its slot rather than deleted.
    """

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes = b"") -> None:
        self.name = name
        self.cf = cf
        self.tag = tag

    def key(self, key: EncodedKey, slot: int) -> bytes:
        """The store key of one record."""
        return self.tag + key + encode_i64(slot)

    def keys(self, keys: Sequence[EncodedKey], slots: Sequence[int]) -> list[bytes]:
        """Store keys of many records (few distinct slots: their encodings are shared)."""
        suffixes = {s: encode_i64(s) for s in dict.fromkeys(slots)}
        tag = self.tag
        return [tag + k + suffixes[s] for k, s in zip(keys, slots, strict=True)]

    def parse(self, data: bytes) -> KeySlotEntry:
        """The key and slot of a store key."""
        try:
            tag, key, slot = decode_key_first_key(data, len(self.tag))
        except KeyEncodingError as exc:
            raise _corrupt(self.name, data, exc) from exc
        if tag != self.tag:
            raise _corrupt(self.name, data, ValueError("unexpected tag"))
        return KeySlotEntry(key, slot)

    def all(self) -> KeyRange:
        """Every record of this keyspace."""
        return KeyRange(self.cf, self.tag, prefix_upper_bound(self.tag))

"""Key-first records of opaque grouping keys (sessions), and time-bucket indexes of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from stores.keys import (
    I64_WIDTH,
    KeyEncodingError,
    decode_i64,
    decode_str,
    encode_i64,
    prefix_upper_bound,
)
from stores.keyspace.base import EncodedKey, IntArray, Keyspace, clamp_i64, corrupt, i64_column
from stores.rocks import ColumnFamily, KeyRange

__all__ = [
    "BucketEntry",
    "BucketIndexKeyspace",
    "GroupKeyLayout",
    "KeyFirstEntry",
    "KeyFirstKeyspace",
    "KeyPartition",
]

# --------------------------------------------------------------------------- per-key layouts
# Key-first records of opaque grouping keys (sessions), and time-bucket indexes of them.


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
            raise corrupt("grouping", data, exc) from exc
        if end != len(data):
            raise corrupt("grouping", data, ValueError("trailing bytes"))
        return KeyPartition(key, partition)


class KeyFirstEntry(NamedTuple):
    """A parsed key-first key."""

    key: EncodedKey
    time: int


def _i64_parts(times: IntArray) -> list[bytes]:
    data = i64_column(times)
    return [data[i : i + I64_WIDTH] for i in range(0, len(data), I64_WIDTH)]


class KeyFirstKeyspace(Keyspace):
    """``tag + key + i64(time)`` records: one key's records in time order.

    ``key`` is any prefix-free key part (an :data:`EncodedKey`, or a
    :class:`GroupKeyLayout` encoding), so the time is always the last 8 bytes.
    """

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
            raise corrupt(self.name, data, ValueError("unexpected layout"))
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


class BucketEntry(NamedTuple):
    """A parsed bucket index key."""

    bucket: int
    key: EncodedKey
    time: int


class BucketIndexKeyspace(Keyspace):
    """``tag + i64(bucket) + key + i64(time)``: an index of key-first records by time bucket.

    The entries of a range of buckets are one range (restore what is still open,
    expire what is past retention) while the records stay ordered by key.
    """

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes) -> None:
        super().__init__(name, cf, tag)
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
            raise corrupt(self.name, data, ValueError("unexpected layout"))
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

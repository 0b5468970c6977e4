"""The keyspaces every layout builds on: encoded keys, i64 columns, the two basic layouts.

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
    decode_str,
    encode_i64,
    encode_str,
    prefix_upper_bound,
)
from stores.rocks import ColumnFamily, KeyRange

__all__ = [
    "EncodedKey",
    "KeyRange",
    "KeyTimeEntry",
    "KeyTimeKeyspace",
    "Keyspace",
    "TimeFirstEntry",
    "TimeFirstKeyspace",
    "clamp_i64",
    "encode_key",
    "i64_column",
    "corrupt",
]

IntArray = npt.NDArray[np.int64]

EncodedKey = NewType("EncodedKey", bytes)
"""A grouping key in its store encoding (:func:`encode_key`)."""

SIGN = np.uint64(1 << 63)
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
    flipped = values.astype(np.int64, copy=False).view(np.uint64) ^ SIGN
    return flipped.astype(">u8").tobytes()


def corrupt(what: str, data: bytes, exc: Exception) -> StateCorruptError:
    """The error of a stored key of keyspace ``what`` that does not parse."""
    return StateCorruptError(f"not a {what} key: {data[:40]!r}: {exc}")


class Keyspace:
    """What every keyspace has: a name (for errors), a column family, and a tag that every
    key of the keyspace starts with (``b""``: the keyspace has its column family alone)."""

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes = b"") -> None:
        self.name = name
        self.cf = cf
        self.tag = tag

    def all(self) -> KeyRange:
        """Every record of this keyspace."""
        return KeyRange(self.cf, self.tag, prefix_upper_bound(self.tag))


class TimeFirstEntry(NamedTuple):
    """A parsed time-first key."""

    time: int
    key: str


class TimeFirstKeyspace(Keyspace):
    """``tag + i64(time) + str(key)`` records in one column family (see module doc)."""

    def __init__(self, name: str, cf: ColumnFamily, tag: bytes) -> None:
        super().__init__(name, cf, tag)
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
            raise corrupt(self.name, data, exc) from exc
        if end != len(data) or not data.startswith(self.tag):
            raise corrupt(self.name, data, ValueError("unexpected layout"))
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
            raise corrupt(self.name, data, exc) from exc

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


class KeyTimeEntry(NamedTuple):
    """A parsed key-time key (after the key part)."""

    time: int
    a: int
    b: int


class KeyTimeKeyspace(Keyspace):
    """``tag + str(key) + i64(time) + i64(a) + i64(b)`` records (see module doc)."""

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
            raise corrupt(self.name, data, ValueError(f"not a record of key {key!r}"))
        return KeyTimeEntry(
            decode_i64(data, pos),
            decode_i64(data, pos + I64_WIDTH),
            decode_i64(data, pos + 2 * I64_WIDTH),
        )

    def times(self, key: EncodedKey, lo: int, hi: int) -> KeyRange:
        """The records of ``key`` with ``lo <= time < hi`` (clamped to the i64 range)."""
        p = self.tag + key
        return KeyRange(self.cf, p + encode_i64(clamp_i64(lo)), p + encode_i64(clamp_i64(hi)))

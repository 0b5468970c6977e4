"""The key schema of every RocksDB store: order-preserving, prefix-free byte encodings.

RocksDB orders keys by plain bytewise comparison (``memcmp``). Every store of the
project therefore encodes its composite keys so that

* **bytes compare as tuples**: for two keys of the same layout,
  ``encode(a) < encode(b)`` exactly when the tuple ``a < b``. A forward iterator then
  visits windows in time order, messages in ``(timestamp, offset)`` order, and so on;
* **prefix scans are exact**: the keys whose tuple starts with a given tuple prefix
  are exactly the keys whose encoding lies in ``[enc(prefix), prefix_upper_bound(enc(
  prefix)))``. No false hit from a longer string that merely shares leading bytes.

The encodings of a single part are:

``int`` (signed 64-bit)
    8 bytes, big-endian, with the sign bit flipped, i.e. ``pack(">Q", x + 2**63)``.
    Flipping the sign bit maps ``[-2**63, 2**63)`` monotonically onto ``[0, 2**64)``,
    and big-endian unsigned bytes compare like the unsigned numbers. (Python integers
    are unbounded two's complement, so ``x ^ (1 << 63)`` is *not* the flipped 64-bit
    pattern for negative ``x``; adding ``2**63`` is.) Fixed width makes it
    self-delimiting.

``str``
    The UTF-8 bytes with each ``0x00`` escaped as ``0x00 0xFF``, followed by the
    terminator ``0x00 0x01``. UTF-8 byte order equals code point order, which is
    Python's ``str`` order. The terminator sorts below every escaped or ordinary
    continuation (``0x00 0x01 < 0x00 0xFF`` and ``0x00 < any other byte``), so a
    string sorts before all its extensions, and no encoding is a prefix of another
    (prefix-free). Strings that cannot be encoded as UTF-8 (lone surrogates) are
    rejected.

``bytes``
    Same escaping and terminator as ``str``, on the raw bytes.

Composite keys are plain concatenations of part encodings. Because every part is
self-delimiting and order preserving, lexicographic order on the concatenation equals
tuple order, and the encoding of a tuple prefix is a byte prefix of the encodings of
exactly the tuples that extend it.

The layouts that combine them are declared in :mod:`stores.keyspace`; this module
keeps the part encodings, :func:`decode_key_first_key` (``tag + str(key) + i64``) and
the equal fields of join keys: ``int`` / ``str`` values, each preceded by a one-byte
type marker (``0x01`` int, ``0x02`` str) so they can be decoded. The marker only
affects ordering *between* an ``int`` and a ``str`` at the same position (every int
sorts before every str, where Python would refuse to compare); among values of the
same type, order is the value order. The field list itself carries no count or
terminator: within one store every key has the same equal-field arity.

All encoding and decoding errors raise :class:`KeyEncodingError`.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from typing import NamedTuple, SupportsIndex, cast

from stores.errors import StoreError

__all__ = [
    "FIELD_INT",
    "FIELD_STR",
    "I64_WIDTH",
    "MAX_I64",
    "MIN_I64",
    "FieldValue",
    "KeyEncodingError",
    "KeyFirstKey",
    "decode_fields",
    "decode_i64",
    "decode_key_first_key",
    "decode_str",
    "encode_fields",
    "encode_i64",
    "encode_str",
    "prefix_upper_bound",
    "ts_range",
]

"""A value that :func:`encode_key` accepts as one key part."""

FieldValue = int | str
"""A value of one equal field in a message key."""

I64_WIDTH = 8
"""Width in bytes of an encoded signed 64-bit integer."""

MIN_I64 = -(1 << 63)
"""Smallest encodable integer."""

MAX_I64 = (1 << 63) - 1
"""Largest encodable integer."""

FIELD_INT = 0x01
"""Type marker preceding an ``int`` equal field."""

FIELD_STR = 0x02
"""Type marker preceding a ``str`` equal field."""

_U64 = struct.Struct(">Q")
_BIAS = 1 << 63
_TERMINATOR = b"\x00\x01"
_ESCAPED_ZERO = b"\x00\xff"
_FIELD_INT_BYTE = bytes((FIELD_INT,))
_FIELD_STR_BYTE = bytes((FIELD_STR,))


class KeyEncodingError(StoreError, ValueError):
    """A value cannot be encoded as a key part, or bytes are not a valid encoded key."""


# --------------------------------------------------------------------------- integers


def _as_i64(x: object, expected: str = "an int") -> int:
    """Validate ``x`` as an encodable integer and return it as a plain ``int``."""
    if isinstance(x, bool):
        raise KeyEncodingError(f"bool is not a valid key part: {x!r}")
    if not hasattr(type(x), "__index__"):  # cheaper than isinstance(x, SupportsIndex)
        raise KeyEncodingError(f"expected {expected} key part, got {type(x).__name__}: {x!r}")
    value = operator.index(cast(SupportsIndex, x))  # plain int from int subclasses, NumPy ints
    if not MIN_I64 <= value <= MAX_I64:
        raise KeyEncodingError(
            f"integer {value} is outside the signed 64-bit range [{MIN_I64}, {MAX_I64}]"
        )
    return value


def encode_i64(x: int) -> bytes:
    """Encode a signed 64-bit integer as 8 order-preserving bytes.

    Big-endian with the sign bit flipped, so bytewise order equals numeric order.
    Raises :class:`KeyEncodingError` for values outside ``[MIN_I64, MAX_I64]``, for
    ``bool`` and for non-integers.
    """
    if type(x) is not int or not MIN_I64 <= x <= MAX_I64:
        x = _as_i64(x)
    return _U64.pack(x + _BIAS)


def decode_i64(b: bytes, pos: int = 0) -> int:
    """Decode the 8-byte integer encoded by :func:`encode_i64` at ``b[pos:pos + 8]``.

    Raises :class:`KeyEncodingError` when fewer than 8 bytes remain at ``pos``.
    """
    if pos < 0 or len(b) - pos < I64_WIDTH:
        raise KeyEncodingError(
            f"truncated i64: need {I64_WIDTH} bytes at position {pos}, key has {len(b)}"
        )
    value: int = _U64.unpack_from(b, pos)[0]
    return value - _BIAS


# ---------------------------------------------------------------- strings and bytes


def _unescape(b: bytes, pos: int) -> tuple[bytes, int]:
    """Undo :func:`_escape` from ``pos``; return the raw bytes and the end position."""
    if pos < 0 or pos > len(b):
        raise KeyEncodingError(f"position {pos} is outside a key of {len(b)} bytes")
    i = b.find(0, pos)
    if i < 0 or i + 1 >= len(b):
        raise KeyEncodingError(f"unterminated string/bytes part starting at position {pos}")
    marker = b[i + 1]
    if marker == 0x01:  # fast path: no embedded zero byte
        return b[pos:i], i + 2
    parts: list[bytes] = []
    start = pos
    while True:
        if marker == 0x01:
            parts.append(b[start:i])
            return b"".join(parts), i + 2
        if marker != 0xFF:
            raise KeyEncodingError(
                f"invalid escape 0x00 0x{marker:02x} at position {i} (expected 0x01 or 0xff)"
            )
        parts.append(b[start : i + 1])
        start = i + 2
        i = b.find(0, start)
        if i < 0 or i + 1 >= len(b):
            raise KeyEncodingError(f"unterminated string/bytes part starting at position {pos}")
        marker = b[i + 1]


def encode_str(s: str) -> bytes:
    """Encode a string as order-preserving, prefix-free bytes.

    UTF-8 with every ``0x00`` escaped as ``0x00 0xFF``, terminated by ``0x00 0x01``.
    Raises :class:`KeyEncodingError` for non-strings and strings that are not valid
    Unicode scalar sequences (lone surrogates).
    """
    try:
        raw = s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KeyEncodingError(f"string is not encodable as UTF-8: {s!r}") from exc
    except AttributeError:
        raise KeyEncodingError(f"expected a str key part, got {type(s).__name__}") from None
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", _ESCAPED_ZERO)
    return raw + _TERMINATOR


def decode_str(b: bytes, pos: int = 0) -> tuple[str, int]:
    """Decode a string encoded by :func:`encode_str` starting at ``pos``.

    Returns the string and the position just after its terminator. Raises
    :class:`KeyEncodingError` on a missing terminator, an invalid escape or invalid
    UTF-8.
    """
    raw, end = _unescape(b, pos)
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise KeyEncodingError(f"invalid UTF-8 in string part at position {pos}") from exc


# ------------------------------------------------------------------ composite keys


def _check_end(data: bytes, pos: int) -> None:
    """Raise unless ``pos`` is the end of ``data``."""
    if pos != len(data):
        raise KeyEncodingError(
            f"{len(data) - pos} trailing byte(s) after position {pos} in a {len(data)}-byte key"
        )


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """Return the smallest byte string greater than every string starting with ``prefix``.

    Trailing ``0xFF`` bytes are stripped and the last remaining byte incremented, e.g.
    ``b"a\\xff"`` gives ``b"b"``. Use it as the exclusive upper bound of a prefix scan
    or range delete. Returns ``None`` when no such bound exists (``prefix`` empty or
    all ``0xFF``): the scan is then unbounded above.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def ts_range(tag_or_prefix: bytes, start_ts: int, end_ts: int) -> tuple[bytes, bytes]:
    """Return ``[lo, hi)`` bounds of the keys ``tag_or_prefix + i64(ts) + ...`` with ts in range.

    Covers exactly the keys with ``start_ts <= ts < end_ts`` whatever follows the
    timestamp. ``end_ts == MAX_I64 + 1`` means unbounded above; ``hi`` is then
    :func:`prefix_upper_bound` of the prefix. When ``end_ts <= start_ts`` the range is
    empty and ``lo == hi``. Raises :class:`KeyEncodingError` for timestamps out of
    range, or for an unbounded range under an empty or all-``0xFF`` prefix (no finite
    upper bound exists).
    """
    lo = tag_or_prefix + encode_i64(start_ts)
    if end_ts <= start_ts:
        return lo, lo
    if end_ts == MAX_I64 + 1:
        hi = prefix_upper_bound(tag_or_prefix)
        if hi is None:
            raise KeyEncodingError(
                f"no finite upper bound for an unbounded ts range under prefix {tag_or_prefix!r}"
            )
        return lo, hi
    return lo, tag_or_prefix + encode_i64(end_ts)


# ------------------------------------------------------------ window meta layouts


class KeyFirstKey(NamedTuple):
    """A decoded ``tag + str(key) + i64(ts)`` key."""

    tag: bytes
    key: str
    ts: int


def _check_prefix_len(data: bytes, n: int) -> None:
    """Raise unless ``data`` is long enough to hold an ``n``-byte prefix."""
    if n < 0 or n > len(data):
        raise KeyEncodingError(f"prefix length {n} does not fit a {len(data)}-byte key")


def decode_key_first_key(data: bytes, tag_len: int = 1) -> KeyFirstKey:
    """Decode a :func:`key_first_key` whose tag is ``tag_len`` bytes long."""
    _check_prefix_len(data, tag_len)
    key, pos = decode_str(data, tag_len)
    ts = decode_i64(data, pos)
    _check_end(data, pos + I64_WIDTH)
    return KeyFirstKey(data[:tag_len], key, ts)


# ---------------------------------------------------------------- message layouts


def encode_fields(fields: Sequence[FieldValue]) -> bytes:
    """Encode equal fields: each as a type marker (0x01 int, 0x02 str) plus its encoding.

    Fields of the same type at a position order by value; an ``int`` sorts before a
    ``str``. The result is a scan prefix for all message keys whose equal fields
    start with ``fields`` in the layouts that begin with ``<equal_flds>``. Raises
    :class:`KeyEncodingError` for ``bool`` or other types.
    """
    out: list[bytes] = []
    for value in fields:
        if isinstance(value, str):
            out.append(_FIELD_STR_BYTE)
            out.append(encode_str(value))
        else:
            if not (type(value) is int and MIN_I64 <= value <= MAX_I64):
                value = _as_i64(value, "an int or str equal-field")
            out.append(_FIELD_INT_BYTE)
            out.append(_U64.pack(value + _BIAS))
    return b"".join(out)


def decode_fields(data: bytes, pos: int = 0, end: int | None = None) -> tuple[FieldValue, ...]:
    """Decode the equal fields encoded by :func:`encode_fields` in ``data[pos:end]``.

    ``end`` defaults to ``len(data)``; the fields must fill the span exactly. Raises
    :class:`KeyEncodingError` on an unknown type marker or a field crossing ``end``.
    """
    stop = len(data) if end is None else end
    if pos < 0 or stop > len(data) or pos > stop:
        raise KeyEncodingError(f"invalid field span [{pos}, {stop}) in a {len(data)}-byte key")
    out: list[FieldValue] = []
    while pos < stop:
        marker = data[pos]
        pos += 1
        if marker == FIELD_INT:
            if stop - pos < I64_WIDTH:
                raise KeyEncodingError(f"truncated int field at position {pos}")
            out.append(decode_i64(data, pos))
            pos += I64_WIDTH
        elif marker == FIELD_STR:
            text, pos = decode_str(data, pos)
            if pos > stop:
                raise KeyEncodingError(f"str field crosses the end of the field span at {stop}")
            out.append(text)
        else:
            raise KeyEncodingError(f"unknown equal-field type marker 0x{marker:02x} at {pos - 1}")
    return tuple(out)

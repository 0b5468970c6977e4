"""Reference key layouts for the tests: the generic composite key, bytes parts, and the
Samza seed's message key matrix spelled out with the part encodings of ``stores.keys``.

Production code builds keys through ``stores.keyspace``; these plain functions are the
oracles its tests compare with (and the objects of the order-preservation proofs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from stores.keys import (
    I64_WIDTH,
    FieldValue,
    KeyEncodingError,
    decode_fields,
    decode_i64,
    decode_str,
    encode_fields,
    encode_i64,
    encode_str,
)

KeyPart = int | str | bytes
_TERMINATOR = b"\x00\x01"


def encode_bytes(data: bytes) -> bytes:
    """Raw bytes, escaped and terminated as :func:`encode_str` does."""
    if not isinstance(data, bytes):
        raise KeyEncodingError(f"expected a bytes key part, got {type(data).__name__}")
    return data.replace(b"\x00", b"\x00\xff") + _TERMINATOR


def decode_bytes(b: bytes, pos: int = 0) -> tuple[bytes, int]:
    """Inverse of :func:`encode_bytes` from ``pos``; the end position."""
    out = bytearray()
    i = pos
    while True:
        j = b.find(0, i)
        if j < 0 or j + 1 >= len(b):
            raise KeyEncodingError(f"unterminated bytes part starting at position {pos}")
        out += b[i:j]
        if b[j + 1] == 0x01:
            return bytes(out), j + 2
        if b[j + 1] != 0xFF:
            raise KeyEncodingError(f"invalid escape at position {j}")
        out.append(0)
        i = j + 2


def _check_end(data: bytes, pos: int) -> None:
    if pos != len(data):
        raise KeyEncodingError(f"{len(data) - pos} trailing byte(s) after position {pos}")


def _check_prefix(data: bytes, n: int) -> None:
    if n < 0 or n > len(data):
        raise KeyEncodingError(f"prefix length {n} does not fit a {len(data)}-byte key")


def encode_key(*parts: KeyPart) -> bytes:
    """A composite key: the concatenation of the parts' encodings."""
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(encode_str(p))
        elif isinstance(p, bytes):
            out.append(encode_bytes(p))
        else:
            out.append(encode_i64(p))
    return b"".join(out)


def decode_key(data: bytes, schema: Sequence[type[KeyPart]]) -> tuple[KeyPart, ...]:
    """Inverse of :func:`encode_key` under ``schema`` (part types)."""
    out: list[KeyPart] = []
    pos = 0
    for kind in schema:
        if kind is int:
            out.append(decode_i64(data, pos))
            pos += I64_WIDTH
        elif kind is str:
            text, pos = decode_str(data, pos)
            out.append(text)
        elif kind is bytes:
            raw, pos = decode_bytes(data, pos)
            out.append(raw)
        else:
            raise KeyEncodingError(f"unsupported schema type {kind!r} (expected int, str or bytes)")
    _check_end(data, pos)
    return tuple(out)


class TimeFirstKey(NamedTuple):
    tag: bytes
    ts: int
    key: str


def time_first_key(tag: bytes, ts: int, key: str) -> bytes:
    return tag + encode_i64(ts) + encode_str(key)


def decode_time_first_key(data: bytes, tag_len: int = 1) -> TimeFirstKey:
    _check_prefix(data, tag_len)
    ts = decode_i64(data, tag_len)
    key, end = decode_str(data, tag_len + I64_WIDTH)
    _check_end(data, end)
    return TimeFirstKey(data[:tag_len], ts, key)


def key_first_key(tag: bytes, key: str, ts: int) -> bytes:
    return tag + encode_str(key) + encode_i64(ts)


class MessageKeyTsOffset(NamedTuple):
    prefix: bytes
    ts: int
    offset: int


class MessageKeyOffset(NamedTuple):
    prefix: bytes
    offset: int


class MessageKeyFieldsTsOffset(NamedTuple):
    prefix: bytes
    fields: tuple[FieldValue, ...]
    ts: int
    offset: int


class MessageKeyTsFieldsOffset(NamedTuple):
    prefix: bytes
    ts: int
    fields: tuple[FieldValue, ...]
    offset: int


def message_key_ts_offset(ts: int, offset: int, *, prefix: bytes = b"") -> bytes:
    return prefix + encode_i64(ts) + encode_i64(offset)


def decode_message_key_ts_offset(data: bytes, *, prefix_len: int = 0) -> MessageKeyTsOffset:
    _check_prefix(data, prefix_len)
    if len(data) - prefix_len < 2 * I64_WIDTH:
        raise KeyEncodingError(f"message key of {len(data)} bytes is too short for ts + offset")
    _check_end(data, prefix_len + 2 * I64_WIDTH)
    ts, offset = decode_i64(data, prefix_len), decode_i64(data, prefix_len + I64_WIDTH)
    return MessageKeyTsOffset(data[:prefix_len], ts, offset)


def message_key_offset(offset: int, *, prefix: bytes = b"") -> bytes:
    return prefix + encode_i64(offset)


def decode_message_key_offset(data: bytes, *, prefix_len: int = 0) -> MessageKeyOffset:
    _check_prefix(data, prefix_len)
    offset = decode_i64(data, prefix_len)
    _check_end(data, prefix_len + I64_WIDTH)
    return MessageKeyOffset(data[:prefix_len], offset)


def message_key_fields_ts_offset(
    fields: Sequence[FieldValue], ts: int, offset: int, *, prefix: bytes = b""
) -> bytes:
    return prefix + encode_fields(fields) + encode_i64(ts) + encode_i64(offset)


def decode_message_key_fields_ts_offset(
    data: bytes, *, prefix_len: int = 0
) -> MessageKeyFieldsTsOffset:
    _check_prefix(data, prefix_len)
    tail = len(data) - 2 * I64_WIDTH
    if tail < prefix_len:
        raise KeyEncodingError(f"message key of {len(data)} bytes is too short for ts + offset")
    fields = decode_fields(data, prefix_len, tail)
    return MessageKeyFieldsTsOffset(
        data[:prefix_len], fields, decode_i64(data, tail), decode_i64(data, tail + I64_WIDTH)
    )


def message_key_ts_fields_offset(
    ts: int, fields: Sequence[FieldValue], offset: int, *, prefix: bytes = b""
) -> bytes:
    return prefix + encode_i64(ts) + encode_fields(fields) + encode_i64(offset)


def decode_message_key_ts_fields_offset(
    data: bytes, *, prefix_len: int = 0
) -> MessageKeyTsFieldsOffset:
    _check_prefix(data, prefix_len)
    tail = len(data) - I64_WIDTH
    if tail < prefix_len + I64_WIDTH:
        raise KeyEncodingError(f"message key of {len(data)} bytes is too short for ts + offset")
    ts = decode_i64(data, prefix_len)
    fields = decode_fields(data, prefix_len + I64_WIDTH, tail)
    return MessageKeyTsFieldsOffset(data[:prefix_len], ts, fields, decode_i64(data, tail))

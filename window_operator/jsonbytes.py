"""Compact JSON bytes that cost their size in memory.

``orjson.dumps`` returns its output buffer shrunk in place: each result keeps about
4 KiB of heap however short the text (10,000 ``orjson.dumps([0.5])`` hold 40 MB; their
copies 0.5 MB). Values that live until a flush (store values, a batch's exchange
column) are written with :func:`json_bytes`, which copies the text into an exact-size
object; a burst of tens of thousands of them otherwise left glibc holding ~100 MB per
flush (RSS 320 MB where the live state needed ~110 with a ``percentile`` job).
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson

__all__ = ["json_bytes", "json_text", "loads_as"]

T = TypeVar("T")
#: What JSON calls the Python types :func:`loads_as` checks for.
_JSON_NAMES: dict[type, str] = {dict: "an object", list: "an array"}


def json_bytes(value: Any, option: int = 0) -> bytes:
    """``orjson.dumps(value, option=option)`` in an exact-size ``bytes``."""
    return bytes(memoryview(orjson.dumps(value, option=option)))


def json_text(value: Any) -> bytes:
    """Compact JSON of a value read from JSON, also one orjson cannot write (an integer
    beyond 64 bits): how a message or a key spells it as its line did."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        import json

        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads_as(data: bytes, kind: type[T], what: str, error: type[Exception]) -> T:
    """``data`` read as JSON of ``kind`` (``dict``, ``list``); else ``error`` naming it as
    ``what`` (a stored value that must be one, a record a caller hands over)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        name = _JSON_NAMES.get(kind, kind.__name__)
        raise error(f"{what} is JSON but not {name}: {data[:60]!r}")
    return value

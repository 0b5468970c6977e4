"""Rejected input records: the exception a decoder raises, and how a reason shows a value.

A decoder (:class:`~window_operator.events.RecordDecoder`, the join's decoder) raises
:class:`RecordRejected` with an :class:`~window_operator.results.ErrorCode` and a reason;
the caller turns it into an error record, whose ``raw`` is :func:`raw_of` the record.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson

from window_operator.errors import WindowOperatorError
from window_operator.results import ErrorCode

__all__ = [
    "MAX_VALUE_DEPTH",
    "MISSING",
    "RecordRejected",
    "check_object_value",
    "non_finite",
    "raw_of",
    "show",
]

#: Values of object-valued fields (``first``, ``collect``, ...) nested deeper than this
#: are rejected: they could not be stored or written as results.
MAX_VALUE_DEPTH = 64


class RecordRejected(WindowOperatorError):
    """An input record that cannot be processed, with the error code and a reason."""

    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Missing:
    __slots__ = ()


#: What a decoder reads for a field the record does not have.
MISSING: Any = _Missing()


def non_finite(name: str, value: float | int) -> str:
    """The reason for a NaN, an infinity or an integer beyond float64 in field ``name``."""
    what = "out of the float64 range" if isinstance(value, int) else f"{value}"
    return (
        f"field {name!r} is {what}: non-finite numbers are rejected "
        "(write null for a missing value)"
    )


def check_object_value(name: str, value: Any) -> None:
    """Reject a non-finite number anywhere in ``value``, or nesting deeper than the limit."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        cls = item.__class__
        if cls is float and item - item != 0.0:
            raise RecordRejected(ErrorCode.NON_FINITE_VALUE, non_finite(name, item))
        if cls is dict or cls is list:
            if depth >= MAX_VALUE_DEPTH:
                raise RecordRejected(
                    ErrorCode.WRONG_TYPE,
                    f"field {name!r} is nested more than {MAX_VALUE_DEPTH} levels deep",
                )
            children = item.values() if cls is dict else item
            stack.extend((child, depth + 1) for child in children)


def show(value: Any) -> str:
    """A value as a reason names it: its JSON kind and its first 60 characters."""
    kind = {str: "string", bool: "boolean", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )
    if value is None:
        return "null"
    if isinstance(value, _Missing):
        return "missing"
    try:
        # the stdlib writes NaN and infinities as the record had them (orjson: null)
        text = _dumps(_head(value, _SHOWN + 1))
    except (ValueError, TypeError, RecursionError):  # a huge integer...
        text = "..."
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{kind} {text}"


#: How many characters of a value a reason shows.
_SHOWN = 60


def _head(value: Any, room: int) -> Any:
    """As much of ``value`` as the first ``room`` characters of its JSON show (a large
    value is not written out whole to be cut): every item, character and level of
    nesting takes at least one of them."""
    if room <= 0:
        return None
    if isinstance(value, str):
        return value[:room]
    if isinstance(value, list):
        return [_head(v, room - 1) for v in value[:room]]
    if isinstance(value, dict):
        items = itertools.islice(value.items(), room)
        return {k[:room] if isinstance(k, str) else k: _head(v, room - 1) for k, v in items}
    return value


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the reason encodes
        return json.dumps(value, separators=(",", ":"))
    return text


def raw_of(record: Any) -> bytes:
    """The bytes of a rejected in-memory record: JSON when it can be, else its repr."""
    try:
        return orjson.dumps(record)
    except orjson.JSONEncodeError:
        try:
            return repr(record).encode("utf-8", "replace")
        except RecursionError:
            return f"<a {type(record).__name__} nested too deeply to show>".encode()

"""JSON message values: exactly one document per payload, parsed with orjson.

The verdict on a payload is that of ``orjson.loads``: UTF-8 only (no byte order mark),
nesting at most 1024 levels deep, nothing but whitespace after the document, integers
beyond 64 bits read as floats. One extension: the literals ``NaN``, ``Infinity`` and
``-Infinity`` (which Python's ``json`` module writes for non-finite floats) are read as
the float they name, so that the record decoder can reject them where the job reads
them with a precise code (``NON_FINITE_VALUE`` in a value field, ``BAD_TIMESTAMP``,
``BAD_KEY``) instead of a parse error; in a field the job does not read they are
ignored like any other value there. Every path that decodes JSON goes through
:func:`parse_json` (or proves it would give the same answer), so a payload gets the same
verdict whatever batch it arrives in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

import orjson

from window_operator.codecs.decoding import DECODE_FAILED, NULL_PAYLOAD
from window_operator.errors import WindowOperatorError
from window_operator.results import ErrorCode

__all__ = ["JSON_WHITESPACE", "InvalidJsonError", "JsonPayloadDecoder", "parse_json"]

# A JSON string (skipped as a whole) or a non-finite literal outside strings (group 1).
_STRING_OR_NON_FINITE: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|(-?Infinity|NaN)', re.DOTALL)
_INT64_MIN: Final = -(2**63)
#: What JSON takes as white space around a document (``bytes.strip()`` would also take
#: the form feed and the vertical tab, which make a Kafka value ``BAD_JSON``).
JSON_WHITESPACE: Final = b" \t\r\n"
_UINT64_END: Final = 2**64


class InvalidJsonError(WindowOperatorError, ValueError):
    """A payload that is not one JSON document; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_json(payload: bytes) -> Any:
    """The JSON document of ``payload``; raises :class:`InvalidJsonError` (see the module)."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        error = exc
    value = _with_non_finite_literals(payload)
    if value is DECODE_FAILED:
        raise InvalidJsonError(_reason(payload, error))
    return value


def _with_non_finite_literals(payload: bytes) -> Any:
    """The document read with NaN/Infinity literals, or DECODE_FAILED.

    The payload must be valid JSON (by orjson's rules) once every literal outside a
    string is replaced by ``null``; then the standard library parses it, with integers
    read as orjson reads them, so the only difference is the literals' values.
    """
    if b"NaN" not in payload and b"Infinity" not in payload:
        return DECODE_FAILED
    found = False

    def to_null(match: re.Match[bytes]) -> bytes:
        nonlocal found
        if match.group(1) is None:
            return match.group(0)
        found = True
        return b"null"

    replaced = _STRING_OR_NON_FINITE.sub(to_null, payload)
    if not found:
        return DECODE_FAILED
    try:
        orjson.loads(replaced)
        return json.loads(payload.decode(), parse_int=_orjson_int)
    except (orjson.JSONDecodeError, ValueError, RecursionError):
        # RecursionError: the standard library nests less deeply than orjson
        return DECODE_FAILED


def _orjson_int(text: str) -> int | float:
    value = int(text)
    return value if _INT64_MIN <= value < _UINT64_END else float(text)


def _reason(payload: bytes, error: orjson.JSONDecodeError) -> str:
    if not payload.strip(JSON_WHITESPACE):
        return "invalid JSON: the payload is empty (no document)"
    try:
        payload.decode()
    except UnicodeDecodeError as exc:
        return f"invalid JSON: not valid UTF-8 (byte 0x{payload[exc.start]:02x} at {exc.start})"
    return f"invalid JSON: {error}"


class JsonPayloadDecoder:
    """JSON message values (:func:`parse_json`).

    Any JSON document is returned as parsed, objects or not: the
    :class:`~window_operator.events.RecordDecoder` rejects non-objects with
    ``NOT_AN_OBJECT``. Failures: null payloads and payloads that are not one document.
    """

    @property
    def error_code(self) -> ErrorCode:
        """``BAD_JSON``."""
        return ErrorCode.BAD_JSON

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Parse each payload as JSON; see :meth:`PayloadDecoder.decode`."""
        records: list[Any] = []
        failures: list[tuple[int, str]] = []
        loads = orjson.loads
        append = records.append
        for i, payload in enumerate(payloads):
            if payload is None:
                append(DECODE_FAILED)
                failures.append((i, NULL_PAYLOAD))
                continue
            try:
                append(loads(payload))
            except orjson.JSONDecodeError:
                try:
                    append(parse_json(payload))
                except InvalidJsonError as exc:
                    append(DECODE_FAILED)
                    failures.append((i, exc.reason))
        return records, failures

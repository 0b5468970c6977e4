"""JSON message values: one document per payload, parsed with orjson."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from window_operator.codecs.decoding import DECODE_FAILED, NULL_PAYLOAD
from window_operator.results import ErrorCode

__all__ = ["JsonPayloadDecoder"]


class JsonPayloadDecoder:
    """JSON message values (orjson).

    Any JSON document is returned as parsed, objects or not: the
    :class:`~window_operator.events.RecordDecoder` rejects non-objects with
    ``NOT_AN_OBJECT``. Failures: null payloads and text that is not JSON.
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
            except orjson.JSONDecodeError as exc:
                append(DECODE_FAILED)
                failures.append((i, f"invalid JSON: {exc}"))
        return records, failures

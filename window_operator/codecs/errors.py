"""Error records: the Kafka record of a rejected input, and its one-line JSON form.

:func:`encode_error` follows the Kafka Connect dead-letter-queue convention: the original
key and value bytes, and the reason in headers; :func:`decode_error` reads it back, and
:func:`error_json` is its one-line JSON form.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Final

import orjson

from window_operator.eventkey import KeyFormat, kafka_key_value
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "HEADER_ERROR_CODE",
    "HEADER_ERROR_REASON",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_TIMESTAMP",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_INPUT",
    "HEADER_SOURCE_TOPIC",
    "decode_error",
    "encode_error",
    "error_json",
]

#: Header names of an error record (Kafka Connect dead-letter-queue style), UTF-8 values.
HEADER_ERROR_CODE: Final = "error.code"
HEADER_ERROR_REASON: Final = "error.reason"
HEADER_SOURCE_TOPIC: Final = "source.topic"
HEADER_SOURCE_INPUT: Final = "source.input"
HEADER_SOURCE_PARTITION: Final = "source.partition"
HEADER_SOURCE_OFFSET: Final = "source.offset"
HEADER_SOURCE_TIMESTAMP: Final = "source.timestamp"


def encode_error(
    err: ErrorRecord, *, key: bytes | None = None
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """The errors-topic record of a rejected input: ``(key, value, headers)``.

    Key and value are the original message's bytes (``key`` when the caller knows it,
    ``err.raw``), so the record can be replayed as is. Headers, UTF-8: ``error.code``,
    ``error.reason`` and, when known, ``source.input`` (a join's input name),
    ``source.topic``, ``source.partition``, ``source.offset`` and ``source.timestamp``
    (the original record's Kafka timestamp; a header whose value is unknown is left out).
    """
    headers: list[tuple[str, bytes]] = [
        (HEADER_ERROR_CODE, err.code.value.encode()),
        (HEADER_ERROR_REASON, err.reason.encode()),
    ]
    if err.source is not None:
        headers.append((HEADER_SOURCE_INPUT, err.source.encode()))
    if err.topic is not None:
        headers.append((HEADER_SOURCE_TOPIC, err.topic.encode()))
    if err.partition is not None:
        headers.append((HEADER_SOURCE_PARTITION, str(err.partition).encode()))
    if err.offset is not None:
        headers.append((HEADER_SOURCE_OFFSET, str(err.offset).encode()))
    if err.timestamp is not None:
        headers.append((HEADER_SOURCE_TIMESTAMP, str(err.timestamp).encode()))
    return key, err.raw, headers


def decode_error(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> ErrorRecord:
    """The error record of an errors-topic record (:func:`encode_error`'s inverse).

    Raises :class:`ValueError` for a record without a known ``error.code`` header (not
    an error record of this product).
    """
    text = {
        k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        for k, v in headers or ()
        if v is not None
    }
    code = ErrorCode(text.get(HEADER_ERROR_CODE, ""))

    def number(name: str) -> int | None:
        return int(text[name]) if name in text else None

    return ErrorRecord(
        code,
        text.get(HEADER_ERROR_REASON, ""),
        number(HEADER_SOURCE_PARTITION),
        number(HEADER_SOURCE_OFFSET),
        value,
        text.get(HEADER_SOURCE_TOPIC),
        key,
        text.get(HEADER_SOURCE_INPUT),
        number(HEADER_SOURCE_TIMESTAMP),
    )


def error_json(err: ErrorRecord, key_format: KeyFormat = "string") -> bytes:
    """One JSON object for an error record read from Kafka (``window-operator read
    --errors``; no trailing newline).

    :meth:`ErrorRecord.to_dict <window_operator.results.ErrorRecord.to_dict>` (the form
    of ``simulate --errors``), plus a join's ``source`` (the input that rejected it)
    when known, ``raw_base64``, the exact original bytes, always (``raw`` is their
    UTF-8 reading with replacement characters, lossy for binary payloads such as Avro),
    and the input record's Kafka key: ``kafka_key``, the value it stands for in the
    input's ``key_format`` (the field ``simulate`` reads it from; ``null`` where the
    format does not read it), ``kafka_key_base64``, its exact bytes, and ``wall_ms``, its
    Kafka timestamp (the field ``simulate`` reads that from; ``null``: not known).
    """
    doc = err.to_dict()
    if err.source is not None:
        doc["source"] = err.source
    doc["raw_base64"] = None if err.raw is None else base64.b64encode(err.raw).decode()
    key = err.key
    doc["kafka_key"] = None if key is None else kafka_key_value(key, key_format)
    doc["kafka_key_base64"] = None if key is None else base64.b64encode(key).decode()
    doc["wall_ms"] = err.timestamp
    return orjson.dumps(doc)

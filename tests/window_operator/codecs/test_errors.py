"""Error records: the dead-letter-queue record and the one-line JSON form."""

from __future__ import annotations

import base64

import orjson

from window_operator.codecs import (
    encode_error,
    error_json,
)
from window_operator.results import ErrorCode, ErrorRecord


def test_error_record_follows_the_dead_letter_queue_convention() -> None:
    err = ErrorRecord(
        code=ErrorCode.BAD_AVRO,
        reason="invalid Avro: unexpected end of data (3-byte body)",
        partition=4,
        offset=1234,
        raw=b"\x00\x00\x00\x00\x07\xff",
        topic="clicks",
    )
    key, value, headers = encode_error(err, key=b"page-key")
    assert key == b"page-key"
    assert value == err.raw
    assert headers == [
        ("error.code", b"BAD_AVRO"),
        ("error.reason", b"invalid Avro: unexpected end of data (3-byte body)"),
        ("source.topic", b"clicks"),
        ("source.partition", b"4"),
        ("source.offset", b"1234"),
    ]
    doc = orjson.loads(error_json(err))
    assert doc["code"] == "BAD_AVRO" and doc["offset"] == 1234 and doc["topic"] == "clicks"
    assert base64.b64decode(doc["raw_base64"]) == err.raw


def test_error_record_with_unknown_source_and_no_payload() -> None:
    err = ErrorRecord(code=ErrorCode.BAD_JSON, reason="null payload (a tombstone) ü")
    key, value, headers = encode_error(err)
    assert key is None and value is None
    assert headers == [
        ("error.code", b"BAD_JSON"),
        ("error.reason", "null payload (a tombstone) ü".encode()),
    ]
    doc = orjson.loads(error_json(err))
    assert doc["raw"] is None and doc["raw_base64"] is None and doc["partition"] is None
    assert doc["kafka_key"] is None and doc["kafka_key_base64"] is None


def test_an_error_line_shows_the_records_kafka_key() -> None:
    """A job keyed by the Kafka record key rejects records for their key (``BAD_KEY``,
    ``MISSING_KEY``): the line shows it, as text where it is UTF-8, and its bytes."""
    for key, text in [(b"user-\xc3\xa9", "user-é"), (b"\xff\x00", None), (b"", "")]:
        err = ErrorRecord(ErrorCode.BAD_KEY, "r", 0, 1, b"{}", "in", key)
        doc = orjson.loads(error_json(err))
        assert doc["kafka_key"] == text and base64.b64decode(doc["kafka_key_base64"]) == key

"""Error records: the dead-letter-queue record and the one-line JSON form."""

from __future__ import annotations

import base64

import orjson

from window_operator.codecs import (
    decode_error,
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


def test_an_error_lines_kafka_key_is_the_value_simulate_reads_in_the_key_format() -> None:
    """Fed back to ``simulate``, the line's ``kafka_key`` stands for the same record key:
    an integer for ``long`` and ``int``, hexadecimal text for ``bytes``; ``null`` where
    the format does not read the key."""
    cases = [
        ("long", (1234).to_bytes(8, "big"), 1234),
        ("long", b"\x05", None),
        ("int", (-5).to_bytes(4, "big", signed=True), -5),
        ("bytes", b"\x00\xff", "00ff"),
        ("string", b"\x00\xff", None),
    ]
    for key_format, key, value in cases:
        err = ErrorRecord(ErrorCode.BAD_KEY, "r", 0, 1, b"{}", "in", key)
        doc = orjson.loads(error_json(err, key_format))  # type: ignore[arg-type]
        assert doc["kafka_key"] == value, (key_format, key)
        assert base64.b64decode(doc["kafka_key_base64"]) == key


def test_an_error_records_kafka_timestamp_goes_with_it() -> None:
    """The rejected record's Kafka timestamp (the event time of a ``timestamp_from:
    kafka`` input) travels in a header, and ``read --errors`` gives it as ``wall_ms``, the
    field ``simulate`` reads it from."""
    err = ErrorRecord(ErrorCode.BAD_KEY, "r", 0, 1, b"{}", "in", b"k", timestamp=1_700_000_000_123)
    key, value, headers = encode_error(err, key=err.key)
    assert ("source.timestamp", b"1700000000123") in headers
    back = decode_error(key, value, headers)
    assert back == err
    assert orjson.loads(error_json(back))["wall_ms"] == 1_700_000_000_123
    unknown = decode_error(*encode_error(ErrorRecord(ErrorCode.BAD_JSON, "r")))
    assert unknown.timestamp is None and orjson.loads(error_json(unknown))["wall_ms"] is None

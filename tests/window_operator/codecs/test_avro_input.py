"""Avro input payloads: schemaless and Confluent wire, logical types, schema files."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from codeckit import CLICK_SCHEMA, T0, T0_DT, avro_body, click_decoder, confluent, write_schema

from window_operator.codecs import (
    DECODE_FAILED,
    AvroPayloadDecoder,
    AvroSchemaError,
    JsonPayloadDecoder,
    decode_payloads,
    payload_decoder_for,
)
from window_operator.codecs.avro_input import avro_payload_encoder
from window_operator.config import parse_config
from window_operator.results import ErrorCode

REPO = Path(__file__).resolve().parents[3]


def test_avro_schemaless_round_trip_with_timestamp_millis(tmp_path: Path) -> None:
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA))
    events = [
        {"page": "/home", "ts": T0_DT, "latency_ms": 12.5},  # written from a datetime
        {"page": "/cart", "ts": T0 + 1, "latency_ms": None},  # written from epoch ms
        {"page": "/ü", "ts": datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC), "latency_ms": -0.0},
    ]
    records, failures = decoder.decode([avro_body(CLICK_SCHEMA, e) for e in events])
    assert failures == []
    assert records == [
        {"page": "/home", "ts": T0, "latency_ms": 12.5},
        {"page": "/cart", "ts": T0 + 1, "latency_ms": None},
        {"page": "/ü", "ts": -1000, "latency_ms": -0.0},
    ]
    assert all(type(r["ts"]) is int for r in records)
    assert decoder.schema_id is None


def test_avro_confluent_wire_round_trip_records_first_schema_id(tmp_path: Path) -> None:
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA), wire="confluent")
    first = {"page": "/a", "ts": T0_DT, "latency_ms": 1.0}
    second = {"page": "/b", "ts": T0 + 5, "latency_ms": 2.0}
    records, failures = decoder.decode(
        [
            confluent(42, avro_body(CLICK_SCHEMA, first)),
            confluent(70000, avro_body(CLICK_SCHEMA, second)),  # another id: still accepted
        ]
    )
    assert failures == []
    assert records == [
        {"page": "/a", "ts": T0, "latency_ms": 1.0},
        {"page": "/b", "ts": T0 + 5, "latency_ms": 2.0},
    ]
    assert decoder.schema_id == 42


def test_avro_confluent_framing_failures_keep_good_messages(tmp_path: Path) -> None:
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA), wire="confluent")
    good = avro_body(CLICK_SCHEMA, {"page": "/a", "ts": T0, "latency_ms": 3.0})
    payloads: list[bytes | None] = [
        b"\x01" + (7).to_bytes(4, "big") + good,  # wrong magic byte
        confluent(7, good),
        b"\x00\x00\x01",  # shorter than the header
        None,
        confluent(7, good[:-4]),  # truncated body
        good,  # schemaless on a confluent topic: first byte is the string length
        confluent(9, good),
    ]
    records, failures = decoder.decode(payloads)
    reasons = dict(failures)
    assert sorted(reasons) == [0, 2, 3, 4, 5]
    assert "magic byte is 0x01, expected 0x00" in reasons[0]
    assert "3 byte(s), shorter than the 5-byte header" in reasons[2]
    assert "tombstone" in reasons[3]
    assert reasons[4].startswith("invalid Avro: ") and "truncated" in reasons[4]
    assert "magic byte" in reasons[5]
    expected = {"page": "/a", "ts": T0, "latency_ms": 3.0}
    assert records[1] == expected and records[6] == expected
    assert all(records[i] is DECODE_FAILED for i in reasons)
    assert decoder.schema_id == 7


def test_avro_corrupt_and_truncated_bodies_are_failures(tmp_path: Path) -> None:
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA))
    good = avro_body(CLICK_SCHEMA, {"page": "/home", "ts": T0, "latency_ms": 1.5})
    bad_utf8 = avro_body(CLICK_SCHEMA, {"page": "/abc", "ts": T0, "latency_ms": None})
    bad_utf8 = bad_utf8[:2] + b"\xc3\x28" + bad_utf8[4:]  # same length, invalid UTF-8
    payloads: list[bytes | None] = [
        good[:3],
        good,
        good[:-3],
        b"",
        bad_utf8,
        good + b"\x00\x00",  # left-over bytes: written with another schema
        b"\x80" * 12,  # a varint that never ends
        b"\x7f" + good[1:],  # negative string length
        good,
    ]
    records, failures = decoder.decode(payloads)
    reasons = dict(failures)
    assert sorted(reasons) == [0, 2, 3, 4, 5, 6, 7]
    assert all(reason.startswith("invalid Avro: ") for reason in reasons.values())
    assert "truncated" in reasons[0] and "truncated" in reasons[2] and "truncated" in reasons[3]
    assert "UTF-8" in reasons[4]
    assert "2 byte(s) left over" in reasons[5]
    expected = {"page": "/home", "ts": T0, "latency_ms": 1.5}
    assert records[1] == expected and records[8] == expected


@pytest.mark.parametrize("wire", ["schemaless", "confluent"])
def test_a_json_value_on_an_avro_topic_is_told_as_json_with_what_does_not_fit(
    tmp_path: Path, wire: str
) -> None:
    """``produce`` writes a line that does not fit the schema as it is (JSON). The job
    said "unexpected end of data: the payload is truncated or corrupt", or on a
    Confluent topic "magic byte is 0x7b ... use input.avro_wire: schemaless", which
    would not help; ``simulate`` named the field."""
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA), wire=wire)  # type: ignore[arg-type]
    misfit = b'{"page": "/a", "ts": 1700000000000, "latency_ms": "lots"}'
    fits = b' {"page": "/a", "ts": 1700000000000, "latency_ms": 1.5}'
    records, failures = decoder.decode([misfit, fits, b"{not json", b"[1]"])
    reasons = dict(failures)
    assert sorted(reasons) == [0, 1, 2, 3]
    assert reasons[0].startswith(
        "the value is JSON text, not Avro; as a record it does not fit the input's Avro "
        "schema either (Click.latency_ms is "
    )
    assert reasons[1].startswith("the value is JSON text, not Avro (it holds a record")
    assert not reasons[2].startswith("the value is JSON") and not reasons[3].startswith(
        "the value is JSON"
    )
    if wire == "confluent":  # before: "magic byte is 0x5b ... use avro_wire: schemaless"
        assert reasons[3] == (
            "invalid Confluent wire format: the value is text ('[1]'), not Avro (a topic of "
            "JSON values is read with format: json)"
        )


def test_decode_payloads_avro_builds_bad_avro_errors_with_raw_bytes(tmp_path: Path) -> None:
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA), wire="confluent")
    ok = confluent(1, avro_body(CLICK_SCHEMA, {"page": "/a", "ts": T0, "latency_ms": 2.0}))
    far = confluent(1, avro_body(CLICK_SCHEMA, {"page": "/b", "ts": 2**62, "latency_ms": 1.0}))
    payloads: list[bytes | None] = [b"\x05junk", ok, far, None, ok[:-1]]
    result = decode_payloads(
        payloads,
        decoder,
        click_decoder(),
        partitions=[0, 1, 2, 3, 4],
        offsets=[100, 101, 102, 103, 104],
        topic="clicks",
    )
    assert result.kept == [1]
    assert result.batch.keys == ["/a"]
    assert result.batch.ts.tolist() == [T0]
    assert result.batch.partition.tolist() == [1]
    codes = [(e.offset, e.code) for e in result.errors]
    assert codes == [
        (100, ErrorCode.BAD_AVRO),
        (102, ErrorCode.BAD_TIMESTAMP),
        (103, ErrorCode.BAD_AVRO),
        (104, ErrorCode.BAD_AVRO),
    ]
    assert [e.raw for e in result.errors] == [payloads[0], payloads[2], None, payloads[4]]
    assert [e.partition for e in result.errors] == [0, 2, 3, 4]
    assert all(e.topic == "clicks" for e in result.errors)


def test_avro_logical_types_become_json_native_values(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "Everything",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "nanos", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "blob", "type": "bytes"},
            {
                "name": "nested",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Inner",
                        "fields": [
                            {
                                "name": "at",
                                "type": [
                                    "null",
                                    {"type": "long", "logicalType": "timestamp-millis"},
                                ],
                            }
                        ],
                    },
                },
            },
        ],
    }
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    record = {
        "k": "x",
        "micros": datetime(2023, 11, 14, 22, 13, 20, 123999, tzinfo=UTC),
        "local": datetime(2023, 11, 14, 22, 13, 20, 123000),
        "nanos": T0 * 1_000_000 + 999_999,
        "price": Decimal("12.34"),
        "day": date(2024, 2, 29),
        "id": ident,
        "blob": b"\x00\xffA",
        "nested": [{"at": T0}, {"at": None}],
    }
    decoder = AvroPayloadDecoder(write_schema(tmp_path, schema, "everything.avsc"))
    records, failures = decoder.decode([avro_body(schema, record)])
    assert failures == []
    assert records[0] == {
        "k": "x",
        "micros": T0,  # floored to milliseconds
        "local": T0,
        "nanos": T0 * 1_000_000 + 999_999,  # a count of ns (read with timestamp_unit: ns)
        "price": 12.34,
        "day": "2024-02-29",
        "id": str(ident),
        "blob": "\x00\xffA",
        "nested": [{"at": T0}, {"at": None}],
    }
    orjson.dumps(records[0])  # JSON-native throughout


def test_payload_decoder_for_the_job_config(tmp_path: Path) -> None:
    write_schema(tmp_path, CLICK_SCHEMA)
    base = {
        "job": "clicks",
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [{"name": "n", "op": "count"}],
    }
    json_cfg = parse_config(
        {**base, "input": {"key": "page", "timestamp": "ts"}}, base_dir=tmp_path
    )
    assert isinstance(payload_decoder_for(json_cfg), JsonPayloadDecoder)
    avro_cfg = parse_config(
        {
            **base,
            "input": {
                "format": "avro",
                "avro_schema": "click.avsc",
                "avro_wire": "confluent",
                "key": "page",
                "timestamp": "ts",
            },
        },
        base_dir=tmp_path,
    )
    decoder = payload_decoder_for(avro_cfg)
    assert isinstance(decoder, AvroPayloadDecoder)
    assert decoder.wire == "confluent" and decoder.schema_path == tmp_path / "click.avsc"
    assert decoder.error_code is ErrorCode.BAD_AVRO
    body = avro_body(CLICK_SCHEMA, {"page": "/a", "ts": T0, "latency_ms": None})
    assert decoder.decode([confluent(3, body)]) == (
        [{"page": "/a", "ts": T0, "latency_ms": None}],
        [],
    )


def test_example_click_schema_decodes_clicks() -> None:
    path = REPO / "config" / "schemas" / "click.avsc"
    decoder = AvroPayloadDecoder(path)
    assert decoder.schema["name"] == "Click"
    body = avro_body(decoder.schema, {"page": "/home", "ts": T0_DT, "latency_ms": 42.0})
    assert decoder.decode([body]) == ([{"page": "/home", "ts": T0, "latency_ms": 42.0}], [])


def test_unusable_schema_files_raise_at_construction(tmp_path: Path) -> None:
    (tmp_path / "broken.avsc").write_text("{not json")
    with pytest.raises(AvroSchemaError, match="not JSON"):
        AvroPayloadDecoder(tmp_path / "broken.avsc")
    write_schema(tmp_path, {"type": "record", "name": "R", "fields": [{"name": "x"}]}, "bad.avsc")
    with pytest.raises(AvroSchemaError, match="invalid Avro schema"):
        AvroPayloadDecoder(tmp_path / "bad.avsc")
    with pytest.raises(AvroSchemaError, match="cannot read"):
        AvroPayloadDecoder(tmp_path / "missing.avsc")


@pytest.mark.parametrize(
    "record",
    [
        {"page": "/a", "ts": True, "latency_ms": 1.0},  # fastavro alone wrote 1
        {"page": "/a", "ts": -0.5, "latency_ms": 1.0},  # ... and 0 (the job floors: -1)
        {"page": "/a", "ts": T0, "latency_ms": True},
        {"page": 7, "ts": T0, "latency_ms": 1.0},
    ],
)
def test_the_encoder_refuses_a_record_that_does_not_fit_the_schema(
    tmp_path: Path, record: dict[str, object]
) -> None:
    """``produce`` writes such a line as it is, where the job rejects it: the encoder
    must not turn it into another valid record."""
    encode = avro_payload_encoder(write_schema(tmp_path, CLICK_SCHEMA))
    with pytest.raises(ValueError, match="the schema has"):
        encode(record)


def test_the_encoder_writes_what_the_decoder_reads(tmp_path: Path) -> None:
    schema = write_schema(tmp_path, CLICK_SCHEMA)
    encode = avro_payload_encoder(schema, "confluent")
    record = {"page": "/a", "ts": T0, "latency_ms": 3}  # an integer for a double fits
    records, failures = AvroPayloadDecoder(schema, wire="confluent").decode([encode(record)])
    assert failures == [] and records == [{"page": "/a", "ts": T0, "latency_ms": 3.0}]


def test_a_record_nested_too_deeply_to_write_does_not_fit(tmp_path: Path) -> None:
    """fastavro's validation recurses: past ~1,000 levels (JSON allows 1,024) it raised
    RecursionError, which ended ``produce`` and ``simulate``."""
    nxt = {"name": "next", "type": ["null", "Node"]}
    node = {"type": "record", "name": "Node", "fields": [nxt]}
    encode = avro_payload_encoder(write_schema(tmp_path, node))
    record: dict[str, object] | None = None
    for _ in range(2_000):
        record = {"next": record}
    with pytest.raises(ValueError, match="nested too deeply"):
        encode(record)
    with pytest.raises(ValueError, match="the record is array"):
        encode([1, 2])


def test_a_confluent_framed_value_read_as_schemaless_says_to_set_avro_wire(
    tmp_path: Path,
) -> None:
    """The default ``avro_wire: schemaless`` over a topic written by a Confluent
    serializer (magic byte 0, 4-byte schema id, body) rejects every record: the reason
    names the wire format to set, not a schema mismatch."""
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA))  # schemaless
    good = avro_body(CLICK_SCHEMA, {"page": "/a", "ts": T0, "latency_ms": 3.0})
    truncated = confluent(7, good)[:-3]  # framed, but no record after the header either
    records, failures = decoder.decode([confluent(7, good), good, truncated])
    reasons = dict(failures)
    assert sorted(reasons) == [0, 2]
    assert reasons[0].startswith("invalid Avro: ")
    assert "Confluent wire format" in reasons[0] and "schema id 7" in reasons[0]
    assert "input.avro_wire: confluent" in reasons[0]
    assert "Confluent" not in reasons[2]  # a framed value that does not read: no hint
    assert records[1] == {"page": "/a", "ts": T0, "latency_ms": 3.0}


def test_a_record_of_another_schema_that_runs_out_names_that_cause(tmp_path: Path) -> None:
    """A body written with another (shorter) schema runs off its end: the reason names
    another schema as a cause, not only truncation."""
    decoder = AvroPayloadDecoder(write_schema(tmp_path, CLICK_SCHEMA))
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    _, failures = decoder.decode([avro_body(other, {"x": 7})])
    assert len(failures) == 1 and "another schema" in failures[0][1]

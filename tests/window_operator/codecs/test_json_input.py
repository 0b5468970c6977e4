"""JSON input payloads: parsing one by one, failures as data, decode_payloads."""

from __future__ import annotations

import numpy as np
import orjson
from codeckit import click_decoder

from window_operator.codecs import (
    DECODE_FAILED,
    JsonPayloadDecoder,
    decode_payloads,
)
from window_operator.results import ErrorCode


def test_json_payloads_parse_one_by_one_with_failures_as_data() -> None:
    payloads: list[bytes | None] = [
        b'{"page": "/a", "ts": 1}',
        b"[1, 2]",
        b'{"page": ',
        None,
        b"",
        b'{"page": "/b", "ts": 2, "latency_ms": null}',
    ]
    records, failures = JsonPayloadDecoder().decode(payloads)
    assert records[0] == {"page": "/a", "ts": 1}
    assert records[1] == [1, 2]  # passed through: the record decoder rejects it
    assert records[2] is DECODE_FAILED and records[3] is DECODE_FAILED
    assert records[4] is DECODE_FAILED
    assert records[5] == {"page": "/b", "ts": 2, "latency_ms": None}
    assert [i for i, _ in failures] == [2, 3, 4]
    assert failures[0][1].startswith("invalid JSON: ")
    assert "null payload" in failures[1][1] and "tombstone" in failures[1][1]
    assert failures[2][1].startswith("invalid JSON: ")


def test_decode_payloads_json_keeps_good_rows_and_orders_errors() -> None:
    payloads: list[bytes | None] = [
        b'{"page": "/a", "ts": 1000, "latency_ms": 1.5}',
        b"[1, 2]",
        b"{oops",
        None,
        b'{"page": "/b", "latency_ms": 2}',
        b'{"page": "/c", "ts": 3000, "latency_ms": null}',
    ]
    result = decode_payloads(
        payloads,
        JsonPayloadDecoder(),
        click_decoder(),
        partitions=[3] * 6,
        offsets=[10, 11, 12, 13, 14, 15],
        topic="clicks",
    )
    assert result.kept == [0, 5]
    assert result.batch.keys == ["/a", "/c"]
    assert result.batch.ts.tolist() == [1000, 3000]
    assert result.batch.offset.tolist() == [10, 15]
    lat = result.batch.numeric["latency_ms"]
    assert lat[0] == 1.5 and np.isnan(lat[1])
    errors = result.errors
    assert [e.code for e in errors] == [
        ErrorCode.NOT_AN_OBJECT,
        ErrorCode.BAD_JSON,
        ErrorCode.BAD_JSON,
        ErrorCode.MISSING_TIMESTAMP,
    ]
    assert [e.offset for e in errors] == [11, 12, 13, 14]
    assert [e.raw for e in errors] == [payloads[1], payloads[2], None, payloads[4]]
    assert all(e.partition == 3 and e.topic == "clicks" for e in errors)
    assert errors[1].reason.startswith("invalid JSON: ")
    assert "tombstone" in errors[2].reason


def test_decode_payloads_without_failures_matches_decode_records() -> None:
    payloads: list[bytes | None] = [b'{"page": "/a", "ts": 1, "latency_ms": 1}', b"{}"]
    result = decode_payloads(payloads, JsonPayloadDecoder(), click_decoder())
    direct = click_decoder().decode_records(
        [orjson.loads(p) for p in payloads if p is not None], raws=payloads
    )
    assert result.kept == direct.kept == [0]
    assert [e.code for e in result.errors] == [ErrorCode.MISSING_KEY]
    assert result.errors == direct.errors


# ---------------------------------------------------------------------------------------
# Avro input
# ---------------------------------------------------------------------------------------

"""Helpers shared by the codec tests: Avro schemas and bodies, a click decoder."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import orjson

from window_operator.config import JobConfig, parse_config
from window_operator.events import RecordDecoder

CLICK_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "latency_ms", "type": ["null", "double"]},
    ],
}
T0 = 1_700_000_000_123  # epoch ms
T0_DT = datetime.fromtimestamp(T0 / 1000, tz=UTC)


def write_schema(tmp_path: Path, schema: Any, name: str = "click.avsc") -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(schema))
    return path


def avro_body(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def confluent(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def click_decoder() -> RecordDecoder:
    return RecordDecoder(key_field="page", timestamp_field="ts", numeric_fields=["latency_ms"])


#: A small aggregation job of the result codec tests: a count, a mean and a collect.
SMALL_JOB: dict[str, Any] = {
    "job": "small",
    "input": {"key": "k", "timestamp": "ts"},
    "window": {"type": "tumbling", "size": "10s"},
    "aggregations": [
        {"name": "n", "op": "count"},
        {"name": "avg", "op": "mean", "field": "v"},
        {"name": "tags", "op": "collect", "field": "tag"},
    ],
}


def small_config(tmp_path: Path, **output: Any) -> JobConfig:
    return parse_config({**SMALL_JOB, "output": output or None}, base_dir=tmp_path)

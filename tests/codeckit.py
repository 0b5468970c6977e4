"""Helpers shared by the codec tests: Avro schemas and bodies, a click decoder."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import orjson

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

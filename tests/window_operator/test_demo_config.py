"""Which job configs can read the clicks the demo streams (``demo --config``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from window_operator.config import parse_config
from window_operator.demo import DEFAULT_CONFIG, clicks_unread


@pytest.mark.parametrize(
    ("change", "unread"),
    [
        ({}, None),
        ({"input": {"timestamp_unit": "s"}}, "takes its event time from 'ts' in s"),
        (
            {"input": {"timestamp": None, "timestamp_from": "kafka"}},
            "takes its event time from the Kafka record timestamps, not the clicks' ts",
        ),
        (
            {"input": {"key": None, "key_from": "kafka"}},
            "groups by the Kafka record key, not by a field of the clicks",
        ),
        ({"input": {"key": "user"}}, "reads 'user'"),
        ({"input": {"fields": ["latency_ms", "size"]}}, "reads 'size'"),
        ({"aggregations": [{"name": "b", "op": "sum", "field": "bytes"}]}, "reads 'bytes'"),
        ({"input": {"format": "avro"}}, "reads avro"),
    ],
)
def test_what_of_the_clicks_a_job_cannot_read(
    tmp_path: Path, change: dict[str, Any], unread: str | None
) -> None:
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for section, values in change.items():
        doc[section] = {**doc[section], **values} if isinstance(values, dict) else values
    if doc["input"].get("format") == "avro":
        schema = tmp_path / "s.avsc"
        fields = [{"name": "page", "type": "string"}, {"name": "ts", "type": "long"},
                  {"name": "latency_ms", "type": "double"}]  # fmt: skip
        schema.write_text(json.dumps({"type": "record", "name": "c", "fields": fields}))
        doc["input"]["avro_schema"] = str(schema)
    assert clicks_unread(parse_config(doc, base_dir=tmp_path)) == unread

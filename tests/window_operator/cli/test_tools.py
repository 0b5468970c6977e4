"""``window-operator schema``: the Avro schema a consumer of the job's results reads with."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import orjson
import pytest
import yaml

from window_operator.cli import main
from window_operator.codecs.result_avro import AvroResultEncoder
from window_operator.config import load_config
from window_operator.job import build_runtime
from window_operator.policies import END_OF_TIME

JOB = {
    "job": "clicks",
    "input": {"topic": "clicks", "key": "page", "timestamp": "ts"},
    "window": {"type": "tumbling", "size": "10s"},
    "aggregations": [
        {"name": "clicks", "op": "count"},
        {"name": "p95", "op": "percentile", "field": "ms", "params": {"q": 0.95}},
        {"name": "fit", "op": "linreg", "field": "ms", "params": {"x": "ts"}},
    ],
    "output": {"format": "avro"},
}


def test_the_printed_schema_reads_the_values_the_job_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(A consumer had to write the derived schema out by hand from the README.)"""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(JOB))
    assert main(["schema", "--config", str(path)]) == 0
    schema = fastavro.parse_schema(orjson.loads(capsys.readouterr().out))
    runtime = build_runtime(load_config(path))
    op = runtime.open_task(tmp_path / "state")
    op.add_batch([{"page": "/a", "ts": t, "ms": t / 100} for t in (1_000, 2_000, 3_000)])
    op.timeout(END_OF_TIME)
    (batch,) = op.take_result_batches()
    (result,) = batch.to_results()
    ((_, value),) = AvroResultEncoder(runtime.config).encode_batch(batch)
    assert value is not None
    read = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
    # the window's bounds are timestamp-millis: Avro readers give them as times
    assert [read.pop(name) for name in ("window_start", "window_end")] == [
        datetime.fromtimestamp(0, UTC),
        datetime.fromtimestamp(10, UTC),
    ]
    assert read["key"] == result.key == "/a" and read["kind"] == "ON_TIME"
    assert read["values"]["clicks"] == 3
    assert read["values"]["fit"]["slope"] == pytest.approx(0.01)
    op.close()


def test_a_json_output_has_no_schema_to_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**JOB, "output": {"format": "json"}}))
    assert main(["schema", "--config", str(path)]) == 2
    assert "output.format is json: the results are JSON objects" in capsys.readouterr().err

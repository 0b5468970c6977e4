"""End to end on a real broker and real Spark (local[2]): Kafka -> job -> Kafka."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
from jobkit import (
    assert_matches_oracle,
    create_topic,
    job_config,
    latest_results,
    make_stream,
    oracle,
    produce,
    read_topic,
    sentinels,
)

from window_operator.codecs import result_decoder_for
from window_operator.config import JobConfig
from window_operator.spark.driver import StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

N_EVENTS = 100_000


def run_job(spark: Any, config: JobConfig, bootstrap: str) -> StreamingJob:
    job = StreamingJob(config, bootstrap_servers=bootstrap, spark=spark)
    job.start()
    assert job.await_termination(600), "the AvailableNow query did not finish"
    return job


def test_json_end_to_end_matches_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(N_EVENTS)
    produce(kafka_bootstrap, topic, stream.records())
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(tmp_path, topic, unique_name("job"))
    job = run_job(spark, config, kafka_bootstrap)
    assert job.run_totals.batches >= 3  # the backlog was split into several micro-batches
    totals = job.run_totals.totals
    assert totals["applied"] == N_EVENTS + 4 and totals["rejected"] == 0
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
    kinds = {r["kind"] for r in got.values()}
    assert "LATE" in kinds  # late events re-emitted their windows


def test_avro_in_avro_out_matches_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    schema_path = tmp_path / "click.avsc"
    shutil.copy(Path("config/schemas/click.avsc"), schema_path)
    schema = fastavro.parse_schema(orjson.loads(schema_path.read_bytes()))
    import io

    def encode(rec: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, rec)
        return buf.getvalue()

    topic = unique_name("clicks-avro")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(20_000, seed=2)
    produce(kafka_bootstrap, topic, stream.records(), encode=encode)
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, encode(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        input={"format": "avro", "avro_schema": str(schema_path)},
        output={"format": "avro"},
    )
    run_job(spark, config, kafka_bootstrap)
    messages = read_topic(kafka_bootstrap, config.output.topic)
    # values really are Avro, readable with the derived schema
    assert result_decoder_for(config).decode(messages[0].value()) is not None
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(messages[0].value())
    got = latest_results(config, messages)
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))

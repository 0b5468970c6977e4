"""Bad input never stops the streaming job (real broker, real Spark local[2]).

Each kind of bad record, alone in an otherwise clean micro-batch and all in one batch:
the query finishes, the error topic holds every bad record exactly once with its code,
and every window of the normal events is exact. A far-future event in the middle of a
partition is rejected and does not block the partition.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    run_to_end,
    sentinels,
)

from window_operator.config import JobConfig
from window_operator.spark.driver import StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

YEAR_3000 = 32_503_680_000_000
T = b"1700000000000"
#: (Kafka key, value, expected code): the records of the issue, and the old kinds.
BAD: list[tuple[bytes, bytes | None, str]] = [
    (b"bad-utf8", b'{"page": "bad-\xff\xfe", "ts": ' + T + b', "latency_ms": 1}', "BAD_JSON"),
    (b"nan", b'{"page": "/a", "ts": ' + T + b', "latency_ms": NaN}', "NON_FINITE_VALUE"),
    (b"inf", b'{"page": "/a", "ts": ' + T + b', "latency_ms": Infinity}', "NON_FINITE_VALUE"),
    (
        b"deep",
        b'{"page": "/a", "ts": '
        + T
        + b', "latency_ms": 1, "x": '
        + b"[" * 2000
        + b"]" * 2000
        + b"}",
        "BAD_JSON",
    ),
    (
        b"two",
        b'{"page": "/a", "ts": ' + T + b', "latency_ms": 1}{"page": "/a", "ts": ' + T + b"}",
        "BAD_JSON",
    ),
    (b"empty", b"", "BAD_JSON"),
    (b"future", b'{"page": "/a", "ts": 32503680000000, "latency_ms": 1}', "FUTURE_TIMESTAMP"),
    (b"broken", b'{"page": "/a", "ts": 17', "BAD_JSON"),
    (b"string-ts", b'{"page": "/a", "ts": "yesterday", "latency_ms": 1}', "BAD_TIMESTAMP"),
    (b"tombstone", None, "BAD_JSON"),
    # last, so that a watermark exists before its batch (the operator rejects it: the
    # errors topic still gets the original bytes, read back from the input)
    (b"old", b'{"page": "/old", "ts": 1000000000000, "latency_ms": 1}', "OUT_OF_RETENTION"),
]
PER_TRIGGER = 300


def run_job(spark: Any, config: JobConfig, bootstrap: str) -> tuple[StreamingJob, list[Any]]:
    reports: list[Any] = []
    job = run_to_end(config, bootstrap, spark, on_report=reports.append)
    return job, reports


def assert_errors_exactly_once(bootstrap: str, config: JobConfig, topic: str) -> None:
    errors = read_topic(bootstrap, config.output.errors_topic)
    assert sorted(m.key() for m in errors) == sorted(k for k, _, _ in BAD)
    by_key = {m.key(): m for m in errors}
    stamps = {m.key(): m.timestamp()[1] for m in read_topic(bootstrap, topic)}
    for key, value, code in BAD:
        headers = {k: v.decode() for k, v in by_key[key].headers()}
        assert headers["error.code"] == code, key
        assert headers["source.topic"] == topic and headers["source.offset"].isdigit()
        # the record's Kafka timestamp, read back with it where the operator rejected it
        assert headers["source.timestamp"] == str(stamps[key]), key
        assert by_key[key].value() == value


@pytest.mark.parametrize("layout", ["each-alone-in-a-batch", "all-in-one-batch"])
def test_every_bad_record_is_reported_once_and_windows_stay_exact(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    layout: str,
) -> None:
    topic = unique_name("clicks-bad")
    create_topic(kafka_bootstrap, topic, 1)
    stream = make_stream(PER_TRIGGER * len(BAD), seed=11, partitions=1)
    good = [(rec["page"].encode(), orjson.dumps(rec)) for rec in stream.records()]
    if layout == "each-alone-in-a-batch":
        # one bad record in the middle of every micro-batch of PER_TRIGGER offsets
        sequence = []
        for i, (key, value, _) in enumerate(BAD):
            chunk = good[i * (PER_TRIGGER - 1) : (i + 1) * (PER_TRIGGER - 1)]
            sequence += chunk[: PER_TRIGGER // 2] + [(key, value)] + chunk[PER_TRIGGER // 2 :]
        sequence += good[len(BAD) * (PER_TRIGGER - 1) :]
    else:
        middle = len(good) // 2
        sequence = good[:middle] + [(k, v) for k, v, _ in BAD] + good[middle:]
    produce(kafka_bootstrap, topic, [], raw=[(k, v, 0) for k, v in sequence])
    ends = sentinels(int(stream.ts.max()), 1)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": PER_TRIGGER}
    )
    job, reports = run_job(spark, config, kafka_bootstrap)
    rejected_per_batch = [sum(t.rejected for t in r.tasks) for r in reports]
    if layout == "each-alone-in-a-batch":
        assert rejected_per_batch.count(1) == len(BAD) and max(rejected_per_batch) == 1
    else:
        assert max(rejected_per_batch) == len(BAD)
    totals = job.run_totals.totals
    assert totals["rejected"] == len(BAD) and totals["applied"] == len(good) + 1
    assert_errors_exactly_once(kafka_bootstrap, config, topic)
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_a_far_future_event_does_not_block_its_partition(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("clicks-future")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(4_000, seed=12)
    records = stream.records()
    produce(kafka_bootstrap, topic, records[:2_000])
    future = {"page": "/year-3000", "ts": YEAR_3000, "latency_ms": 1.0}
    produce(kafka_bootstrap, topic, [], raw=[(b"/year-3000", orjson.dumps(future), 0)])
    produce(kafka_bootstrap, topic, records[2_000:])
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": 1_000}
    )
    job, _ = run_job(spark, config, kafka_bootstrap)
    totals = job.run_totals.totals
    assert totals["rejected"] == 1 and totals["applied"] == len(records) + 4
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    assert [dict(m.headers())["error.code"] for m in errors] == [b"FUTURE_TIMESTAMP"]
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))

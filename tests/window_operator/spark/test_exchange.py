"""State partitioned by key: input keyed by anything gives exact windows (real broker, Spark).

The input is produced round-robin (each event keyed by its event number), so every key's
events are spread over all partitions: each window needs the events of several input
partitions, which only the keyed exchange brings to one state task.
"""

from __future__ import annotations

import re
from collections import defaultdict
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
    session_clicks,
    session_oracle,
    upsert_table,
)

from window_operator.config import JobConfig
from window_operator.spark.driver import BatchReport, StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 4


def run_job(
    spark: Any, config: JobConfig, bootstrap: str
) -> tuple[StreamingJob, list[BatchReport]]:
    reports: list[BatchReport] = []
    job = run_to_end(config, bootstrap, spark, on_report=reports.append)
    return job, reports


def unkeyed_topic(bootstrap: str, name: str, records: list[dict[str, Any]], max_ts: int) -> None:
    create_topic(bootstrap, name, PARTITIONS)
    produce(bootstrap, name, records, round_robin=True, partitions=PARTITIONS)
    ends = sentinels(max_ts, PARTITIONS)
    produce(bootstrap, name, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])


@pytest.mark.parametrize(
    ("window", "tasks"),
    [
        ({"type": "tumbling", "size": "60s"}, None),
        ({"type": "hopping", "size": "60s", "step": "10s"}, 3),
    ],
    ids=["tumbling-tasks-default", "hopping-3-tasks"],
)
def test_time_windows_of_unkeyed_input_match_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    window: dict[str, Any],
    tasks: int | None,
) -> None:
    topic = unique_name("clicks")
    stream = make_stream(8_000, keys=120, seed=21)
    unkeyed_topic(kafka_bootstrap, topic, stream.records(), int(stream.ts.max()))
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window=window,
        state={"tasks": tasks} if tasks else {},
        spark={"max_offsets_per_trigger": 2_000},
    )
    job, reports = run_job(spark, config, kafka_bootstrap)
    assert {len(r.tasks) for r in reports} == {tasks or PARTITIONS}
    assert job.run_totals.totals["applied"] == len(stream.keys) + PARTITIONS
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    step = 10_000 if window["type"] == "hopping" else 60_000
    assert_matches_oracle(got, oracle(stream, 60_000, step))


def test_sessions_of_unkeyed_input_match_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sessions")
    stream = make_stream(4_000, keys=150, seed=23, events_per_second=30.0)
    unkeyed_topic(kafka_bootstrap, topic, stream.records(), int(stream.ts.max()))
    gap = 20_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "session", "gap": gap},
        watermark={"allowed_lateness": "2s"},
        spark={"max_offsets_per_trigger": 1_000},
    )
    run_job(spark, config, kafka_bootstrap)
    table, _ = upsert_table(read_topic(kafka_bootstrap, config.output.topic))
    assert session_clicks(table) == session_oracle(stream, gap)


def test_count_windows_of_unkeyed_input_follow_the_batch_order(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A key's messages are ordered by micro-batch, then (partition, offset) within it."""
    topic = unique_name("counts")
    stream = make_stream(3_000, keys=40, seed=25)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce(kafka_bootstrap, topic, records, round_robin=True, partitions=PARTITIONS)
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "count", "size": 10, "step": 5},
        spark={"max_offsets_per_trigger": 700},
    )
    _, reports = run_job(spark, config, kafka_bootstrap)
    # the processing order the job reports: batch, then partition, then offset
    batch_of: dict[tuple[int, int], int] = {}
    for r in reports:
        for m in r.ranges:
            for offset in range(m.range.start, m.range.end):
                batch_of[(m.range.partition, offset)] = r.batch_id
    position = {i: (i % PARTITIONS, i // PARTITIONS) for i in range(len(records))}
    order = sorted(range(len(records)), key=lambda i: (batch_of[position[i]], *position[i]))
    per_key: dict[str, list[float]] = defaultdict(list)
    for i in order:
        per_key[records[i]["page"]].append(records[i]["latency_ms"])
    # full windows only: a partial one waits for the end of the input, which never comes
    expected = {
        (key, start): 10
        for key, values in per_key.items()
        for start in range(0, len(values) - 9, 5)
    }
    got = {
        kw: r["values"]["clicks"]
        for kw, r in latest_results(
            config, read_topic(kafka_bootstrap, config.output.topic)
        ).items()
    }
    assert got == expected


def test_offsets_windows_of_unkeyed_input_name_their_partition(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Every partition has its own offsets windows, each on the state task of its
    partition; the windows of one key in two partitions share bounds, and both stay in
    the output (the partition is part of the window's Kafka key)."""
    topic = unique_name("offsets")
    stream = make_stream(2_000, keys=6, seed=27)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce(kafka_bootstrap, topic, records, round_robin=True, partitions=PARTITIONS)
    size, step = 10, 5
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "offsets", "size": size, "step": step},
        spark={"max_offsets_per_trigger": 600},
    )
    _, reports = run_job(spark, config, kafka_bootstrap)
    assert len(reports) > 1 and {len(r.tasks) for r in reports} == {PARTITIONS}
    # record i is offset i // 4 of partition i % 4; a window fires once its partition
    # delivered an offset past its end
    last = (len(records) - 1) // PARTITIONS
    expected: dict[tuple[int, str, int], int] = defaultdict(int)
    for i, rec in enumerate(records):
        part, offset = i % PARTITIONS, i // PARTITIONS
        first = max(-(-(offset - size + 1) // step) * step, 0)  # ceil to a step
        for start in range(first, offset + 1, step):
            if start + size <= last:
                expected[(part, rec["page"], start)] += 1
    table: dict[bytes, dict[str, Any]] = {}
    for m in read_topic(kafka_bootstrap, config.output.topic):
        table[m.key()] = orjson.loads(m.value())
    got = {
        (r["partition"], r["key"], r["window_start"]): r["values"]["clicks"] for r in table.values()
    }
    assert len(got) == len(table)
    assert got == expected


def test_a_spark_python_worker_writes_log_lines_as_the_driver_does() -> None:
    """A worker's warning (a broker away: 'the epoch waits for it') came as a bare
    message without time or level; its admin clients' connection chatter stays out."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from window_operator.observe.logs import worker_logging\n"
        "worker_logging()\n"
        "logging.getLogger('window_operator.runtime.longrun.worker').warning('the epoch waits')\n"
        "logging.getLogger('window_operator.kafka_admin').error(\n"
        "    'FAIL [rdkafka#producer-1]: Connect to ipv4#127.0.0.1:9 failed: Connection refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d WARNING window_operator\.runtime\.longrun\.worker: the epoch waits",
        lines[0],
    )

"""Long-running workers (as threads) over a real broker and real RocksDB stores.

The input is produced round-robin, so every key's events are in every partition and only
the exchange between the workers brings a window's events to one state task.
"""

from __future__ import annotations

import shutil
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
    local_job,
    make_stream,
    oracle,
    produce,
    read_topic,
    sentinels,
)

from window_operator.config import JobConfig
from window_operator.runtime.longrun.local import LocalLongRunningJob
from window_operator.runtime.longrun.wire import EpochReport

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4


def unkeyed_topic(bootstrap: str, name: str, records: list[dict[str, Any]], max_ts: int) -> None:
    create_topic(bootstrap, name, PARTITIONS)
    produce(bootstrap, name, records, round_robin=True, partitions=PARTITIONS)
    ends = sentinels(max_ts, PARTITIONS)
    produce(bootstrap, name, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])


def run_local(
    config: JobConfig, bootstrap: str, tmp: Path, workers: int, **spec: Any
) -> tuple[LocalLongRunningJob, list[EpochReport]]:
    reports: list[EpochReport] = []
    job = local_job(config, bootstrap, tmp, workers, on_report=reports.append, **spec)
    job.start()
    job.wait(300)
    return job, reports


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_hopping_windows_of_unkeyed_input_match_the_oracle(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], workers: int
) -> None:
    topic = unique_name("clicks")
    stream = make_stream(6_000, keys=120, seed=31)
    unkeyed_topic(kafka_bootstrap, topic, stream.records(), int(stream.ts.max()))
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": 1_500}
    )
    job, reports = run_local(config, kafka_bootstrap, tmp_path, workers, available_now=True)
    assert sum(s.records for s in job.summaries) == len(stream.keys) + PARTITIONS
    # max_offsets_per_trigger bounds an epoch: each worker reads its share of it
    read = [sum(m.records for m in r.ranges) for r in reports]
    assert max(read) == 1_500 // workers
    applied = sum(t.applied for r in reports for t in r.tasks)
    assert applied == len(stream.keys) + PARTITIONS
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_offsets_windows_restart_where_each_partition_s_owner_stopped(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """State keyed by partition: a restart reads each partition from where the task that
    owns it stopped (not from the start: no other task holds a position for it), and the
    windows come out as from one run."""
    topic = unique_name("offsets")
    stream = make_stream(800, keys=5, seed=33)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    config = job_config(
        tmp_path, topic, unique_name("job"), window={"type": "offsets", "size": 10, "step": 5}
    )
    produce(kafka_bootstrap, topic, records[:400], round_robin=True, partitions=PARTITIONS)
    first, _ = run_local(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    assert sum(s.records for s in first.summaries) == 400
    produce(kafka_bootstrap, topic, records[400:], round_robin=True, partitions=PARTITIONS)
    second, _ = run_local(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    assert sum(s.records for s in second.summaries) == 400  # only what the first left
    table = {
        m.key(): orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)
    }
    got = {
        (r["partition"], r["key"], r["window_start"]): r["values"]["clicks"] for r in table.values()
    }
    last = (len(records) - 1) // PARTITIONS  # record i: offset i // 4 of partition i % 4
    expected: dict[tuple[int, str, int], int] = {}
    for i, rec in enumerate(records):
        part, offset = i % PARTITIONS, i // PARTITIONS
        for start in range(max(-(-(offset - 9) // 5) * 5, 0), offset + 1, 5):
            if start + 10 <= last:
                kw = (part, rec["page"], start)
                expected[kw] = expected.get(kw, 0) + 1
    assert got == expected


def test_a_partition_where_only_a_commit_marker_waits_goes_idle_after_a_restart(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The input is written in transactions (another job's output): at a restart the
    offset of a partition's last commit marker still lies ahead of what the state read,
    so the partition looks as if records waited in it, yet no chunk of it ever comes.
    Its reader's word that it read it to its end lets it go idle; otherwise it held the
    watermark back at its old event time for as long as the workers ran."""
    import time

    from confluent_kafka import Producer

    topic = unique_name("txn-in")
    create_topic(kafka_bootstrap, topic, 2)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("upstream")}
    )
    producer.init_transactions(30)

    def write(events: list[tuple[int, dict[str, Any]]]) -> None:
        producer.begin_transaction()
        for part, event in events:
            producer.produce(topic, orjson.dumps(event), event["page"].encode(), partition=part)
        producer.commit_transaction(30)

    base = 1_700_000_000_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "tumbling", "size": "10s"},
        watermark={"allowed_lateness": "0s", "idle_timeout": "1s"},
        spark={"trigger": "200ms"},
    )
    write([(0, {"page": "/a", "ts": base + 1_000, "latency_ms": 1.0}),
           (1, {"page": "/b", "ts": base + 2_000, "latency_ms": 1.0})])  # fmt: skip
    _, reports = run_local(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    # the epochs reach each partition's end, past its commit marker (offset 1): where
    # they stopped at the record, the job's lag stayed 1 per partition for ever, and
    # an available-now run was UNHEALTHY after it ended (a walkthrough)
    reached: dict[int, int] = {}
    for m in (m for r in reports for m in r.ranges):
        reached[m.range.partition] = max(m.range.end, reached.get(m.range.partition, 0))
    assert reached == {0: 2, 1: 2}
    write([(0, {"page": "/a", "ts": base + 50_000, "latency_ms": 1.0})])
    job = local_job(config, kafka_bootstrap, tmp_path, 2)
    job.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
            if any(start == base for _, start in got):
                break
            time.sleep(0.5)
    finally:
        job.stop()
        job.wait(120)
    fired = {key: r["values"]["clicks"] for (key, start), r in got.items() if start == base}
    assert fired == {"/a": 1, "/b": 1}


def test_a_restore_at_the_workers_start_is_reported(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Workers open (and restore) their tasks before their first epoch: the changelog
    records that restore applied, and its time, are in the first epoch's report (and so
    in the log line and the restore metrics), as a micro-batch's are."""
    topic = unique_name("clicks")
    stream = make_stream(2_000, keys=40, seed=35)
    unkeyed_topic(kafka_bootstrap, topic, stream.records(), int(stream.ts.max()))
    config = job_config(tmp_path, topic, unique_name("job"))
    _, first = run_local(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    assert sum(t.restored_records for r in first for t in r.tasks) == 0  # fresh stores
    for store in Path(config.state.dir).glob(f"{config.job}/task-*"):
        shutil.rmtree(store)
    _, second = run_local(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    restored = [t for r in second for t in r.tasks if t.restored_records]
    assert sorted(t.task for t in restored) == list(range(PARTITIONS)), "once per task"
    assert all(t.seconds_restore > 0 for t in restored)

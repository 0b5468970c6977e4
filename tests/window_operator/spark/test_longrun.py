"""The long-running shape on Spark (``spark.mode: long_running``): a barrier stage of
workers over a real broker, real RocksDB stores and Spark ``local[2]``.

Inputs are produced round-robin (unkeyed): a window needs the events of every partition,
which only the exchange between the workers brings to one state task.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from jobkit import (
    add_partitions,
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
from joinjobkit import random_join
from pyspark.errors import StreamingQueryException

from window_operator.config import JobConfig, JoinJobConfig
from window_operator.observe.checkpoint import read_checkpoint
from window_operator.observe.status import job_status
from window_operator.spark.driver import BatchReport, StreamingJob
from window_operator.spark.failures import root_cause
from window_operator.spark.longrun import LongRunningJob, WorkerSlotsError, job_for, local_slots
from window_operator.spark.topics import TaskCountError

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 4
LONG = {"mode": "long_running", "trigger": "available_now", "max_offsets_per_trigger": 2_000}


def run_job(
    spark: Any, config: JobConfig | JoinJobConfig, bootstrap: str
) -> tuple[LongRunningJob, list[BatchReport]]:
    reports: list[BatchReport] = []
    job = run_to_end(config, bootstrap, spark, on_report=reports.append)
    return job, reports


def unkeyed_topic(bootstrap: str, name: str, records: list[dict[str, Any]], max_ts: int) -> None:
    create_topic(bootstrap, name, PARTITIONS)
    produce(bootstrap, name, records, round_robin=True, partitions=PARTITIONS)
    ends = sentinels(max_ts, PARTITIONS)
    produce(bootstrap, name, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])


@pytest.mark.parametrize("tasks", [None, 3], ids=["tasks-default", "3-tasks"])
def test_hopping_windows_of_unkeyed_input_match_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tasks: int | None,
) -> None:
    topic = unique_name("clicks")
    stream = make_stream(8_000, keys=120, seed=41)
    unkeyed_topic(kafka_bootstrap, topic, stream.records(), int(stream.ts.max()))
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        state={"tasks": tasks} if tasks else {},
        spark=LONG,
    )
    job, reports = run_job(spark, config, kafka_bootstrap)
    assert len(job.summaries) == 2, "one worker per core of local[2]"
    assert {t.task for r in reports for t in r.tasks} == set(range(tasks or PARTITIONS))
    assert job.run_totals.totals["applied"] == len(stream.keys) + PARTITIONS
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
    progress = read_checkpoint(config.spark.checkpoint_dir)
    assert progress.last_committed is not None and progress.committed == {
        (topic, p): 2_001 for p in range(PARTITIONS)
    }
    status = job_status(config, kafka_bootstrap)  # `window-operator status`
    assert status.healthy and status.lag == 0, status.problems
    assert {t.task for t in status.tasks} == set(range(tasks or PARTITIONS))


@pytest.mark.parametrize("kind", ["inner", "full"])
def test_a_random_join_of_unkeyed_inputs_matches_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    kind: str,
) -> None:
    names = (unique_name("job"), unique_name("left"), unique_name("right"))
    join = random_join(kafka_bootstrap, tmp_path, names, kind=kind, spark={"mode": "long_running"})
    run_job(spark, join.config, kafka_bootstrap)
    assert join.got(kafka_bootstrap) == join.expected()


def test_a_stopped_job_continues_where_its_state_ends(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Run until stopped, produce more, run again: every event counted once."""
    topic = unique_name("clicks")
    stream = make_stream(6_000, keys=80, seed=43)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce(kafka_bootstrap, topic, records[:3_000], round_robin=True, partitions=PARTITIONS)
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"mode": "long_running", "trigger": "200ms"}
    )
    for part in (records[3_000:], []):
        reports: list[BatchReport] = []
        job = LongRunningJob(
            config, bootstrap_servers=kafka_bootstrap, spark=spark, on_report=reports.append
        )
        job.start()
        deadline = time.monotonic() + 120
        while job.run_totals.totals.get("records", 0) < 3_000 and time.monotonic() < deadline:
            time.sleep(0.2)
        job.stop()
        assert job.await_termination(60)
        assert job.run_totals.totals["records"] == 3_000, "each run reads what is new"
        produce(kafka_bootstrap, topic, part, round_robin=True, partitions=PARTITIONS)
    ends = sentinels(int(stream.ts.max()), PARTITIONS)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = config.model_copy(
        update={"spark": config.spark.model_copy(update={"trigger": "available_now"})}
    )
    job, _ = run_job(spark, config, kafka_bootstrap)
    assert job.run_totals.totals["records"] == PARTITIONS
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def read_at_least(job: LongRunningJob, n: int) -> None:
    """Wait (at most 2 min) until the running ``job`` has read ``n`` records."""
    deadline = time.monotonic() + 120
    while job.run_totals.totals.get("records", 0) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.run_totals.totals.get("records", 0) >= n, job.run_totals.totals


def test_partitions_added_to_the_input_are_read_without_a_restart(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The input grows from 2 to 4 partitions while the job runs: the driver finds the
    new ones, the workers start again with them, and every event is counted once."""
    topic = unique_name("clicks")
    stream = make_stream(4_000, keys=60, seed=47)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, records[:2_000], round_robin=True, partitions=2)
    spark_section = {"mode": "long_running", "trigger": "200ms", "partition_discovery": "500ms"}
    config = job_config(tmp_path, topic, unique_name("job"), spark=spark_section)
    reports: list[BatchReport] = []
    job = LongRunningJob(
        config, bootstrap_servers=kafka_bootstrap, spark=spark, on_report=reports.append
    )
    job.start()

    try:
        read_at_least(job, 2_000)
        add_partitions(kafka_bootstrap, topic, 4)
        produce(kafka_bootstrap, topic, records[2_000:], round_robin=True, partitions=4)
        ends = sentinels(int(stream.ts.max()), 4)
        produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
        read_at_least(job, len(records) + 4)
    finally:
        job.stop()
    assert job.await_termination(60)
    assert job.run_totals.totals["records"] == len(records) + 4, "each record read once"
    read = {m.range.partition for r in reports for m in r.ranges if m.records}
    assert read == {0, 1, 2, 3}
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_records_written_to_new_partitions_before_the_driver_looks_are_not_late(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The input grows from 2 to 3 partitions; the driver would look only after an hour,
    and the old partitions' records run 200 s of event time ahead of the new one's.
    Before, the workers read on until the driver's look, and the new partition's records
    were late (or out of retention) when they were read at last (helper's case: 91 of
    600 late, wrong ON_TIME results). Each worker looks before every epoch: once an input
    grew it ends, and the new start reads the new partition under a clock that waits
    for it. Every window is exact, sent once, and nothing is late.

    The new partition's records are written first, and the workers look once a second:
    the new start must find them there. A partition that holds no record when the
    workers start is not waited for (it may never get one), so records written to it
    after the start can be late like those of any partition that was empty (the CI saw
    this once, with the new partition's records written after the others and a look
    every 200 ms)."""
    topic = unique_name("grow")
    create_topic(kafka_bootstrap, topic, 2)

    def event(i: int, ts: int, part: int, key: str = "") -> tuple[bytes, bytes, int]:
        rec = {"page": key or f"k{i % 4}", "ts": ts, "latency_ms": 1.0}
        return f"e{part}-{i}".encode(), orjson.dumps(rec), part

    first = [event(i, i * 500, i % 2) for i in range(200)]  # 0..99.5 s
    produce(kafka_bootstrap, topic, [], raw=first)
    window = {"type": "tumbling", "size": "10s"}
    spark_section = {"mode": "long_running", "trigger": "1s", "partition_discovery": "1h"}
    config = job_config(tmp_path, topic, unique_name("job"), window=window, spark=spark_section)
    job = LongRunningJob(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    job.start()

    ahead = [event(i, 100_000 + i * 500, i % 2) for i in range(400)]  # 100..299.5 s
    new = [event(i, 100_000 + i * 500, 2) for i in range(40)]  # 100..119.5 s
    ends = [event(0, 10_000_000, p, "end") for p in range(3)]  # its window stays open
    try:
        read_at_least(job, len(first))
        add_partitions(kafka_bootstrap, topic, 3)
        produce(kafka_bootstrap, topic, [], raw=new + ends[2:])
        produce(kafka_bootstrap, topic, [], raw=ahead + ends[:2])
        read_at_least(job, len(first) + len(ahead) + len(new) + len(ends))
    finally:
        job.stop()
    assert job.await_termination(60)
    totals = job.run_totals.totals
    assert totals["records"] == len(first) + len(ahead) + len(new) + len(ends), totals
    assert totals.get("late", 0) == 0, totals
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    kinds = Counter(r["kind"] for r in results)
    assert set(kinds) == {"ON_TIME"}, kinds  # none LATE: each window sent once
    expected = Counter(
        (orjson.loads(v)["page"], orjson.loads(v)["ts"] // 10_000 * 10_000)
        for _, v, _ in first + ahead + new
    )
    got = {(r["key"], r["window_start"]): r["values"]["clicks"] for r in results}
    assert got == dict(expected)


def test_a_task_over_its_memory_budget_spills_and_its_results_match_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Long-running tasks keep their operators, so ``state.cache_mb`` binds. The first
    run reads 16,000 events of 8,000 keys into one state task: 8,121 open frames, beyond
    the about 5,600 of 1 MiB, so its flush spills the oldest to the store (and the
    changelog). The second run restores them, reads the sentinels and fires every
    window: EARLY results came out, and the final results equal the oracle's."""
    topic = unique_name("clicks")
    stream = make_stream(16_000, keys=8_000, seed=59)
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce(kafka_bootstrap, topic, stream.records(), round_robin=True, partitions=PARTITIONS)
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        state={"cache_mb": 1, "tasks": 1},
        emit={"early": "20ms"},
        spark=LONG,
    )
    run_job(spark, config, kafka_bootstrap)
    ends = sentinels(int(stream.ts.max()), PARTITIONS)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    run_job(spark, config, kafka_bootstrap)
    messages = read_topic(kafka_bootstrap, config.output.topic)
    kinds = Counter(orjson.loads(m.value())["kind"] for m in messages if m.value() is not None)
    assert kinds["EARLY"] > 0 and kinds["ON_TIME"] > 0, kinds
    assert_matches_oracle(latest_results(config, messages), oracle(stream, 60_000, 10_000))


@pytest.mark.parametrize(
    ("master", "slots"),
    [("local", 1), ("local[2]", 2), ("local[3, 4]", 3), ("local[*]", os.cpu_count()),
     ("spark://host:7077", None), ("yarn", None)],
)  # fmt: skip
def test_the_task_slots_of_a_local_master(master: str, slots: int | None) -> None:
    assert local_slots(master) == slots


def test_more_workers_than_local_slots_is_refused_at_start(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A barrier stage of more tasks than slots would wait (Spark retries it for 10 min)."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 2)
    config = job_config(tmp_path, topic, unique_name("job"), spark={**LONG, "workers": 3})
    job = LongRunningJob(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    refused = r"spark.workers is 3, but Spark local\[2\] has 2 task slots"
    with pytest.raises(WorkerSlotsError, match=refused):
        job.start()


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_an_offsets_job_whose_input_grows_past_its_tasks_stops_with_one_line(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    mode: str,
) -> None:
    """Offsets windows keep one input partition per state task: a third partition for
    two tasks stops the job, from the driver, with the TaskCountError a restart would
    give. Before, micro-batch tasks failed (each tried 4 times) on the records of the new
    partition, and long-running workers were started again forever."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 2)
    events = [{"page": "/a", "ts": 1_700_000_000_000 + i, "latency_ms": 1.0} for i in range(20)]
    produce(kafka_bootstrap, topic, events, round_robin=True, partitions=2)
    section = {"mode": mode, "trigger": "500ms", "partition_discovery": "500ms"}
    config = job_config(tmp_path, topic, unique_name("job"), spark=section,
                        window={"type": "offsets", "size": 5}, emit={}, retention={})  # fmt: skip
    job = job_for(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    job.start()
    try:
        deadline = time.monotonic() + 120
        while job.run_totals.totals.get("applied", 0) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job.run_totals.totals.get("applied", 0) == 20
        add_partitions(kafka_bootstrap, topic, 3)
        produce(kafka_bootstrap, topic, [], raw=[(b"k", orjson.dumps(events[0]), 2)])
        grown = "the input has 3 partitions now and the changelog topic"
        if mode == "long_running":
            with pytest.raises(TaskCountError, match=grown):
                job.await_termination(120)
        else:
            assert isinstance(job, StreamingJob) and job.query is not None
            with pytest.raises(StreamingQueryException) as info:
                job.query.awaitTermination(120)
            assert root_cause(info.value).startswith(
                "window_operator.spark.topics.TaskCountError: offsets windows keep one input"
            )
    finally:
        job.stop()

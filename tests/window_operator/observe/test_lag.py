"""Input lag on a real broker: end offsets minus the job's position."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import runtime_for
from jobkit import create_topic, produce

from window_operator.broker import free_port
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import ClockState
from window_operator.observe.lag import InputLag
from window_operator.observe.metrics import JobMetrics
from window_operator.runtime.exchange import InputPartition, MapReport
from window_operator.runtime.longrun.progress import Progress, read_progress, record_progress
from window_operator.runtime.report import TaskReport
from window_operator.spark.driver import BatchReport

pytestmark = pytest.mark.kafka


def test_a_partition_no_batch_read_yet_is_where_the_checkpoint_started_it(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A job started at the latest offsets: its first batch read nothing of partition 1.
    Before, that partition's lag counted every record before the job's start, for as
    long as it got no new one (a false lag alert)."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, [], raw=[(b"a", b"{}", i % 2) for i in range(6)])
    checkpoint = tmp_path / "checkpoint"
    lag = InputLag(kafka_bootstrap, [topic], checkpoint_dir=str(checkpoint))
    before = lag.read()
    assert before is not None and [r.lag for r in before] == [3, 3]  # never ran: all of it
    # batch 0 started at the latest offsets and read one new record of partition 0
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    source = {topic: {"0": 4, "1": 3}}
    (checkpoint / "offsets" / "0").write_text(
        "v1\n" + json.dumps({"batchTimestampMs": 1}) + "\n" + json.dumps(source) + "\n"
    )
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    produce(kafka_bootstrap, topic, [], raw=[(b"a", b"{}", 0)])
    lag.advance([((0, topic, 0), 4)])
    after = lag.read()
    assert after is not None
    assert [(r.partition, r.position, r.lag) for r in after] == [(0, 4, 0), (1, 3, 0)]


def test_after_a_switch_of_shape_the_lag_is_from_where_this_shape_goes_on(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Micro-batches ran to offset 2, long-running workers then to 6; micro-batches go
    on from 2 (the records after it are replays). Before, their lag was from 6: 0 while
    the job still had 4 records to read again."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(b"a", b"{}", 0) for _ in range(6)])
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text(
        "v1\n" + json.dumps({"batchTimestampMs": 1}) + "\n" + json.dumps({topic: {"0": 2}}) + "\n"
    )
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    record_progress(checkpoint, [((0, topic, 0), 6)], ClockState())  # the workers ran later
    for shape, lag in (("micro_batch", 4), ("long_running", 0)):
        readings = InputLag(kafka_bootstrap, [topic], checkpoint_dir=str(checkpoint), shape=shape)
        got = readings.read()
        assert got is not None and [r.lag for r in got] == [lag], shape


def test_a_self_joins_lag_and_progress_are_from_its_slower_input(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The two inputs of a self-join read one topic, each at its own pace (on two
    workers). Input 0 read all 6 records, input 1 only 2: 4 records are still to be
    read. Before, the lag and ``status`` took the faster input's position: lag 0."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(b"a", b"{}", 0) for _ in range(6)])
    ends = [((0, topic, 0), 6), ((1, topic, 0), 2)]
    lag = InputLag(kafka_bootstrap, [topic])
    lag.advance(ends[:1])
    lag.advance(ends[1:])
    got = lag.read()
    assert got is not None and [(r.position, r.lag) for r in got] == [(2, 4)]
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    record_progress(checkpoint, ends[:1], ClockState())
    record_progress(checkpoint, ends[1:], ClockState())
    progress = read_progress(checkpoint)
    assert progress is not None and progress.positions == {(topic, 0): 2}
    readings = InputLag(kafka_bootstrap, [topic], checkpoint_dir=str(checkpoint),
                        shape="long_running").read()  # fmt: skip
    assert readings is not None and [r.lag for r in readings] == [4]
    record_progress(checkpoint, [((1, topic, 0), 6)], ClockState())  # input 1 caught up
    assert (read_progress(checkpoint) or Progress()).positions == {(topic, 0): 6}


def test_the_lag_gauges_say_when_they_were_last_measured(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """While the broker does not answer, the lag gauges keep their last value: their
    timestamp stands still, which is what an alert can look at."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 1)
    config = runtime_for().config
    away = InputLag(f"127.0.0.1:{free_port()}", [topic])
    away.admin = KafkaAdmin(away.admin.bootstrap_servers, metadata_timeout_s=1.0,
                            request_timeout_s=1.0)  # fmt: skip
    metrics = JobMetrics(config, lag=away)
    report = BatchReport(0, [TaskReport(0)], [], ClockState(), 0.1)
    metrics(report)
    stamp = "window_operator_input_lag_timestamp_seconds"
    assert math.isnan(metrics.registry.get_sample_value(stamp) or 0.0)
    metrics.lag = InputLag(kafka_bootstrap, [topic])
    before = time.time()
    metrics(report)
    assert before <= (metrics.registry.get_sample_value(stamp) or 0.0) <= time.time()


def test_every_input_partition_has_a_read_series_before_a_batch_reads_it(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A rate over ``records_read_total`` works for a partition from the job's start.
    Before, a partition no micro-batch had read had no series at all (the long-running
    shape reported every partition's start)."""
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, [], raw=[(b"a", b"{}", 0)])
    metrics = JobMetrics(runtime_for().config, lag=InputLag(kafka_bootstrap, [topic]))
    read = [MapReport(InputPartition(0, topic, 0).span(0, 1), 1, None)]
    metrics(BatchReport(0, [TaskReport(0)], read, ClockState(), 0.1))
    sample = metrics.registry.get_sample_value
    name = "window_operator_records_read_total"
    assert sample(name, {"topic": topic, "partition": "0"}) == 1
    assert sample(name, {"topic": topic, "partition": "1"}) == 0

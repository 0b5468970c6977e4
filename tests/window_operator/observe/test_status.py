"""``window-operator status`` on a job that has run, one that is behind, one that never
ran, and one whose workers do not read a partition added to its input."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jobkit import job_config
from obskit import in_order, job_dict, one_partition_topic, produce_events, write_job

from window_operator.cli import main
from window_operator.observe.checkpoint import CheckpointState
from window_operator.observe.status import (
    JobStatus,
    PartitionStatus,
    _check_idle,
    _check_topics,
    _check_truncated,
    _check_unread,
    format_status,
)
from window_operator.spark.driver import StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def status(capsys: pytest.CaptureFixture[str], path: Path, bootstrap: str, *more: str) -> Any:
    code = main(["status", "--config", str(path), "--bootstrap-servers", bootstrap, *more])
    return code, capsys.readouterr().out


def test_status_of_a_job_that_ran_then_fell_behind(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, job = unique_name("in"), unique_name("job")
    one_partition_topic(kafka_bootstrap, topic)
    produce_events(kafka_bootstrap, topic, in_order(100))
    doc = job_dict(tmp_path, topic, job)
    path, config = write_job(tmp_path, doc)
    run = StreamingJob(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    run.start()
    assert run.await_termination(300)

    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 0, out
    assert f"{topic}[0]" in out and "healthy: lag 0" in out
    row = next(line for line in out.splitlines() if line.startswith(f"{topic}[0]"))
    assert row.split()[1:4] == ["100", "100", "0"]  # committed, end, lag
    # max event time of the partition (T0 + 24.75 s), its watermark 5 s (lateness) behind
    assert row.split()[4:] == ["2023-11-14", "22:14:24", "2023-11-14", "22:14:19"]
    assert "task 0" in out and "local store" in out

    produce_events(kafka_bootstrap, topic, in_order(30))
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1
    assert "UNHEALTHY: behind: 30 input records wait for the next run" in out

    # read twice, 3 s apart, while 20 more arrive: every line tells the second reading
    more = threading.Timer(0.5, produce_events, (kafka_bootstrap, topic, in_order(20)))
    more.start()
    code, out = status(capsys, path, kafka_bootstrap, "--interval", "3")
    more.join()
    assert code == 1
    assert "UNHEALTHY: lag growing: 30 -> 50 in 3 s" in out
    assert "UNHEALTHY: behind: 50 input records wait for the next run" in out
    row = next(line for line in out.splitlines() if line.startswith(f"{topic}[0]"))
    assert row.split()[1:4] == ["100", "150", "50"]

    # the same job run with a 1 s trigger: behind once no batch ran for 2 triggers
    streaming, _ = write_job(tmp_path, {**doc, "spark": {"trigger": "1s"}}, "streaming.yaml")
    time.sleep(2.5)
    code, out = status(capsys, streaming, kafka_bootstrap, "--max-idle-triggers", "2")
    assert code == 1
    assert "UNHEALTHY: behind: 50 input records wait, but no batch ran for" in out
    assert "(2 triggers of 1 s): is the job running?" in out


def test_status_of_a_job_that_never_ran(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_name("in")
    one_partition_topic(kafka_bootstrap, topic)
    path, _ = write_job(tmp_path, job_dict(tmp_path, topic, "never-ran"))
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1
    assert out.strip() == (
        f"UNHEALTHY: job 'never-ran' has never run: its Spark checkpoint "
        f"{tmp_path}/state/never-ran/spark-checkpoint holds no micro-batch "
        "(start it with `window-operator run`)"
    )


@pytest.mark.parametrize("discovery", [None, "1m"])
def test_a_partition_a_long_running_job_without_discovery_never_reads_is_a_problem(
    tmp_path: Path, discovery: str | None
) -> None:
    """With ``partition_discovery`` off, records in a partition added while the workers
    run wait for a restart: status says so, where it said healthy as long as the other
    partitions kept the workers busy (a helper's partition-growth test)."""
    spark = {"mode": "long_running", "partition_discovery": discovery}
    config = job_config(tmp_path, "clicks", "unread", spark=spark)
    status = JobStatus("unread", CheckpointState(tmp_path, last_planned=3, last_committed=3))
    status.partitions = [
        PartitionStatus("clicks", 0, 500, 500, None, None),
        PartitionStatus("clicks", 2, None, 75, None, None),  # added, never read
        PartitionStatus("clicks", 3, None, 0, None, None),  # added, empty
        PartitionStatus("clicks", 4, None, 40, None, None, 40),  # its records expired
    ]
    assert [p.lag for p in status.partitions] == [0, 75, 0, 0]
    _check_unread(config, status)
    if discovery is None:
        assert status.problems == [
            "not read: 75 records wait in clicks[2], which the job's workers do not read "
            "(spark.partition_discovery is off): restart the job to read them"
        ]
    else:  # the workers start again with it within the discovery interval
        assert status.healthy


def test_store_sizes_keep_their_fraction() -> None:
    """Before, the division was of integers: 2.2 MiB showed as 2.0 MB, 1.9 GiB as 1.0 GB."""
    from window_operator.observe.status import _size

    sizes = [None, 5, 1024, 2_302_270, int(1.9 * 2**30), 5 * 2**40]
    assert [_size(n) for n in sizes] == [
        "not on this host", "5 B", "1.0 KiB", "2.2 MiB", "1.9 GiB", "5120.0 GiB"
    ]  # fmt: skip


def test_a_missing_input_topic_and_positions_past_the_end_are_problems(
    tmp_path: Path,
) -> None:
    """``status`` said healthy for a job whose input topic was deleted (``run`` refuses
    it), and for one whose topic was created again with fewer records than the job had
    read (``run`` stops with ``InputGapError``): a helper's operations test."""
    config = job_config(tmp_path, "clicks", "gone")
    status = JobStatus("gone", CheckpointState(tmp_path, last_planned=3, last_committed=3))
    _check_topics(config, status, {}, "kafka:9092")
    assert status.problems == [
        "input topic 'clicks' does not exist on kafka:9092: the job cannot run until it is created"
    ]
    status = JobStatus("gone", CheckpointState(tmp_path, last_planned=3, last_committed=3))
    _check_topics(config, status, {"clicks": 2}, "kafka:9092")
    status.partitions = [
        PartitionStatus("clicks", 0, 105, 30, None, None),  # recreated: 30 < 105
        PartitionStatus("clicks", 1, 40, 40, None, None),
        PartitionStatus("clicks", 2, None, 7, None, None),
    ]
    _check_truncated(status)
    assert status.problems == [
        "input behind the job: the checkpoint's positions are past the end of clicks[0] "
        "105 > 30 (the topic was created again or truncated); the job stops with "
        "InputGapError there: see the README's Gaps"
    ]


@pytest.mark.parametrize("unit", ["batch", "epoch"])
def test_a_streaming_job_that_ran_nothing_for_some_triggers_is_not_running(
    tmp_path: Path, unit: str
) -> None:
    """A stopped or killed job with no input waiting was 'healthy: lag 0' for ever: a
    running one runs a batch, timer pass or epoch every trigger, input or not."""
    config = job_config(tmp_path, "clicks", "stopped", spark={"trigger": "2s"})
    now = 1_800_000_000_000

    def status_after(quiet_ms: int) -> JobStatus:
        checkpoint = CheckpointState(
            tmp_path, last_planned=3, last_committed=3, last_activity_ms=now - quiet_ms,
            unit=unit,
        )  # fmt: skip
        status = JobStatus("stopped", checkpoint, now_ms=now)
        status.partitions = [PartitionStatus("clicks", 0, 500, 500, None, None)]
        _check_idle(config, status, 3)
        return status

    assert status_after(5_000).healthy  # within 3 triggers of 2 s
    ran = "an epoch" if unit == "epoch" else "a batch or a timer pass"
    assert status_after(42_000).problems == [
        f"not running: the job ran nothing for 42 s (3 triggers of 2 s), where a running "
        f"job runs {ran} every trigger"
    ]
    available_now = job_config(tmp_path, "clicks", "stopped")  # stops by itself
    status = status_after(0)
    status.problems.clear()
    status.now_ms += 3_600_000
    _check_idle(available_now, status, 3)
    assert status.healthy


def test_the_status_header_says_when_there_is_no_watermark_yet(tmp_path: Path) -> None:
    checkpoint = CheckpointState(tmp_path, last_planned=0, last_committed=0)
    header = format_status(JobStatus("fresh", checkpoint)).splitlines()[0]
    assert header.endswith("watermark none yet"), header  # was "watermark - UTC"

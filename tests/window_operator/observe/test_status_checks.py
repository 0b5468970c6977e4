"""The checks of ``window-operator status``, one by one, on made-up readings (no broker,
no Spark: ``test_status.py`` runs them on real jobs)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from jobkit import job_config

from window_operator.config import JobConfig
from window_operator.kafka_admin import BrokerUnreachableError
from window_operator.observe.checkpoint import CheckpointState, read_checkpoint
from window_operator.observe.heartbeat import Beat
from window_operator.observe.status import (
    JobStatus,
    PartitionStatus,
    _check_alive,
    _check_idle,
    _check_recreated,
    _check_topics,
    _check_truncated,
    _check_unread,
    format_status,
)
from window_operator.runtime.starts import check_input_topics


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
        "105 > 30 (the topic was deleted and created again, or the broker lost records the "
        "job had read); the job stops with InputGapError there: see the README's Gaps"
    ]


def test_the_status_header_says_when_the_last_batch_committed(tmp_path: Path) -> None:
    """It said when Spark planned the batch: for a batch that ran a minute, a minute
    before its results were out."""
    for log in ("offsets", "commits"):
        (tmp_path / log).mkdir()
    planned, committed = 1_800_000_000_000, 1_800_000_060_000
    (tmp_path / "offsets" / "0").write_text(
        f'v1\n{{"batchTimestampMs":{planned}}}\n{{"clicks":{{"0":5}}}}\n'
    )
    (tmp_path / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    os.utime(tmp_path / "commits" / "0", (committed / 1000, committed / 1000))
    checkpoint = read_checkpoint(tmp_path, "micro_batch")
    assert (checkpoint.batch_time_ms, checkpoint.committed_ms) == (planned, committed)
    header = format_status(JobStatus("job", checkpoint)).splitlines()[0]
    assert header.startswith("job job: last batch 0 committed at 2027-01-15 08:01:00 UTC"), header


def test_the_status_header_says_when_there_is_no_watermark_yet(tmp_path: Path) -> None:
    checkpoint = CheckpointState(tmp_path, last_planned=0, last_committed=0)
    header = format_status(JobStatus("fresh", checkpoint)).splitlines()[0]
    assert header.endswith("watermark none yet"), header  # was "watermark - UTC"


def test_a_streaming_job_whose_run_ended_or_whose_heartbeat_is_old_is_not_running(
    tmp_path: Path,
) -> None:
    """A stopped or killed job with no input waiting was 'healthy: lag 0' for ever."""
    streaming = job_config(tmp_path, "clicks", "beat", spark={"trigger": "2s"})
    now = 1_800_000_000_000

    def problems(config: JobConfig, beat: Beat | None) -> list[str]:
        checkpoint = CheckpointState(tmp_path, last_planned=3, last_committed=3)
        status = JobStatus("beat", checkpoint, now_ms=now)
        _check_alive(config, status, beat)
        return status.problems

    assert problems(streaming, Beat(now - 5_000, "h1", 42)) == []  # beating
    assert problems(streaming, Beat(now - 45_000, "h1", 42)) == [
        "not running: no heartbeat for 45 s from its driver (pid 42 on h1): killed, or its "
        "host is down or hangs"
    ]
    at = 1_800_000_000_000 - 60_000
    assert problems(streaming, Beat(at, "h1", 42, stopped=True)) == [
        "not running: the job stopped at 2027-01-15 07:59:00 UTC (start it with "
        "`window-operator run`)"
    ]
    assert problems(streaming, None) == []  # not run by `run`: not judged
    available_now = job_config(tmp_path, "clicks", "beat")  # stops by itself
    assert problems(available_now, Beat(at, "h1", 42, stopped=True)) == []
    # a streaming job's `run --available-now` read what was there and stopped, as asked
    # (the quick start's first `status` said UNHEALTHY); killed, it is still not running
    once = Beat(at, "h1", 42, stopped=True, available_now=True)
    assert problems(streaming, once) == []
    assert problems(streaming, Beat(now - 45_000, "h1", 42, available_now=True)) == [
        "not running: no heartbeat for 45 s from its driver (pid 42 on h1): killed, or its "
        "host is down or hangs"
    ]
    lines = format_status(
        JobStatus("beat", CheckpointState(tmp_path, last_planned=3, last_committed=3), beat=once)
    )
    assert (
        "its last run was an available-now run (it stops by itself), ended at 2027-01-15 "
        "07:59:00 UTC" in lines.splitlines()
    )
    # a failed run said the same as one stopped with Ctrl-C: now it says why
    failed = Beat(at, "h1", 42, stopped=True, failure="the streaming query stopped: OSError")
    for config in (streaming, available_now):
        for run in (failed, replace(failed, available_now=True)):
            assert problems(config, run) == [
                "not running: the job failed at 2027-01-15 07:59:00 UTC: the streaming query "
                "stopped: OSError (start it again with `window-operator run` once that is "
                "mended)"
            ]


def test_an_input_topic_created_again_is_a_problem(tmp_path: Path) -> None:
    """The job refuses to start over it (``runtime.starts.check_input_topics``)."""
    config = job_config(tmp_path, "clicks", "ids")
    check_input_topics(Path(str(config.spark.checkpoint_dir)), {"clicks": "id-1"})
    checkpoint = CheckpointState(tmp_path, last_planned=3, last_committed=3)

    def problems(ids: dict[str, str]) -> list[str]:
        status = JobStatus("ids", checkpoint, now_ms=0)
        _check_recreated(config, status, ids)
        return status.problems

    assert problems({"clicks": "id-1"}) == problems({}) == []
    assert problems({"clicks": "id-2"}) == [
        "input topic 'clicks' was deleted and created again (its Kafka topic id is not the "
        "one the job kept): the job refuses to start over it (InputRecreatedError); start "
        "it afresh"
    ]


def test_a_job_that_started_after_its_last_batch_is_said_to_be_starting(tmp_path: Path) -> None:
    """A restarted job restoring its stores, its heartbeat fresh, was asked 'is the job
    running?' (the observability review saw it 25 s into a restore)."""
    config = job_config(tmp_path, "clicks", "idle", spark={"trigger": "5s"})
    now = 1_800_000_000_000
    checkpoint = CheckpointState(  # its last batch ran before the restart
        tmp_path, last_planned=3, last_committed=3, last_activity_ms=now - 600_000
    )

    def problems(beat: Beat | None) -> list[str]:
        status = JobStatus("idle", checkpoint, now_ms=now)
        status.partitions = [PartitionStatus("clicks", 0, 100, 900, None, None)]
        _check_idle(config, status, 3, beat)
        return status.problems

    starting = Beat(now - 1_000, "h1", 42, started_ms=now - 25_000)
    assert problems(starting) == [
        "behind: 800 input records wait; the job started 25 s ago and has run no batch yet "
        "(restoring its stores, or planning its first batch: see its log)"
    ]
    asked = "behind: 800 input records wait, but no batch ran for 600 s (3 triggers of 5 s): "
    for beat in (
        None,  # not run by `run`
        Beat(now - 1_000, "h1", 42),  # an older version's heartbeat
        Beat(now - 60_000, "h1", 42, started_ms=now - 70_000),  # its heartbeat is old
    ):
        assert problems(beat) == [asked + "is the job running?"]
    # its last run ended (an available-now run Ctrl-C'd, or stopped): it knows, and
    # asked "is the job running?" before
    for available_now in (False, True):
        stopped = Beat(now - 1_000, "h1", 42, stopped=True, started_ms=now - 25_000,
                       available_now=available_now)  # fmt: skip
        assert problems(stopped) == [
            "behind: 800 input records wait for the next run (the last one ended at "
            "2027-01-15 07:59:59 UTC)"
        ]
    # running, its heartbeat fresh, started before its last batch: a batch that takes
    # longer than the triggers allowed (a walkthrough saw a 25 s batch of 3,000 records
    # asked "is the job running?" 22 s into it, with a 1 s trigger)
    running = Beat(now - 1_000, "h1", 42, started_ms=now - 900_000)
    assert problems(running) == [
        "behind: 800 input records wait, and no batch or timer pass began or ended for 600 "
        "s (3 triggers of 5 s), though the job runs (its heartbeat 1 s ago): a batch that "
        "slow, or one stuck (see its log: each batch's line gives its time)"
    ]


def test_status_says_how_often_the_workers_failed_in_the_run(tmp_path: Path) -> None:
    checkpoint = CheckpointState(tmp_path, last_planned=0, last_committed=0)
    quiet = JobStatus("job", checkpoint, beat=Beat(5, "h", 1))
    assert "workers failed" not in format_status(quiet)
    beat = Beat(5, "h", 1, restarts=2, last_restart_ms=1_800_000_000_000, last_restart="boom")
    lines = format_status(JobStatus("job", checkpoint, beat=beat)).splitlines()
    assert lines[2] == (
        "workers failed and started again 2 times in this run, last at "
        "2027-01-15 08:00:00 UTC: boom"
    )
    stopped = Beat(5, "h", 1, stopped=True, restarts=1, last_restart_ms=0, last_restart="x")
    text = format_status(JobStatus("job", checkpoint, beat=stopped))
    assert "started again once in its last run" in text


def test_status_names_the_partition_the_watermark_waits_for(tmp_path: Path) -> None:
    """One partition got no records for minutes: the watermark stands at its time. The
    table marks it, and a line says why it stays there (it was a guess from the
    per-partition watermarks before)."""
    from window_operator.kernel import ClockState
    from window_operator.observe.status import _note_holding

    t = 1_800_000_000_000
    lateness = 5_000
    clock = ClockState(watermark=t - lateness)
    checkpoint = CheckpointState(tmp_path, last_planned=3, last_committed=3, clock=clock)
    parts = [
        PartitionStatus("clicks", 0, 90, 90, t + 300_000, t + 300_000 - lateness),
        PartitionStatus("clicks", 1, 40, 40, t, t - lateness),  # nothing since
        PartitionStatus("clicks", 2, 80, 95, t + 120_000, t + 120_000 - lateness),
    ]
    status = JobStatus("job", checkpoint, partitions=parts)
    assert [p.partition for p in status.holding] == [1]
    _note_holding(job_config(tmp_path, "clicks", "job"), status)
    assert status.notes == [
        "the watermark waits for clicks[1], whose max event time is 5m behind the newest "
        "partition's: it has no records waiting, and a partition that gets none holds the "
        "watermark until it does (watermark.idle_timeout lets it go idle)"
    ]
    lines = format_status(status).splitlines()
    marked = [line for line in lines if line.endswith("< the job's watermark")]
    assert len(marked) == 1 and marked[0].startswith("clicks[1]")
    assert status.notes[0] in lines
    # with records waiting there, or an idle timeout, the reason is left out
    waiting = [parts[0], replace(parts[1], end=60), parts[2]]
    status = JobStatus("job", checkpoint, partitions=waiting)
    _note_holding(job_config(tmp_path, "clicks", "job"), status)
    assert status.notes[0].endswith("behind the newest partition's")
    status = JobStatus("job", checkpoint, partitions=parts)
    idle = job_config(tmp_path, "clicks", "job", watermark={"idle_timeout": "1m"})
    _note_holding(idle, status)
    assert status.notes[0].endswith("behind the newest partition's")
    # no broker answering: the ends are unknown, so nothing is said of records waiting
    unknown = [replace(p, end=None) for p in parts]
    status = JobStatus("job", checkpoint, partitions=unknown)
    _note_holding(job_config(tmp_path, "clicks", "job"), status)
    assert status.notes[0].endswith("behind the newest partition's")
    status.unreachable = BrokerUnreachableError("127.0.0.1:9", 5.0, "refused")
    assert status.notes[0] in format_status(status).splitlines()
    # every partition at one time, or a watermark at none of them: nothing to name
    even = [replace(p, max_event_time=t, watermark=t - lateness) for p in parts]
    assert JobStatus("job", checkpoint, partitions=even).holding == []
    moved = replace(checkpoint, clock=ClockState(watermark=t + 100_000))
    assert JobStatus("job", moved, partitions=parts).holding == []
    # every partition idle (watermark.idle_timeout): the freshest leads, and the
    # watermark stands at the newest partition's, which waits for nothing
    newest = replace(checkpoint, clock=ClockState(watermark=t + 300_000 - lateness))
    status = JobStatus("job", newest, partitions=parts)
    assert status.holding == []
    _note_holding(idle, status)
    assert status.notes == []
    assert not any(
        line.endswith("< the job's watermark") for line in format_status(status).splitlines()
    )


def test_status_of_a_self_join_names_its_one_topic(tmp_path: Path) -> None:
    """Both inputs of a self-join read one topic: the clock keeps the event times of
    each input (source 0 and 1), and ``status`` raised IndexError on the second."""
    from window_operator.config.loading import load_any_config
    from window_operator.kernel import ClockState, InputPosition
    from window_operator.observe.status import _partitions

    job = tmp_path / "self.yaml"
    job.write_text(
        "job: selfj\njoin:\n"
        "  left: {name: a, topic: events, timestamp: ts}\n"
        "  right: {name: b, topic: events, timestamp: ts}\n"
        "  on: [k]\n  range: 5s\n"
    )
    config = load_any_config(job)
    t = 1_800_000_000_000
    clock = ClockState(
        watermark=t,
        max_ts={InputPosition(0, 0): t, InputPosition(1, 0): t, InputPosition(1, 1): t - 5},
    )
    cp = CheckpointState(tmp_path, last_planned=0, last_committed=0,
                         committed={("events", 0): 10, ("events", 1): 4}, clock=clock)  # fmt: skip
    parts = _partitions(config, None, cp, {"events": 2})
    assert [(p.topic, p.partition, p.max_event_time) for p in parts] == [
        ("events", 0, t),
        ("events", 1, t - 5),
    ]

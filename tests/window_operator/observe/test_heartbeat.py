"""The heartbeat a running job writes for ``status``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from window_operator.observe.heartbeat import HEARTBEAT_FILE, Beat, Heartbeat, read_heartbeat


def test_a_heartbeat_beats_while_it_runs_and_says_when_it_stopped(tmp_path: Path) -> None:
    directory = tmp_path / "spark-checkpoint"  # made by the first beat
    assert read_heartbeat(directory) is None
    heartbeat = Heartbeat(directory, every_s=0.05).start()
    first = read_heartbeat(directory)
    assert first is not None and not first.stopped and first.pid == os.getpid()
    time.sleep(0.3)
    later = read_heartbeat(directory)
    assert later is not None and later.at_ms > first.at_ms and not later.stopped
    heartbeat.stop()
    heartbeat.stop()  # a second stop does nothing
    last = read_heartbeat(directory)
    assert last is not None and last.stopped and last.at_ms >= later.at_ms
    assert last.failure is None


def test_a_heartbeat_says_why_the_job_failed(tmp_path: Path) -> None:
    heartbeat = Heartbeat(tmp_path, every_s=0.05).start()
    heartbeat.stop("the streaming query stopped: ValueError: too big")
    last = read_heartbeat(tmp_path)
    assert last is not None and last.stopped
    assert last.failure == "the streaming query stopped: ValueError: too big"
    # one an older version wrote, without the field
    (tmp_path / HEARTBEAT_FILE).write_text('{"at_ms": 5, "host": "h", "pid": 1, "stopped": true}')
    assert read_heartbeat(tmp_path) == Beat(5, "h", 1, stopped=True, failure=None)


def test_an_unreadable_heartbeat_is_none(tmp_path: Path) -> None:
    (tmp_path / HEARTBEAT_FILE).write_text("{not json")
    assert read_heartbeat(tmp_path) is None


def test_a_heartbeat_counts_the_failures_of_the_workers_of_its_run(tmp_path: Path) -> None:
    heartbeat = Heartbeat(tmp_path, every_s=60).start()
    heartbeat.worker_failed(1_000, "WorkerLostError: worker 1 died")
    heartbeat.worker_failed(2_000, "ConnectionError: broker away")
    beat = read_heartbeat(tmp_path)  # written at once, not at the next beat
    assert beat is not None and not beat.stopped and beat.restarts == 2
    assert (beat.last_restart_ms, beat.last_restart) == (2_000, "ConnectionError: broker away")
    heartbeat.stop()
    heartbeat.worker_failed(3_000, "after the end")  # not once stopped
    last = read_heartbeat(tmp_path)
    assert last is not None and last.stopped and last.restarts == 2

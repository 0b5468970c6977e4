"""The heartbeat a running job writes for ``status``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from window_operator.observe.heartbeat import (
    HEARTBEAT_FILE,
    Beat,
    Heartbeat,
    read_heartbeat,
    running_elsewhere,
)


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


def test_a_heartbeat_says_whether_its_run_stops_by_itself(tmp_path: Path) -> None:
    heartbeat = Heartbeat(tmp_path, every_s=60, available_now=True).start()
    heartbeat.stop()
    last = read_heartbeat(tmp_path)
    assert last is not None and last.stopped and last.available_now
    Heartbeat(tmp_path, every_s=60).start().stop()
    last = read_heartbeat(tmp_path)
    assert last is not None and not last.available_now


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


def _beat_of(directory: Path, **fields: object) -> None:
    doc = {"at_ms": int(time.time() * 1000), "host": socket.gethostname(), "pid": 1}
    doc.update({"stopped": False, **fields})
    (directory / HEARTBEAT_FILE).write_text(json.dumps(doc))


def test_a_second_copy_of_a_running_job_is_told_from_the_heartbeat(tmp_path: Path) -> None:
    """``run`` refuses a second copy over the same checkpoint at once (before: Spark's
    CONCURRENT_STREAM_LOG_UPDATE stack, or 4 minutes on locked stores)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _beat_of(tmp_path, pid=sleeper.pid)
        told = running_elsewhere(tmp_path)
        assert told is not None and f"process {sleeper.pid} on this host" in told
    finally:
        sleeper.kill()
        sleeper.wait()
    assert running_elsewhere(tmp_path) is None  # its driver is gone: killed
    if Path("/proc").is_dir():  # killed, not reaped yet: a start just after a kill -9
        zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            zombie.kill()
            deadline = time.monotonic() + 10
            while b") Z " not in Path(f"/proc/{zombie.pid}/stat").read_bytes():
                assert time.monotonic() < deadline, "the child did not end"
                time.sleep(0.01)
            _beat_of(tmp_path, pid=zombie.pid)
            assert running_elsewhere(tmp_path) is None
        finally:
            zombie.wait()
    _beat_of(tmp_path, pid=os.getpid())
    assert running_elsewhere(tmp_path) is None  # this process
    _beat_of(tmp_path, host="other-host", pid=7)
    told = running_elsewhere(tmp_path)
    assert told is not None and "process 7 on other-host" in told
    _beat_of(tmp_path, host="other-host", pid=7, stopped=True)
    assert running_elsewhere(tmp_path) is None  # it stopped
    _beat_of(tmp_path, host="other-host", pid=7, at_ms=int(time.time() * 1000) - 60_000)
    assert running_elsewhere(tmp_path) is None  # stale: killed there

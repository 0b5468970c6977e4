"""The job's Ctrl-C and SIGTERM handler (``run_observed``): a first signal lets the
running work finish, a second stops the process at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobkit import job_config

from window_operator.observe.attach import _scrubbed

#: A process that installs the handler, then waits as a start-up pass does (the first
#: signal only sets the flag the job looks at between batches).
_WAITS = """
import signal, sys, threading, time
from window_operator.observe.attach import on_interrupt
flag = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: on_interrupt(flag))
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
print("first only" if flag.is_set() else "none", flush=True)
"""


def run_signalled(signals: int, wait_s: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WAITS, str(wait_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    assert proc.stderr is not None
    seen = ""
    for _ in range(signals):
        proc.terminate()
        seen += proc.stderr.readline()  # handled (two at once would be one signal)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, seen + err)


def test_a_first_signal_lets_the_work_finish() -> None:
    done = run_signalled(1, 2)
    assert (done.returncode, done.stdout) == (0, "first only\n"), done.stderr
    assert "stopping after the running micro-batch, epoch or start-up pass" in done.stderr
    assert "(Ctrl-C or SIGTERM again to stop at once)" in done.stderr


def test_a_second_signal_stops_at_once() -> None:
    """A start-up pass can wait minutes for a broker: before, a second Ctrl-C or
    SIGTERM did nothing more, and the job could not be stopped short of SIGKILL."""
    done = run_signalled(2, 60)  # it would print after a minute
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert "interrupted again: stopping now" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_failure_kept_for_status_has_no_secret_of_the_kafka_settings(tmp_path: Path) -> None:
    """The heartbeat file is anyone's to read (``status``): a failure quoting a SASL
    password is kept without it, as the log has it."""
    config = job_config(
        tmp_path, "clicks", "s", kafka={"producer": {"sasl.password": "hunter2-secret"}}
    )
    failed = "the streaming query stopped: KafkaError: auth with hunter2-secret refused"
    assert _scrubbed(failed, config) == (
        "the streaming query stopped: KafkaError: auth with *** refused"
    )


def test_a_report_line_holds_the_batch_its_ranges_and_its_tasks(tmp_path: Path) -> None:
    """The ``--report`` line the README documents field by field; a self-join's one
    partition is listed for each of its inputs."""
    import orjson

    from window_operator.kernel import ClockState, InputPosition
    from window_operator.observe.attach import ReportFile
    from window_operator.runtime.exchange import InputRange, MapReport
    from window_operator.runtime.report import TaskReport
    from window_operator.spark.driver import BatchReport

    ranges = [
        MapReport(InputRange(source, "t", 1, 10, 15), 5, 99, {"BAD_JSON": 1}) for source in (0, 1)
    ]
    task = TaskReport(task=2, batch_id=7, rows=8, applied=7, late=1, commits=1)
    clock = ClockState({InputPosition(0, 1): 99}, watermark=94)
    report = ReportFile(str(tmp_path / "r.jsonl"))
    report(BatchReport(7, [task], ranges, clock, 0.25))
    report.close()
    (line,) = (tmp_path / "r.jsonl").read_bytes().splitlines()
    doc = orjson.loads(line)
    assert (doc["batch"], doc["watermark"], doc["seconds"]) == (7, 94, 0.25)
    assert doc["ranges"] == [
        {"input": source, "topic": "t", "partition": 1, "start": 10, "end": 15, "records": 5,
         "rejected": {"BAD_JSON": 1}}
        for source in (0, 1)
    ]  # fmt: skip
    (t,) = doc["tasks"]
    assert {k: t[k] for k in ("task", "rows", "applied", "late", "commits")} == {
        "task": 2, "rows": 8, "applied": 7, "late": 1, "commits": 1
    }  # fmt: skip

"""``run`` stopped while Spark starts (an operations walkthrough): a SIGTERM then was
lost for good (the driver ignored it while Spark's JVM started, so that the JVM would),
and a Ctrl-C could end the driver and leave the JVM running, ignoring SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from obskit import in_order, job_dict, one_partition_topic, produce_events

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table")
def test_a_sigterm_while_spark_starts_stops_the_job_and_its_jvm(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, job = unique_name("in"), unique_name("job")
    one_partition_topic(kafka_bootstrap, topic)
    produce_events(kafka_bootstrap, topic, in_order(20))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_dict(tmp_path, topic, job, trigger="1s")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "run", "--config", str(path),
         "--bootstrap-servers", kafka_bootstrap, "--master", "local[1]"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    app = f"spark.app.name=window-operator-{job}"
    try:
        deadline = time.monotonic() + 120  # a loaded machine starts a JVM slowly
        while not _processes_naming(app) and time.monotonic() < deadline:
            if proc.poll() is not None:  # the driver ended before Spark started: why
                pytest.fail(f"run ended with {proc.returncode}: {proc.communicate()[1][-3000:]}")
            time.sleep(0.05)
        assert _processes_naming(app), "Spark's JVM did not start"
        os.kill(proc.pid, signal.SIGTERM)  # while Spark starts
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    assert "stopping after the running micro-batch, epoch or start-up pass" in err
    deadline = time.monotonic() + 15
    while _processes_naming(app) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_naming(app) == [], "Spark's JVM outlived the driver"


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_ctrl_c_to_a_running_job_lets_the_batch_finish_and_exits_0(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], mode: str
) -> None:
    """Ctrl-C at the terminal (SIGINT to the process group) once the job runs: the
    running micro-batch finishes and ``run`` exits 0, as the README promises. Before,
    PySpark's own SIGINT handler, installed as Spark started, replaced ``run``'s: it
    cancelled every Spark job and ended with py4j tracebacks and exit status 130 (a
    user walkthrough), a crash for the job; long-running workers were cancelled
    instead of committing what they had read."""
    topic, job = unique_name("in"), unique_name("job")
    one_partition_topic(kafka_bootstrap, topic)
    produce_events(kafka_bootstrap, topic, in_order(20))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_dict(tmp_path, topic, job, trigger="1s", mode=mode)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "run", "--config", str(path),
         "--bootstrap-servers", kafka_bootstrap, "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:  # until the first batch is logged (or the run ends)
            seen.append(line)
            if "window_operator.batches: batch 0," in line:
                break
        assert proc.poll() is None, "".join(seen)[-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = "".join(seen) + rest
    assert proc.returncode == 0, err[-3000:]
    assert "stopping after the running micro-batch, epoch or start-up pass" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]

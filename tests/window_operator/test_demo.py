"""The README's main command keeps working: the demo runs end to end and stops by itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# a job in its own process, outside the spark-jobs group (the longest serial part of the
# suite): it kills nothing, and its one wait (90 s for the job to take every record, which
# it does in a few seconds) leaves room for running beside a job of that group
pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_demo_prints_window_results_and_stops(
    kafka_bootstrap: str, tmp_path: Path, mode: str
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TMPDIR": str(temp)}
    chart = tmp_path / "chart.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "window_operator",
            "demo",
            "--events",
            "800",
            "--seconds",
            "8",
            "--chart",
            str(chart),
            "--mode",
            mode,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("kind")
    assert any(line.startswith("ON_TIME") for line in lines[1:])
    assert "800 events applied, 3 rejected" in proc.stderr
    # the closing summary comes from the job's metrics, and the chart is where it says
    assert "rejected by reason: BAD_JSON 1, BAD_TIMESTAMP 1, MISSING_TIMESTAMP 1" in proc.stderr
    assert "input lag 0" in proc.stderr
    assert f"late updates marked): {chart}" in proc.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Failed to cancel job group" not in proc.stderr
    assert "is falling behind" not in proc.stderr  # Spark warming up: noise to a new user
    # the run's state and checkpoint are gone with it (before, 2 MB stayed in /tmp)
    assert list(temp.glob("window-operator-demo-*")) == []


def test_ctrl_c_stops_the_demo_after_the_running_batch_with_its_summary(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Ctrl-C at the terminal (SIGINT to the process group) while the clicks stream:
    the running micro-batch finishes, the summary is printed, exit status 130. Before,
    the stop cancelled the batch and printed about 1,100 lines of Java and py4j stack
    (a user walkthrough), and no summary."""
    import signal
    import time

    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TMPDIR": str(tmp_path)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "demo", "--events", "3000", "--seconds", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        first = demo.stdout.readline()  # the header: the job runs and the clicks stream
        assert first.startswith("kind"), first
        time.sleep(5)
        os.killpg(demo.pid, signal.SIGINT)
        _, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    assert demo.returncode == 130, err[-3000:]
    assert "stopping after the running micro-batch" in err
    assert "events applied" in err and "late updates marked" in err, err[-3000:]
    assert "Traceback" not in err and "Exception" not in err, err[-3000:]
    assert len(err.splitlines()) < 30, err[-3000:]

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
    # the run's state and checkpoint are gone with it (before, 2 MB stayed in /tmp)
    assert list(temp.glob("window-operator-demo-*")) == []

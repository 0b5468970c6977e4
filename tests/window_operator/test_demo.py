"""The README's main command keeps working: the demo runs end to end and stops by itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_demo_prints_window_results_and_stops(kafka_bootstrap: str) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "window_operator", "demo", "--events", "800", "--seconds", "8"],
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

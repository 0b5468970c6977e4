"""``window-operator broker``: a local broker that stops with its command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient


def _children(pid: int) -> list[int]:
    """The process ids whose parent is ``pid`` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_stops_the_broker_and_its_process(tmp_path: Path) -> None:
    cmd = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "broker", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert cmd.stdout is not None
        line = cmd.stdout.readline().strip()
        assert line.startswith("KAFKA_BOOTSTRAP_SERVERS="), line
        bootstrap = line.split("=", 1)[1]
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20)
        assert metadata.brokers, "the broker answers"
        children = _children(cmd.pid)
        assert children, "the broker runs as a child process"
        os.kill(cmd.pid, signal.SIGTERM)
        assert cmd.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), "the broker process was stopped"
    finally:
        if cmd.poll() is None:
            cmd.kill()


def test_a_port_in_use_is_one_line_naming_it(tmp_path: Path) -> None:
    """Before, the broker started on a taken port died with "broker exited with status
    1" (its reason only in its log), or the command reported the other broker there as
    its own."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "window_operator", "broker", "--port", str(port),
             "--data-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"window-operator: port {port} on 127.0.0.1 is in use (another broker?): choose "
        "another with --port"
    ]

"""A Kafka-protocol broker for tests and the local demo, without Docker.

Runs the broker binary shipped in the ``noida-db==0.2.2`` wheel (the ``local`` extra)
directly, on a free loopback port with a fresh data directory, and stops it by PID.
Everything else in the project talks to whatever ``KAFKA_BOOTSTRAP_SERVERS`` names;
this module only exists so that a laptop or CI machine without Kafka can run the
demo and the integration tests.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from window_operator.errors import WindowOperatorError
from window_operator.kafka_admin import BrokerUnreachableError, wait_for_broker

__all__ = ["BrokerError", "LocalBroker", "free_port"]


class BrokerError(WindowOperatorError, RuntimeError):
    """The local broker could not be started or did not answer."""


#: Where :func:`free_port` looks first: below Linux's ephemeral range (32768-60999), so
#: that clients still retrying a stopped broker's port never reach a socket the system
#: gave out meanwhile (Spark's one-connection result servers take ephemeral ports).
_BROKER_PORTS = range(20_000, 32_768)


def free_port() -> int:
    """A TCP port on loopback that is free right now (below the ephemeral range where
    one is)."""
    for port in random.sample(_BROKER_PORTS, 50):
        if not port_in_use(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        found: int = s.getsockname()[1]
        return found


def port_in_use(port: int) -> bool:
    """Whether something listens on ``port`` of loopback (connections of a broker that
    stopped, waiting out TIME_WAIT, do not count: a broker started there binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def _last_line(path: Path) -> str:
    """The last non-empty line of a log file ('' when there is none)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _binary() -> Path:
    try:
        path = Path(str(importlib.resources.files("noida_db") / "noida-db"))
    except ModuleNotFoundError:
        raise BrokerError(
            "the local broker needs the noida-db package: pip install 'window-operator[local]' "
            "(or point KAFKA_BOOTSTRAP_SERVERS at a Kafka cluster)"
        ) from None
    if not path.exists():
        raise BrokerError(f"noida-db binary not found at {path}")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@dataclass
class LocalBroker:
    """A noida-db Kafka broker process on loopback.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``data_dir``
    defaults to a fresh temporary directory, removed on stop.
    """

    port: int = 0
    data_dir: Path | None = None
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _own_dir: bool = field(default=False, init=False)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` to give Kafka clients."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> LocalBroker:
        """Start the broker and wait until it answers."""
        if self.process is not None:
            return self
        binary = _binary()
        if not self.port:
            self.port = free_port()
        elif port_in_use(self.port):  # it would answer for the broker already there
            raise BrokerError(
                f"port {self.port} on 127.0.0.1 is in use (another broker?): choose another "
                "with --port"
            )
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="window-operator-broker-"))
            self._own_dir = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path or self.data_dir / "broker.log"
        log = open(log_path, "ab")  # noqa: SIM115
        cmd = [
            str(binary),
            "start",
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        # a session of its own: a Ctrl-C at the terminal reaches the command that runs
        # it, which stops it after its clients (the broker went first, and they logged
        # a refused connection each)
        self.process = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            wait_for_broker(self.bootstrap_servers, timeout_s)
        except BrokerUnreachableError as exc:
            self.stop()
            raise BrokerError(
                f"the local broker on {self.bootstrap_servers} did not answer within "
                f"{timeout_s:g}s ({exc.cause})"
            ) from None
        if self.process.poll() is not None:
            why = _last_line(log_path)
            raise BrokerError(
                f"the broker exited with status {self.process.returncode}"
                + (f": {why} (log: {log_path})" if why else f" (log: {log_path})")
            )
        return self

    def stop(self) -> None:
        """Stop the broker process (by PID) and remove a temporary data directory."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (its data directory stays, for a restart with :meth:`start`)."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self.process is not None and self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)

"""The heartbeat of a running job, for ``status`` to tell a running job from a stopped one.

With input waiting, a job that runs no batch is behind; with none waiting, a stopped job
and an idle one look alike in the checkpoint. So while ``window-operator run`` runs a job
it writes, every :data:`EVERY_S`, a small file into the job's checkpoint directory
saying when, on which host and in which process, and how often its long-running workers
failed and were started again in this run; when the job ends (stopped, finished or
failed) it writes that it stopped. A heartbeat older than :data:`STALE_S` is a job that
was killed (or whose host or process hangs). The times are the driver host's clock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from window_operator.files import write_atomically

__all__ = [
    "EVERY_S",
    "HEARTBEAT_FILE",
    "STALE_S",
    "Beat",
    "Heartbeat",
    "read_heartbeat",
    "running_elsewhere",
]

log = logging.getLogger(__name__)

HEARTBEAT_FILE = "window-operator-heartbeat.json"
#: How often a running job writes its heartbeat.
EVERY_S = 2.0
#: How old a running job's heartbeat may be before ``status`` takes it for gone.
STALE_S = 30.0


@dataclass(frozen=True, slots=True)
class Beat:
    """The last heartbeat: when, from which driver, whether the job had stopped, and
    why it failed where it did (``None``: it stopped as asked, or finished)."""

    at_ms: int
    host: str
    pid: int
    stopped: bool = False
    failure: str | None = None
    #: when the beating run started (``None``: a heartbeat of an older version)
    started_ms: int | None = None
    #: times the long-running workers failed and were started again in this run
    restarts: int = 0
    #: the last of those: when, and why
    last_restart_ms: int | None = None
    last_restart: str | None = None
    #: the run reads what its input holds, then stops (``run --available-now``)
    available_now: bool = False


class Heartbeat:
    """Writes the heartbeat of the job whose checkpoint is ``directory`` (a thread)."""

    def __init__(
        self, directory: str | Path, every_s: float = EVERY_S, *, available_now: bool = False
    ) -> None:
        self.path = Path(directory) / HEARTBEAT_FILE
        self.every_s = every_s
        self.available_now = available_now
        self._started_ms: int | None = None  # set by start
        self._restarts = 0
        self._last_restart: tuple[int, str] | None = None
        self._lock = threading.Lock()  # one write at a time (beats and restarts)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        """Write the first beat and keep beating until :meth:`stop`."""
        self._started_ms = int(time.time() * 1000)
        self._write(stopped=False)
        self._thread = threading.Thread(target=self._beat, name="window-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self, failure: str | None = None) -> None:
        """Stop beating and write that the job stopped, and ``failure``: why it failed
        (``None``: as asked, or finished). A second call does nothing."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._write(stopped=True, failure=failure)

    def worker_failed(self, at_ms: int, reason: str) -> None:
        """The long-running workers failed (``reason``: the cause, without secrets) and
        are started again: written at once (not once the heartbeat stopped)."""
        if self._thread is None:
            return
        with self._lock:
            self._restarts += 1
            self._last_restart = (at_ms, reason)
        self._write(stopped=False)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            self._write(stopped=False)

    def _write(self, *, stopped: bool, failure: str | None = None) -> None:
        try:
            with self._lock:  # the newest doc is written last
                last = self._last_restart
                doc = {
                    "at_ms": int(time.time() * 1000),
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "stopped": stopped,
                    "failure": failure,
                    "started_ms": self._started_ms,
                    "restarts": self._restarts,
                    "last_restart_ms": None if last is None else last[0],
                    "last_restart": None if last is None else last[1],
                    "available_now": self.available_now,
                }
                write_atomically(self.path, json.dumps(doc).encode())
        except OSError as exc:  # a full disk must not stop the job: status only loses it
            log.warning("could not write the heartbeat %s: %s", self.path, exc)


def read_heartbeat(directory: str | Path) -> Beat | None:
    """The last heartbeat written into ``directory`` (``None``: none, or unreadable)."""
    try:
        doc = json.loads((Path(directory) / HEARTBEAT_FILE).read_text())
        # (failure, started_ms, the restarts and available_now: not written by older
        # versions)
        failure, started = doc.get("failure"), doc.get("started_ms")
        restart_ms, restart = doc.get("last_restart_ms"), doc.get("last_restart")
        return Beat(
            int(doc["at_ms"]),
            str(doc["host"]),
            int(doc["pid"]),
            bool(doc["stopped"]),
            None if failure is None else str(failure),
            None if started is None else int(started),
            int(doc.get("restarts") or 0),
            None if restart_ms is None else int(restart_ms),
            None if restart is None else str(restart),
            bool(doc.get("available_now", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_elsewhere(directory: str | Path, now_ms: int | None = None) -> str | None:
    """Whether another driver runs the job whose checkpoint is ``directory`` (its
    heartbeat fresh and not stopped, from another live process of this host, or from
    another host): what it is, for ``run`` to refuse a second copy at once. Before, the
    second copy of a micro-batch job failed in Spark with a Java stack, and one of a
    long-running job waited 4 minutes on its stores and blamed a killed job."""
    beat = read_heartbeat(directory)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if beat is None or beat.stopped or now - beat.at_ms > STALE_S * 1000:
        return None
    age = f"its heartbeat {max(0, now - beat.at_ms) / 1000:.0f} s ago"
    if beat.host == socket.gethostname():
        if beat.pid == os.getpid() or not _alive(beat.pid):
            return None  # a driver killed on this host, or this process
        return f"its driver is process {beat.pid} on this host ({age})"
    return (
        f"its driver is process {beat.pid} on {beat.host} ({age}; a driver killed there "
        f"counts as running until its heartbeat is {STALE_S:.0f} s old)"
    )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: one that ended but that its parent has not reaped
    yet (a zombie, just after a kill -9) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:  # Linux: the state follows the command name, which may hold spaces and ")"
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True  # no /proc here, or it just went
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")

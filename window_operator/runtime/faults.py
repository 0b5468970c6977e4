"""Fault injection and progress tracing for the recovery tests and the crash harness.

Both are inactive unless their environment variables are set; they cost one dictionary
lookup per call otherwise.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["TRACE_ENV", "crash_point", "trace", "tracing"]

#: A file the task appends ``<time> <phase> <task> <batch>`` lines to (harness only).
TRACE_ENV = "WINDOW_OPERATOR_TRACE"


def crash_point(name: str, records: int, batch_id: int = -1) -> None:
    """Kill the whole job here, once (recovery tests).

    Active only when ``WINDOW_OPERATOR_CRASH_AT`` names this point and the file
    ``WINDOW_OPERATOR_CRASH_ONCE`` exists (it is removed first, so one crash only). The
    driver's process group ``WINDOW_OPERATOR_CRASH_PGID`` (driver and JVM; ``run`` sets
    it) gets SIGKILL, and so does this Python worker. Only batches with input count, so
    the crash is mid-batch; ``WINDOW_OPERATOR_CRASH_BATCH`` limits it to one batch id.
    ``WINDOW_OPERATOR_CRASH_SCOPE=worker`` kills this Python worker only.
    """
    if os.environ.get("WINDOW_OPERATOR_CRASH_AT") != name or records == 0:
        return
    only = os.environ.get("WINDOW_OPERATOR_CRASH_BATCH")
    if only is not None and int(only) != batch_id:
        return
    marker = os.environ.get("WINDOW_OPERATOR_CRASH_ONCE")
    if not marker:
        return
    try:
        os.remove(marker)
    except FileNotFoundError:
        return
    if os.environ.get("WINDOW_OPERATOR_CRASH_SCOPE") == "worker":
        os.kill(os.getpid(), signal.SIGKILL)  # this worker alone: the job carries on
    os.killpg(int(os.environ["WINDOW_OPERATOR_CRASH_PGID"]), signal.SIGKILL)
    # PySpark's Python workers run in a process group of their own: end it too, so no
    # worker outlives the job (and holds a store's lock while a restart needs it)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def tracing() -> bool:
    """Whether progress is traced (the crash harness runs the job)."""
    return bool(os.environ.get(TRACE_ENV))


def trace(phase: str, task: int, batch_id: int, detail: str = "") -> None:
    """Record that a task reached a phase of a batch (when ``WINDOW_OPERATOR_TRACE`` is set)."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = f"{time.time():.3f} {phase} {task} {batch_id} {detail}".rstrip().encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)

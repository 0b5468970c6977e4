"""Progress of long work: bars on a terminal, log lines where there is no terminal.

The command line shows a tqdm bar (records/s and time left) for ``restore``,
``simulate`` and ``produce``; a bar appears only when stderr is a terminal, so logs and
tests stay clean (and tqdm is not even imported). A streaming job's changelog catch-up
runs inside Spark tasks on the executors, where no terminal is: :class:`RestoreLog` logs
its progress there instead, once the catch-up has taken longer than
:data:`QUIET_SECONDS`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from stores.changelog import RestoreProgress
from window_operator.observe.logs import ensure_worker_handler

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["QUIET_SECONDS", "RestoreBar", "RestoreLog", "progress_bar"]

log = logging.getLogger("window_operator.restore")

#: A restore shorter than this logs nothing.
QUIET_SECONDS = 5.0
#: Seconds between two progress lines of one restore.
LOG_EVERY_SECONDS = 5.0


def progress_bar(
    *, total: int | None, desc: str, unit: str = "records", unit_scale: bool = True
) -> tqdm[Any] | None:
    """A bar on stderr; ``None`` when stderr is not a terminal (there is nothing to show)."""
    if hasattr(sys.stderr, "isatty") and not sys.stderr.isatty():
        return None  # what tqdm's disable=None decides, without importing it
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=sys.stderr,
        disable=None,  # off when stderr is not a terminal
        dynamic_ncols=True,
        leave=False,
    )


class RestoreLog:
    """Logs the progress of one task's changelog catch-up (executor side).

    Silent for a catch-up under :data:`QUIET_SECONDS`; then a line every
    :data:`LOG_EVERY_SECONDS` with records/s and an estimate, and one when it ends.
    """

    def __init__(self, task: int) -> None:
        self.task = task
        self.started = time.monotonic()
        self.last_line = self.started
        self.logged = False

    def __call__(self, p: RestoreProgress) -> None:
        """Take one progress report of the restore."""
        now = time.monotonic()
        elapsed = now - self.started
        if p.done:
            if self.logged:
                log.info(
                    "task %d: store caught up from %s[%d]: %d records in %.1f s",
                    self.task, p.topic, p.partition, p.records, elapsed,
                )  # fmt: skip
            return
        if elapsed < QUIET_SECONDS or now - self.last_line < LOG_EVERY_SECONDS:
            return
        ensure_worker_handler(log)
        self.logged, self.last_line = True, now
        done = p.position - p.start
        todo = max(1, p.end - p.start)
        rate = p.records / elapsed if elapsed > 0 else 0.0
        left = (p.end - p.position) * (p.records / max(1, done)) / rate if rate else 0.0
        log.info(
            "task %d: catching up its store from %s[%d]: offset %d of %d (%.0f%%), "
            "%d records at %.0f records/s, about %.0f s left",
            self.task, p.topic, p.partition, p.position, p.end, 100.0 * done / todo,
            p.records, rate, left,
        )  # fmt: skip


class RestoreBar:
    """A progress bar over a restore's changelog offsets (``window-operator restore``)."""

    def __init__(self, task: int) -> None:
        self.task = task
        self.started = False
        self.bar: tqdm[Any] | None = None
        self.at = 0

    def __call__(self, p: RestoreProgress) -> None:
        """Move the bar to the report's position."""
        if not self.started:
            self.started = True
            self.bar = progress_bar(
                total=max(0, p.end - p.start), desc=f"task {self.task}", unit="offsets"
            )
            self.at = p.start
        if self.bar is not None:
            self.bar.update(max(0, p.position - self.at))
        self.at = p.position
        if p.done:
            self.close()

    def close(self) -> None:
        """Remove the bar (a later report starts a new one)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.started = False

"""A long-running worker's word that its reader is held back.

A partition with no records for ``watermark.idle_timeout`` stops holding the watermark
back. A reader that cannot read (its worker throttled by slower receivers, or waiting
for its epoch to commit) brings no records either, whatever waits in its partitions,
so without a word from it those partitions would go idle and the records waiting in
them would be late once it reads them. While it is held back, the worker sends every
worker a :class:`~window_operator.runtime.longrun.wire.Held` naming the partitions it
reads in which records wait (the consumer's fetches go on in the background, so it
knows their ends: a silent partition goes idle as before), a few times per idle
timeout, and every state task counts them as active in the epoch that brings it
(:class:`~window_operator.runtime.longrun.inbox.TaskClock`): their idle time does not
run while their reader cannot look, as Flink pauses idleness under backpressure.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from window_operator.kernel import InputPosition
from window_operator.runtime.longrun.mesh import Mesh
from window_operator.runtime.longrun.wire import Held, Kind

__all__ = ["HeldBack"]

#: How many words a held-back reader sends per idle timeout (at least one per epoch).
_PER_TIMEOUT = 4
#: The shortest time between two words (a tiny idle timeout would send thousands).
_MIN_EVERY_S = 0.05


@dataclass
class HeldBack:
    """Sends :class:`Held` through ``mesh`` at most once every ``every_s`` seconds
    (None: never, when no partition ever goes idle)."""

    mesh: Mesh
    every_s: float | None
    _last: float = field(default=-math.inf, init=False)

    @classmethod
    def of(cls, mesh: Mesh, idle_timeout_ms: int | None, epoch_ms: int) -> HeldBack:
        """The word for a job with ``idle_timeout_ms`` and epochs of ``epoch_ms``."""
        if idle_timeout_ms is None:
            return cls(mesh, None)
        every_ms = min(epoch_ms, idle_timeout_ms / _PER_TIMEOUT)
        return cls(mesh, max(_MIN_EVERY_S, every_ms / 1000.0))

    def due(self, now: float) -> bool:
        """Whether a word may go out at monotonic time ``now`` (none was sent in the last
        ``every_s``)."""
        return self.every_s is not None and now - self._last >= self.every_s

    def tell(self, positions: Collection[InputPosition], now: float) -> bool:
        """Tell every worker that the reader of ``positions`` (those in which records
        wait) is held back, at monotonic time ``now``, if a word is :meth:`due`; whether
        it told."""
        if not self.due(now) or not positions:
            return False
        message = Held(tuple(sorted(positions)))
        for worker in range(self.mesh.workers):
            self.mesh.send(worker, Kind.HELD, message)
        self._last = now
        return True

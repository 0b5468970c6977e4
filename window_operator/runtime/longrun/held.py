"""A long-running worker's word that its reader is held back.

A partition with no records for ``watermark.idle_timeout`` stops holding the watermark
back. A reader that cannot read (its worker throttled by slower receivers, or waiting
for its epoch to commit) brings no records either, whatever waits in its partitions,
so without a word from it those partitions would go idle and the records waiting in
them would be late once it reads them. While it is held back, the worker sends every
worker a :class:`~window_operator.runtime.longrun.wire.Held` naming the partitions it
reads, a few times per idle timeout, and every state task counts them as active in the
epoch that brings it (:class:`~window_operator.runtime.longrun.inbox.TaskClock`): their
idle time does not run while their reader cannot look, as Flink pauses idleness under
backpressure.
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
        return cls(mesh, min(epoch_ms, idle_timeout_ms / _PER_TIMEOUT) / 1000.0)

    def tell(self, positions: Collection[InputPosition], now: float) -> bool:
        """Tell every worker that the reader of ``positions`` is held back, at monotonic
        time ``now``, unless told less than ``every_s`` ago; whether it told."""
        if self.every_s is None or not positions or now - self._last < self.every_s:
            return False
        message = Held(tuple(sorted(positions)))
        for worker in range(self.mesh.workers):
            self.mesh.send(worker, Kind.HELD, message)
        self._last = now
        return True

"""How often a state task counts its live state for its report.

Counting the live keys and windows is a pass over the open state (and, once some of it
is spilled beyond the memory budget, over the store's open range). A task that runs one
micro-batch counts once per batch; a task kept open (the long-running shape) counts at
most every :data:`EVERY_S` seconds, and less often when a count is costly, so that
counting takes at most :data:`SHARE` of its time. In between it repeats the last figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["EVERY_S", "SHARE", "StateFigures", "StateGauge"]

#: The shortest wait between two counts of a task kept open (seconds).
EVERY_S = 5.0
#: The largest share of a task's time its counts may take.
SHARE = 0.05


@dataclass(frozen=True, slots=True)
class StateFigures:
    """A task's state as reported: store bytes on disk, live keys and live windows
    (``-1``: the operator does not tell), messages held per input (a join's)."""

    store_bytes: int = 0
    live_keys: int = -1
    live_windows: int = -1
    held_messages: Mapping[str, int] = field(default_factory=dict)


@dataclass
class StateGauge:
    """When to count a task's state again (see module doc); ``clock`` in seconds."""

    clock: Callable[[], float] = time.monotonic
    every_s: float = EVERY_S
    share: float = SHARE
    last: StateFigures = StateFigures()
    _at: float | None = None
    _wait: float = EVERY_S

    def read(self, count: Callable[[], StateFigures], *, every_time: bool) -> StateFigures:
        """The figures: counted now (``every_time``, the first time, or once the wait
        since the last count is over), else the last ones."""
        now = self.clock()
        if every_time or self._at is None or now - self._at >= self._wait:
            self.last = count()
            cost = self.clock() - now
            self._at = now
            self._wait = max(self.every_s, cost / self.share)
        return self.last

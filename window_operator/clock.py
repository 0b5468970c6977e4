"""What every time-window operator shares: the partition clock and the output hand-over.

:class:`PartitionClock` keeps, per input partition, the max event time and the wall
clock of its last message. The watermark is the min over active partitions of (max
event time - allowed lateness), Jet's coalescing; a partition idle for
``policy.idle_timeout`` of wall clock stops holding it back. :class:`OutputBuffer`
keeps results and rejected records until the standalone API hands them over (the
seed's ``getResult``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from window_operator.policies import NO_WATERMARK, EmitPolicy
from window_operator.results import ErrorRecord, ResultBatch, WindowResult

__all__ = ["OutputBuffer", "PartitionClock"]

IntArray = npt.NDArray[np.int64]


class PartitionClock:
    """Event time and wall time per partition (a mixin over the operator's state)."""

    policy: EmitPolicy
    _max_ts: dict[int, int]
    _last_active: dict[int, int]
    _now: int

    def _advance_max_ts(self, part: IntArray, ts: IntArray) -> None:
        for p in np.unique(part).tolist():
            m = int(ts[part == p].max())
            if m > self._max_ts.get(p, NO_WATERMARK):
                self._max_ts[p] = m

    def _note_wall(self, part: IntArray, wall: IntArray) -> None:
        self._now = max(self._now, int(wall.max()))
        for p in np.unique(part).tolist():
            self._last_active[p] = max(
                self._last_active.get(p, NO_WATERMARK), int(wall[part == p].max())
            )

    def _coalesced_watermark(self) -> int:
        """Min over partitions of (max event time - allowed lateness), idle ones excluded."""
        if not self._max_ts:
            return NO_WATERMARK
        idle = self.policy.idle_timeout
        active = [
            ts
            for p, ts in self._max_ts.items()
            if idle is None or self._now < self._last_active.get(p, self._now) + idle
        ]
        if not active:  # every partition idle: the freshest one leads
            active = [max(self._max_ts.values())]
        return min(active) - self.policy.allowed_lateness


class OutputBuffer:
    """Results and rejected records waiting to be handed over (a mixin)."""

    _results: list[ResultBatch]
    _errors: list[ErrorRecord]

    def get_result(self) -> list[WindowResult]:
        """Hand over (and forget) every window result produced so far."""
        out: list[WindowResult] = []
        for b in self.take_result_batches():
            out.extend(b.to_results())
        return out

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results in columnar form, in emission order."""
        out, self._results = self._results, []
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        out, self._errors = self._errors, []
        return out

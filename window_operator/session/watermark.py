"""The event-time clock: per-partition max event times, idleness, the watermark.

The watermark is the min over active partitions of (max event time - allowed lateness)
and never decreases; advancing it fires the time sessions it passed.
"""

from __future__ import annotations

import numpy as np

from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.session.arrays import IntArray
from window_operator.session.emission import SessionEmitter

__all__ = ["WatermarkClock"]


class WatermarkClock(SessionEmitter):
    """Tracks event and wall time per partition and advances the watermark."""

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

    def _advance_watermark(self, wm: int) -> None:
        if wm <= self._wm:
            return
        self._wm = wm
        if self.by_offsets:
            return
        self._fire()
        if wm < END_OF_TIME:
            # A pending LATE update of a session about to leave retention goes out now:
            # deciding by the watermark keeps the output independent of flush timing.
            sl = self.slots
            pend = self._pending_slots()
            due = pend[sl.last[pend] + self._gap <= wm - self.policy.retention]
            if len(due):
                self._emit_late(due)

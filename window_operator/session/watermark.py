"""The event-time clock: per-partition max event times, idleness, the watermark.

The watermark is the min over active partitions of (max event time - allowed lateness)
and never decreases; advancing it fires the time sessions it passed.
"""

from __future__ import annotations

from window_operator.clock import PartitionClock
from window_operator.policies import END_OF_TIME
from window_operator.session.emission import SessionEmitter

__all__ = ["WatermarkClock"]


class WatermarkClock(SessionEmitter, PartitionClock):
    """Tracks event and wall time per partition and advances the watermark."""

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

"""Input progress: per input partition the last applied offset, the largest event time
and the last wall clock it was active at, and the watermark they imply.
"""

from __future__ import annotations

import numpy as np

from window_operator.join.common import LEFT, RIGHT, BoolArray, IntArray
from window_operator.policies import NO_WATERMARK

__all__ = ["InputProgress"]


class InputProgress:
    """Offsets, event times and wall-clock activity of both inputs' partitions.

    Keys are ``(side, partition)``. ``offsets`` and ``max_ts`` are checkpointed; the
    wall clock (``now``, ``first_wall``, ``last_active``) restarts with the task.
    """

    def __init__(self, idle_timeout: int | None, allowed_lateness: int) -> None:
        self.idle_timeout = idle_timeout
        self.allowed_lateness = allowed_lateness
        self.offsets: dict[tuple[int, int], int] = {}
        self.max_ts: dict[tuple[int, int], int] = {}
        self.now = NO_WATERMARK
        self.first_wall: int | None = None
        self.last_active: dict[tuple[int, int], int] = {}

    def assign_offsets(self, side: int, part: IntArray, off: IntArray) -> IntArray:
        """``off`` with each ``-1`` replaced by the next offset of its partition."""
        auto = off < 0
        if not auto.any():
            return off
        off = off.copy()
        for p in np.unique(part[auto]).tolist():
            in_p = part == p
            nxt = self.offsets.get((side, p), -1) + 1
            if (auto | ~in_p).all():
                where = np.flatnonzero(in_p)
                off[where] = nxt + np.arange(len(where))
                continue
            for i in np.flatnonzero(in_p).tolist():
                if off[i] < 0:
                    off[i] = nxt
                nxt = max(nxt, int(off[i]) + 1)
        return off

    def fresh_mask(self, side: int, part: IntArray, off: IntArray) -> BoolArray:
        """Which messages are not replays (offset above every earlier one of its partition)."""
        fresh = np.empty(len(off), dtype=np.bool_)
        for p in np.unique(part).tolist():
            m = part == p
            o = off[m]
            last = self.offsets.get((side, p), -1)
            prev = np.maximum.accumulate(np.concatenate(([last], o[:-1])))
            fresh[m] = o > prev
        return fresh

    def mark(self, side: int, partition: int, offset: int) -> None:
        """Record ``offset`` of ``partition`` as applied."""
        if offset > self.offsets.get((side, partition), -1):
            self.offsets[(side, partition)] = offset

    def advance_offsets(self, side: int, part: IntArray, off: IntArray) -> None:
        """Record the largest offset per partition as applied."""
        for p in np.unique(part).tolist():
            self.mark(side, p, int(off[part == p].max()))

    def advance_max_ts(self, side: int, part: IntArray, ts: IntArray) -> None:
        """Raise the largest event time per partition."""
        for p in np.unique(part).tolist():
            m = int(ts[part == p].max())
            if m > self.max_ts.get((side, p), NO_WATERMARK):
                self.max_ts[(side, p)] = m

    def note_now(self, now: int) -> None:
        """Advance the wall clock."""
        if self.first_wall is None:
            self.first_wall = now
        self.now = max(self.now, now)

    def note_wall(self, side: int, part: IntArray, wall: IntArray) -> None:
        """Advance the wall clock and each partition's last activity."""
        self.note_now(int(wall.min()))
        self.now = max(self.now, int(wall.max()))
        for p in np.unique(part).tolist():
            key = (side, p)
            w = int(wall[part == p].max())
            if w > self.last_active.get(key, NO_WATERMARK):
                self.last_active[key] = w

    def coalesced_watermark(self) -> int:
        """Min over inputs of (min over active partitions of max ts) - allowed lateness."""
        if not self.max_ts:
            return NO_WATERMARK
        idle = self.idle_timeout
        now = self.now
        started = self.first_wall
        per_side: list[int] = []
        for side in (LEFT, RIGHT):
            parts = [(p, t) for (s, p), t in self.max_ts.items() if s == side]
            if not parts:
                if idle is not None and started is not None and now >= started + idle:
                    continue  # silent since the start for longer than the idle timeout
                return NO_WATERMARK
            active = [
                t
                for p, t in parts
                if idle is None
                or started is None
                or now < self.last_active.get((side, p), started) + idle
            ]
            if active:
                per_side.append(min(active))
        if not per_side:  # everything idle: the freshest partition leads
            per_side = [max(self.max_ts.values())]
        return min(per_side) - self.allowed_lateness

"""When time windows fire, become late, and expire: pure decisions over the watermark.

The model is Flink's ``Trigger``: it holds no state of its own and answers questions
about windows from the watermark (and the settings). A window ``[w, w + size)`` with
``w`` a multiple of ``step``:

* fires ON_TIME when the watermark reaches its end (``w + size <= watermark``);
* is *late* for an event when it had already fired before the event's batch;
* stays updatable while ``w + size + retention > watermark``; frames none of whose
  windows are updatable any more expire.
"""

from __future__ import annotations

from dataclasses import dataclass

from window_operator.arrays import BoolArray, IntArray
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.windows import TimeWindowing

__all__ = ["StartRange", "TimeTrigger"]


@dataclass(frozen=True, slots=True)
class StartRange:
    """Window starts ``lo <= w <= hi`` (multiples of the step)."""

    lo: int
    hi: int


class TimeTrigger:
    """Fire, lateness and expiry decisions of tumbling / hopping windows."""

    def __init__(self, windowing: TimeWindowing, retention: int) -> None:
        self.w = windowing
        self.size = windowing.size
        self.step = windowing.step
        self.retention = retention

    def on_time(self, wm_before: int, wm_after: int) -> StartRange | None:
        """Windows whose end the watermark passed moving from ``wm_before`` to ``wm_after``."""
        hi = self.w.floor(wm_after - self.size)
        lo = NO_WATERMARK if wm_before <= NO_WATERMARK else self.w.ceil(wm_before - self.size + 1)
        return None if lo > hi else StartRange(lo, hi)

    def open_windows(self, wm: int) -> StartRange:
        """Windows that have not fired at watermark ``wm`` (EARLY candidates)."""
        lo = NO_WATERMARK if wm <= NO_WATERMARK else self.w.ceil(wm - self.size + 1)
        return StartRange(lo, END_OF_TIME)

    def retained(self, frames: IntArray, wm: int) -> BoolArray:
        """Events (by frame) whose newest window is still updatable at ``wm``."""
        keep: BoolArray = frames + (self.size + self.retention) > wm
        return keep

    def frame_retained(self, frame: int, wm: int) -> bool:
        """:meth:`retained` of one frame."""
        return frame + self.size + self.retention > wm

    def possibly_evicted(self, frame: int, wm: int) -> bool:
        """Whether every window of the frame fired (it may have left memory)."""
        return frame + self.size <= wm

    def late(self, frame: int, wm: int) -> bool:
        """Whether an event of ``frame`` reaches a window that already fired."""
        return frame + self.step <= wm

    def late_windows(self, frame: int, wm: int) -> range:
        """The fired, still updatable windows containing ``frame`` (starts)."""
        fired_hi = self.w.floor(wm - self.size)
        ret_lo = self.w.ceil(wm - self.size - self.retention + 1)
        lo = max(frame - self.size + self.step, ret_lo)
        hi = min(frame, fired_hi)
        return range(lo, hi + 1, self.step)

    def expiry_cutoff(self, wm: int) -> int | None:
        """Largest frame start whose every window is past retention (None: nothing yet)."""
        if wm <= NO_WATERMARK or wm >= END_OF_TIME:
            return None
        return self.w.floor(wm - self.size - self.retention)

    def evictable_before(self, wm: int) -> int:
        """Frames starting before this have no window left to fire (open frames stay)."""
        return wm - self.size + 1

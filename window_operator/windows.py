"""Time windows and frames (Jet): the event-time axis cut into frames one ``step`` long.

Windows are aligned to the epoch: ``window_start`` is a multiple of ``step``, a window
covers ``[start, start + size)`` in milliseconds and is the combine of its
``size // step`` frames. A tumbling window is the case ``step == size``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["TimeWindowing"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TimeWindowing:
    """Epoch-aligned tumbling (``step == size``) or hopping windows over event time."""

    size: int
    step: int

    def __post_init__(self) -> None:
        if self.step <= 0 or self.size <= 0 or self.size % self.step:
            raise ValueError(
                f"window size ({self.size} ms) must be a positive multiple of step ({self.step} ms)"
            )

    @property
    def frames_per_window(self) -> int:
        """How many frames a window combines."""
        return self.size // self.step

    def frame_of(self, ts: int) -> int:
        """Start of the frame holding event time ``ts`` (floor, also for negative times)."""
        return ts - ts % self.step

    def frames_of(self, ts: IntArray) -> IntArray:
        """Vectorized :meth:`frame_of`."""
        return ts - np.mod(ts, self.step)

    def first_window_of_frame(self, frame: int) -> int:
        """Start of the earliest window containing ``frame``."""
        return frame - self.size + self.step

    def floor(self, t: int) -> int:
        """Largest window start ``<= t``."""
        return t - t % self.step

    def ceil(self, t: int) -> int:
        """Smallest window start ``>= t``."""
        return -((-t) // self.step) * self.step

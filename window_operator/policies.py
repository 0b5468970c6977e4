"""Emission, watermark and retention policies (the seed's early / full size / late arrival).

Policies hold no state: they are frozen settings with small decision helpers. The
aggregator keeps every piece of state in its store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["END_OF_TIME", "NO_WATERMARK", "EmitPolicy", "LateMode"]

#: Wall clock or watermark meaning "the input has ended": every window fires.
END_OF_TIME = 2**62
#: The watermark before any event was seen.
NO_WATERMARK = -(2**62)


class LateMode(enum.StrEnum):
    """How past windows changed by late events are re-emitted."""

    #: Batch LATE results and send them once per ``late_period`` of wall-clock time.
    PERIOD = "period"
    #: Send a LATE result as soon as a late event changes a window.
    PER_ARRIVAL = "per_arrival"
    #: Update the state but never re-emit past windows.
    OFF = "off"


@dataclass(frozen=True, slots=True)
class EmitPolicy:
    """When windows are emitted and how long they stay updatable (all times in ms).

    * ``allowed_lateness``: the watermark of a partition is its max event time minus this.
    * ``idle_timeout``: a partition with no message for this long (wall clock) stops
      holding the watermark back; ``None`` = never.
    * ``early_period``: EARLY results of open windows every period; ``None`` = off.
    * ``late_mode`` / ``late_period``: re-emission of past windows changed by late events.
    * ``retention``: a window stays updatable while ``window_end + retention >
      watermark``; older events go to the error output.
    * ``max_future``: see the field.
    """

    allowed_lateness: int = 0
    idle_timeout: int | None = None
    early_period: int | None = None
    late_mode: LateMode = LateMode.PERIOD
    late_period: int = 10_000
    retention: int = 3_600_000
    #: ``watermark.max_future``: a record given with its arrival time (the library's
    #: ``add_message(..., wall_ms=)``) dated more than this after it is
    #: ``FUTURE_TIMESTAMP``; ``None`` = no limit. (On Kafka and in ``simulate`` the
    #: input plans reject those before the operator: see :mod:`window_operator.arrival`.)
    max_future: int | None = None

    def __post_init__(self) -> None:
        for name in ("allowed_lateness", "retention", "late_period"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.early_period is not None and self.early_period <= 0:
            raise ValueError("early_period must be > 0 (or None to disable)")
        if self.idle_timeout is not None and self.idle_timeout <= 0:
            raise ValueError("idle_timeout must be > 0 (or None to disable)")

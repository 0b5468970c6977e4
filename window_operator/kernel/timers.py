"""Wall-clock emission timers shared by the operators: batched LATE and EARLY results.

The policy (:class:`~window_operator.policies.EmitPolicy`) holds no state; the timer
readings live in :class:`Timers`, which the operator checkpoints. :func:`due` answers
with a small flag set of what to emit now.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from window_operator.policies import NO_WATERMARK, EmitPolicy, LateMode

__all__ = ["TimerAction", "Timers", "due"]


class TimerAction(enum.Flag):
    """What a timer pass must emit."""

    NONE = 0
    #: the LATE period is over: emit the pending LATE updates
    LATE = enum.auto()
    #: the EARLY period is over: emit the open windows that changed
    EARLY = enum.auto()


@dataclass(slots=True)
class Timers:
    """Start of the running LATE period and time of the last EARLY results (checkpointed)."""

    late_since: int | None = None
    last_early: int | None = None
    #: the running LATE period ends at the next reading (the run stops: what is pending
    #: goes out now); not checkpointed
    late_now: bool = False

    def late_marked(self, policy: EmitPolicy, now: int) -> None:
        """A window became pending LATE at wall clock ``now``: start the period if idle."""
        if self.late_since is None and policy.late_mode is LateMode.PERIOD:
            self.late_since = None if now <= NO_WATERMARK else now

    def late_flushed(self) -> None:
        """Nothing is pending LATE any more: the next late mark starts a new period."""
        self.late_since = None

    def to_json(self) -> dict[str, int | None]:
        """Checkpoint fields."""
        return {"late_since": self.late_since, "last_early": self.last_early}

    def load_json(self, doc: dict[str, int | None]) -> None:
        """Take the fields of :meth:`to_json` in place (collaborators hold this object)."""
        self.late_since = doc.get("late_since")
        self.last_early = doc.get("last_early")


def due(policy: EmitPolicy, timers: Timers, now: int, late_pending: bool) -> TimerAction:
    """What to emit at wall clock ``now``; starts periods that were not running yet.

    LATE updates go out once per ``late_period`` after the first pending one; EARLY
    results once per ``early_period``. The first reading only starts each period.
    """
    action = TimerAction.NONE
    if not late_pending:
        # nothing waits any more, though no flush sent it (a pending session merged into
        # one still open): the next late mark starts a new period
        timers.late_since = None
    elif policy.late_mode is LateMode.PERIOD:
        if timers.late_now:
            action |= TimerAction.LATE
        elif timers.late_since is None:
            timers.late_since = now
        elif now >= timers.late_since + policy.late_period:
            action |= TimerAction.LATE
    timers.late_now = False
    if policy.early_period is not None:
        if timers.last_early is None:
            timers.last_early = now
        elif now >= timers.last_early + policy.early_period:
            action |= TimerAction.EARLY
            timers.last_early = now
    return action

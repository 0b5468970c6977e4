"""The record path every operator shares: replays, rejections and what a step did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from window_operator.arrays import BoolArray, IntArray
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.timeunits import iso_ms

__all__ = ["Admission", "LiveState", "StepStats", "retention_error"]


@dataclass(frozen=True, slots=True)
class StepStats:
    """What one call did with its input (``matches``: join pairs produced)."""

    applied: int = 0
    replayed: int = 0
    rejected: int = 0
    late: int = 0
    matches: int = 0

    def __add__(self, other: StepStats) -> StepStats:
        return StepStats(
            self.applied + other.applied,
            self.replayed + other.replayed,
            self.rejected + other.rejected,
            self.late + other.late,
            self.matches + other.matches,
        )


@dataclass(frozen=True, slots=True)
class LiveState:
    """What an operator holds open: keys with an open window, and those windows (``-1``:
    not told); the messages each input holds in the Message Store (a join's)."""

    keys: int
    windows: int
    messages: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Admission:
    """A batch's rows after the replay filter.

    ``offsets`` has every row's offset (``-1``s assigned); ``fresh`` marks rows above
    everything applied before them; ``replayed`` counts the others.
    """

    offsets: IntArray
    fresh: BoolArray
    replayed: int


def retention_error(
    *,
    ts: int,
    key: str,
    what: str,
    retention: int,
    watermark: int,
    partition: int,
    offset: int,
    topic: str | None = None,
) -> ErrorRecord:
    """The OUT_OF_RETENTION error of an event (``what``: its window, session, ...)."""
    return ErrorRecord(
        code=ErrorCode.OUT_OF_RETENTION,
        reason=(
            f"event time {ts} of key {key!r} is out of retention: {what} "
            f"more than {retention} ms (the retention: retention.time, or retention.size "
            f"windows) before the watermark {watermark} ({iso_ms(watermark)})"
        ),
        partition=partition,
        offset=offset,
        raw=orjson.dumps({"key": key, "ts": ts}),
        topic=topic,
    )

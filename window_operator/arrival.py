"""The far-future guard: events dated too far ahead of their arrival are rejected.

One event dated in the year 3000 would move its partition's watermark there, and every
later normal event of that partition would be rejected as out of retention. So an event
whose time is more than ``watermark.max_future`` ahead of its record's *arrival time*
goes to the error output as ``FUTURE_TIMESTAMP`` and never reaches the operator.

The arrival time is part of the record, so the verdict is the same on every replay:

* on Kafka, the record's timestamp (CreateTime or LogAppendTime); a record without one
  is not checked, and an input whose event time is that timestamp (``timestamp_from:
  kafka``) never fails the check;
* in ``simulate``, the line's ``wall_ms``. A line without ``wall_ms`` arrives at the
  simulated clock: the latest arrival time of the lines before it, where a line without
  ``wall_ms`` that passed the guard counts with its event time (the same default that
  drives the timers). The first line of a run has nothing to compare with and is not
  checked. The clock advances line by line, so the verdict does not depend on the batch
  size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from window_operator.events import DecodeResult, EventBatch, IntArray
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.timeunits import iso_ms

__all__ = [
    "ArrivalClock",
    "FutureCheck",
    "future_error",
    "future_errors",
    "future_mask",
    "reject_future",
]

BoolArray = npt.NDArray[np.bool_]


def future_mask(ts: IntArray, arrival: IntArray, max_future: int) -> BoolArray:
    """Rows dated more than ``max_future`` ms after their ``arrival`` (negative: unknown)."""
    return (arrival >= 0) & (ts - arrival > max_future)


#: How close to the arrival time a far-future time divided by 1000^n must come for the
#: reason to suggest a unit (a day).
_UNIT_HINT_MS = 86_400_000


def future_error(ts: int, arrival: int, max_future: int) -> tuple[ErrorCode, str]:
    """The code and reason of a far-future event; when the time is 1000, 10^6 or 10^9
    times the arrival time, the reason asks whether the time field's unit is right."""
    reason = (
        f"event time {ts} ({iso_ms(ts)}) is {ts - arrival} ms ahead of the record's arrival "
        f"time {arrival} ({iso_ms(arrival)}); the limit is watermark.max_future = {max_future} ms"
    )
    for factor in (1_000, 1_000_000, 1_000_000_000):
        if arrival > 0 and abs(ts // factor - arrival) <= _UNIT_HINT_MS:
            reason += (
                f"; it is {factor:,} times the arrival time: is input.timestamp_unit too "
                "coarse for the field (s for values in ms, ms for us)?"
            )
            break
    return ErrorCode.FUTURE_TIMESTAMP, reason


def future_errors(
    batch: EventBatch, rows: list[int], arrival: IntArray, max_future: int, raws: list[bytes | None]
) -> list[ErrorRecord]:
    """The error records of the far-future ``rows`` of ``batch`` (``raws``: their payloads)."""
    errors = []
    for row, raw in zip(rows, raws, strict=True):
        code, reason = future_error(int(batch.ts[row]), int(arrival[row]), max_future)
        offset = int(batch.offset[row])
        errors.append(
            ErrorRecord(
                code, reason, int(batch.partition[row]), offset if offset >= 0 else None, raw
            )
        )
    return errors


def reject_future(
    decoded: DecodeResult,
    arrival: IntArray,
    max_future: int | None,
    *,
    raws: Sequence[bytes | None],
    topic: str | None = None,
) -> DecodeResult:
    """``decoded`` without its far-future rows, whose error records join the others.

    ``arrival`` holds the arrival time of every batch row, ``raws`` the payload of every
    input. ``decoded`` must hold one error per input that is not kept, in input order
    (as :func:`~window_operator.codecs.inputs.decode_payloads` returns them); so does
    the result.
    """
    batch = decoded.batch
    if max_future is None or not len(batch):
        return decoded
    mask = future_mask(batch.ts, arrival, max_future)
    if not mask.any():
        return decoded
    rows = np.flatnonzero(mask).tolist()
    new = future_errors(batch, rows, arrival, max_future, [raws[decoded.kept[r]] for r in rows])
    if topic is not None:
        new = [replace(err, topic=topic) for err in new]
    kept_set = set(decoded.kept)
    inputs = len(decoded.kept) + len(decoded.errors)
    indexed = list(
        zip([i for i in range(inputs) if i not in kept_set], decoded.errors, strict=True)
    )
    indexed += [(decoded.kept[r], err) for r, err in zip(rows, new, strict=True)]
    indexed.sort(key=lambda item: item[0])
    keep = np.flatnonzero(~mask)
    return DecodeResult(
        batch.take(keep), [err for _, err in indexed], [decoded.kept[r] for r in keep.tolist()]
    )


@dataclass(frozen=True, slots=True)
class FutureCheck:
    """Which rows are far-future events, and the arrival time each was compared with."""

    mask: BoolArray
    arrival: IntArray


@dataclass
class ArrivalClock:
    """``simulate``'s arrival times: a line's ``wall_ms``, else the simulated clock.

    See the module docstring for the rule. ``now`` is the latest arrival time seen
    (``None``: none yet).
    """

    max_future: int | None
    now: int | None = None

    def check(self, ts: IntArray, wall: IntArray) -> FutureCheck:
        """Check rows in arrival order (``wall`` < 0: the line has no ``wall_ms``).

        Advances the clock past the rows; a rejected row without ``wall_ms`` does not
        move it.
        """
        n = len(ts)
        if self.max_future is None or n == 0:
            return FutureCheck(np.zeros(n, dtype=np.bool_), np.asarray(wall, dtype=np.int64))
        known = wall >= 0
        before = np.maximum.accumulate(np.where(known, wall, ts))
        clock = np.empty(n, dtype=np.int64)
        clock[0] = 0 if self.now is None else self.now
        clock[1:] = before[:-1]
        checked = np.ones(n, dtype=np.bool_)
        if self.now is None:
            checked[0] = known[0]
        else:
            clock = np.maximum(clock, self.now)
        arrival = np.where(known, wall, clock)
        mask = checked & (ts - arrival > self.max_future)
        if mask.any():
            # a rejected row must not move the clock: walk the rows one by one
            return self._check_each(ts.tolist(), wall.tolist())
        self.now = int(before[-1]) if self.now is None else max(self.now, int(before[-1]))
        return FutureCheck(mask, arrival)

    def _check_each(self, ts: list[int], wall: list[int]) -> FutureCheck:
        assert self.max_future is not None
        mask = np.zeros(len(ts), dtype=np.bool_)
        arrival = np.full(len(ts), -1, dtype=np.int64)
        for i, (t, w) in enumerate(zip(ts, wall, strict=True)):
            at = w if w >= 0 else self.now
            if at is not None:
                arrival[i] = at
                if t - at > self.max_future:
                    mask[i] = True
                    if w < 0:
                        continue
            moved = w if w >= 0 else t
            self.now = moved if self.now is None else max(self.now, moved)
        return FutureCheck(mask, arrival)

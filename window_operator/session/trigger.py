"""When sessions fire, become late, are retracted and expire: pure decisions.

As Flink's ``Trigger``, it holds no state of its own and answers from the session
bounds and the clock. A session of events ``start .. last`` has the reported end
``last + pad`` (``pad``: the gap for time sessions, one offset for tuple sessions) and
*closes* at ``last + gap``:

* a time session fires ON_TIME once the watermark reaches its close
  (``last + gap <= watermark``); a tuple session once its partition's offset does
  (``gap`` offsets without its key); everything open fires at the end of the input;
* an event that lands in a session already closed before its batch makes it *late*
  (a LATE update, per ``emit.late``); tuple sessions are never late (they are deleted
  once ended);
* a result is identified by ``(key, window_start, window_end)``: a session emitted
  under bounds that differ from an identity emitted for it before (or for sessions
  merged into it) RETRACTs that identity first;
* a time session whose close + ``retention`` <= watermark is past retention: it takes
  part in no merge, and it expires (by index bucket, :meth:`SessionTrigger.expiry_bucket`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from window_operator.arrays import BoolArray, IntArray
from window_operator.policies import END_OF_TIME, NO_WATERMARK

__all__ = ["SessionTrigger"]


class SessionTrigger:
    """Fire, lateness, retraction, retention and expiry decisions of sessions."""

    def __init__(self, *, gap: int, by_offsets: bool, retention: int) -> None:
        self.gap = gap
        self.by_offsets = by_offsets
        #: reported end = last + pad: the gap for time, one offset for tuple sessions
        self.pad = 1 if by_offsets else gap
        self.retention = retention

    # -- firing -------------------------------------------------------------------------

    def on_time(self, last: IntArray, watermark: int) -> BoolArray:
        """Open time sessions the watermark has closed."""
        due: BoolArray = last + self.gap <= watermark
        return due

    def ended(self, last: IntArray, part: IntArray, offset_of: Callable[[int], int]) -> BoolArray:
        """Open tuple sessions (of partitions ``part``) whose partition has passed their end."""
        up, inv = np.unique(part, return_inverse=True)
        offs = np.array([offset_of(p) for p in up.tolist()], dtype=np.int64)
        due: BoolArray = last + self.gap <= offs[inv.reshape(-1)]
        return due

    def closed_before(self, last: IntArray, wm_before: int) -> BoolArray:
        """Sessions (after a batch merged into them) closed before the batch: late ones."""
        if self.by_offsets:
            return np.zeros(len(last), dtype=np.bool_)
        closed: BoolArray = last + self.gap <= wm_before
        return closed

    def fired_while_stored(self, closed: BoolArray, last: IntArray, watermark: int) -> BoolArray:
        """Records stored as open that the watermark has closed since.

        Open sessions are always cached and fire as soon as the watermark reaches their
        close, and a firing does not rewrite the record: such a record fired exactly
        once since, with its current bounds.
        """
        fired: BoolArray = ~closed & (last + self.gap <= watermark)
        return fired

    # -- retractions --------------------------------------------------------------------

    @staticmethod
    def emission_order(code: IntArray, start: IntArray, end: IntArray) -> IntArray:
        """The order of results within a step: ``(window_end, window_start, key code)``.

        It does not depend on memory layout, so a restored operator emits the same.
        """
        order: IntArray = np.lexsort((code, start, end))
        return order

    @staticmethod
    def stale(
        emitted: BoolArray, em_start: IntArray, em_end: IntArray, start: IntArray, end: IntArray
    ) -> BoolArray:
        """Sessions whose last emitted identity differs from their bounds now."""
        stale: BoolArray = emitted & ((em_start != start) | (em_end != end))
        return stale

    @staticmethod
    def retracted(identities: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
        """The emitted identities of a session that its result under ``[start, end)`` supersedes."""
        return [(a, b) for a, b in identities if (a, b) != (start, end)]

    # -- retention ----------------------------------------------------------------------

    def cutoff(self, watermark: int) -> int:
        """Sessions closing at or before this are past retention (tuple sessions: never)."""
        return NO_WATERMARK if self.by_offsets else watermark - self.retention

    def retained(self, last: IntArray, cutoff: int) -> BoolArray:
        """Sessions still within retention at ``cutoff``."""
        keep: BoolArray = last + self.gap > cutoff
        return keep

    def event_retained(self, ts: IntArray, cutoff: int) -> BoolArray:
        """Events whose own interval closes within retention at ``cutoff``.

        The others are kept only inside the span of a retained session
        (:meth:`inside`): an event from far behind joins it without moving its bounds,
        but must not move a session's start back over time whose sessions may be
        forgotten already. So the Message Store ranges of a key's retained and expired
        sessions never interleave, and expiry can range-delete a key's messages. (Even
        "within ``gap`` before a retained session's start" is unsafe: that session may
        already overlap an expired one, which a later event at the start of a retained
        session could then reach, or share a start, and so a store key, with.)
        """
        keep: BoolArray = ts + self.gap > cutoff
        return keep

    def event_retained_one(self, t: int, cutoff: int) -> bool:
        """:meth:`event_retained` of one event."""
        return t + self.gap > cutoff

    @staticmethod
    def inside(
        kid: IntArray, t: IntArray, s_kid: IntArray, s_start: IntArray, s_last: IntArray
    ) -> BoolArray:
        """Events (``kid``, ``t``) inside the span ``[start, last]`` of a session of their key."""
        by_kid: dict[int, list[tuple[int, int]]] = {}
        for k, a, b in zip(s_kid.tolist(), s_start.tolist(), s_last.tolist(), strict=True):
            by_kid.setdefault(k, []).append((a, b))
        return np.fromiter(
            (
                any(a <= x <= b for a, b in by_kid.get(k, ()))
                for k, x in zip(kid.tolist(), t.tolist(), strict=True)
            ),
            dtype=np.bool_,
            count=len(kid),
        )

    def leaving_retention(self, last: IntArray, watermark: int) -> BoolArray:
        """Sessions past retention at ``watermark``: a pending LATE update goes out now.

        Deciding by the watermark keeps the output independent of flush timing.
        """
        due: BoolArray = last + self.gap <= watermark - self.retention
        return due

    def expiry_bucket(self, watermark: int, bucket: int) -> int | None:
        """The last index bucket (of ``bucket`` ms) whose sessions are all past retention."""
        if self.by_offsets or watermark <= NO_WATERMARK or watermark >= END_OF_TIME:
            return None
        return (watermark - self.retention + 1) // bucket - 1

    def bucket_of(self, last: IntArray, bucket: int) -> IntArray:
        """The index bucket of each session's close."""
        out: IntArray = (last + self.gap) // bucket
        return out

    def bucket_of_one(self, last: int, bucket: int) -> int:
        """:meth:`bucket_of` of one session."""
        return (last + self.gap) // bucket

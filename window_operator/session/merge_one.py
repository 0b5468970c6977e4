"""The scalar merge of one event: :meth:`BatchMerge._apply` without arrays.

A batch of one would pay the whole vectorized pipeline's fixed cost per message, so
``add_message`` merges through this path, with the same semantics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from window_operator.aggregations.base import Ordering
from window_operator.events import DecodedEvent
from window_operator.policies import NO_WATERMARK, LateMode
from window_operator.session.arrays import one
from window_operator.session.merge import BatchMerge, plain
from window_operator.session.records import PendingMessage

__all__ = ["SingleMerge"]


class SingleMerge(BatchMerge):
    """Merges one event into the sessions of its key."""

    def _apply_one(
        self, event: DecodedEvent, kid: int, t: int, partition: int, offset: int, wm_before: int
    ) -> int:
        """Merge one event into its key's sessions (as :meth:`_apply`); 1 if it was late."""
        gap = self._gap
        sl = self.slots
        aggs = self.aggs
        cutoff = NO_WATERMARK if self.by_offsets else wm_before - self.policy.retention
        if not self.by_offsets:
            reach = int(self._disk_end_of(one(kid))[0])
            if t <= reach and reach > cutoff:  # the rule of _load_touching, for one event
                self._load_touching(one(kid), one(t), one(t + gap), cutoff)
        touch = [
            s
            for s in np.flatnonzero(sl.kid == kid).tolist()
            # the event's interval [t, t + gap] overlaps the session's [start, last + gap]
            if int(sl.start[s]) <= t + gap
            and int(sl.last[s]) + gap >= t
            and int(sl.last[s]) + gap > cutoff
        ]
        touch.sort(key=lambda s: int(sl.start[s]))
        row = aggs.identity.copy()
        if aggs.width:
            aggs.accumulate_one(row, event.numeric, event.ts)
        if not touch:
            s = int(sl.allocate(1)[0])
            sl.kid[s], sl.start[s], sl.last[s], sl.seq[s] = kid, t, t, 0
            sl.acc[s] = row
            if aggs.objects:
                sl.objs[s] = aggs.create_objects()
        else:
            # the earliest touched session survives; the others are combined into it
            s = touch[0]
            if aggs.width:
                sl.acc[s] = aggs.combine(sl.acc[s : s + 1], row[None, :])[0]
            for o in touch[1:]:
                if aggs.width:
                    sl.acc[s] = aggs.combine(sl.acc[s : s + 1], sl.acc[o : o + 1])[0]
                if aggs.objects:
                    mine, theirs = sl.objs[s], sl.objs[o]
                    assert mine is not None and theirs is not None
                    sl.objs[s] = aggs.combine_objects(mine, theirs)
            start = min(t, int(sl.start[s]))
            last = max(t, *(int(sl.last[o]) for o in touch))
            if len(touch) > 1:
                gone = np.asarray(touch[1:], dtype=np.int64)
                self._absorb(one(s), np.zeros(len(gone), dtype=np.int64), gone)
            sl.start[s], sl.last[s] = start, last
        if aggs.objects:
            self._accumulate_event_objects(event, s, kid, partition, offset)
        closed = not self.by_offsets and int(sl.last[s]) + gap <= wm_before
        late_on = self.policy.late_mode is not LateMode.OFF
        sl.dirty[s] = True
        sl.closed[s] = closed
        sl.pending[s] = closed and late_on
        sl.early[s] = not closed
        if closed and late_on and self._late_since is None:
            if self.policy.late_mode is LateMode.PERIOD:
                self._late_since = None if self._now <= NO_WATERMARK else self._now
        return int(closed)

    def _accumulate_event_objects(
        self, event: DecodedEvent, slot: int, kid: int, partition: int, offset: int
    ) -> None:
        objs = self.slots.objs[slot]
        assert objs is not None
        order = Ordering(event.ts, partition, offset)
        values: list[Any] = []
        for o, (agg, op) in enumerate(self.aggs.objects):
            if agg.field is None:
                value = None
            elif agg.field in event.objects:
                value = event.objects[agg.field]
            else:
                value = plain(event.numeric[agg.field])
            values.append(value)
            objs[o] = op.accumulate(objs[o], value, order)
        if self.aggs.full_state:
            full = tuple(values[o] for o in self.aggs.full_state)
            self._messages.append(PendingMessage(kid, event.ts, partition, offset, full))

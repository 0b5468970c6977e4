"""The session cache: the state object of a session operator.

Open sessions (and closed ones a late event may touch) live in :class:`Slots`, a
write-back cache of parallel arrays (one float64 row per session, so batches merge with
NumPy), under interned :class:`SessionKeys`. :class:`SessionCache` owns every write to
those arrays: merges, firings and emissions, loading and writing back. Merges happen in
the slot of the earliest session, whose store record usually keeps its key; a stored
record that memory superseded (merged away) is remembered until the next flush deletes
it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage
from window_operator.arrays import BoolArray, IntArray
from window_operator.kernel import StoredWindow
from window_operator.session.keys import SessionKeys
from window_operator.session.merge import MergePlan, OneMerge, Sessions
from window_operator.session.slots import Slots
from window_operator.session.state import (
    FLAG_CLOSED,
    FLAG_EARLY,
    FLAG_EMITTED,
    FLAG_PENDING,
    RecordHeads,
    RecordTail,
)

__all__ = ["SessionCache", "StoredId"]

StoredId = tuple[int, int]
"""A stored session record: ``(key id, start)``."""


class SessionCache:
    """Cached sessions of one task (see module doc)."""

    def __init__(self, aggs: AggregationSet, *, per_partition: bool) -> None:
        self.aggs = aggs
        self.keys = SessionKeys(per_partition)
        self.slots = Slots(aggs.width)
        #: stored records memory superseded (merged away) -> whether they had a P marker
        self.superseded: dict[StoredId, bool] = {}

    # -- reading ------------------------------------------------------------------------

    def live(self) -> IntArray:
        """Slots holding a session."""
        return self.slots.live()

    def open_slots(self) -> IntArray:
        """Sessions that have not fired (or were reopened)."""
        sl = self.slots
        return np.flatnonzero((sl.kid >= 0) & ~sl.closed)

    def pending_slots(self) -> IntArray:
        """Sessions with a LATE update pending."""
        sl = self.slots
        return np.flatnonzero(sl.pending & (sl.kid >= 0))

    def any_pending(self) -> bool:
        """Whether a LATE update is pending."""
        sl = self.slots
        return bool((sl.pending & (sl.kid >= 0)).any())

    def early_slots(self) -> IntArray:
        """Open sessions changed since their last EARLY result."""
        sl = self.slots
        return np.flatnonzero((sl.kid >= 0) & ~sl.closed & sl.early)

    def evictable(self) -> IntArray:
        """Closed sessions with nothing to write or emit (their record is current)."""
        sl = self.slots
        return np.flatnonzero((sl.kid >= 0) & sl.closed & ~sl.dirty & ~sl.pending)

    def of_keys(self, kids: IntArray) -> IntArray:
        """Slots of the sessions of the given keys."""
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[kids] = True
        return self.slots.of_kids(mask)

    def of_key(self, kid: int) -> IntArray:
        """Slots of one key's sessions, in slot order."""
        return np.flatnonzero(self.slots.kid == kid)

    def sessions(self, slots: IntArray) -> Sessions:
        """The sessions in ``slots`` (as the merge takes them)."""
        sl = self.slots
        return Sessions(
            slots,
            sl.kid[slots],
            sl.start[slots],
            sl.last[slots],
            sl.acc[slots],
            self.objs_of(slots),
        )

    def objs_of(self, slots: IntArray) -> list[list[Any]] | None:
        """The object accumulators of ``slots`` (None when there are no object operations)."""
        if not self.aggs.objects:
            return None
        out: list[list[Any]] = []
        for s in slots.tolist():
            o = self.slots.objs[s]
            assert o is not None
            out.append(o)
        return out

    def known(self, kids: set[int]) -> set[StoredId]:
        """Store identities of the given keys that memory accounts for (cached or merged)."""
        sl = self.slots
        cached = self.of_keys(np.fromiter(kids, dtype=np.int64, count=len(kids)))
        known = set(zip(sl.kid[cached].tolist(), sl.start[cached].tolist(), strict=True))
        st = cached[sl.stored[cached]]
        known.update(zip(sl.kid[st].tolist(), sl.stored_start[st].tolist(), strict=True))
        known.update(self.superseded)
        return known

    def windows(self, key: str, start: int, end: int, pad: int) -> list[StoredWindow]:
        """Cached sessions of ``key`` (reported end ``last + pad``) overlapping ``[start, end)``.

        In start order (then partition order, for tuple sessions).
        """
        sl, keys = self.slots, self.keys
        found = [
            s
            for s in self.live().tolist()
            if keys.name[int(sl.kid[s])] == key
            and int(sl.start[s]) < end
            and int(sl.last[s]) + pad > start
        ]
        if not found:
            return []
        found.sort(key=lambda s: (int(sl.start[s]), int(keys.part_arr[sl.kid[s]])))
        slots = np.asarray(found, dtype=np.int64)
        values = self.aggs.finish(sl.acc[slots], self.objs_of(slots))
        return [
            StoredWindow(
                key=key,
                window_start=int(sl.start[s]),
                window_end=int(sl.last[s]) + pad,
                values={n: col[j] for n, col in values.items()},
                fired=bool(sl.closed[s]),
                partition=int(keys.part_arr[sl.kid[s]]) if keys.per_partition else None,
            )
            for j, s in enumerate(found)
        ]

    # -- merging ------------------------------------------------------------------------

    def apply(self, plan: MergePlan) -> IntArray:
        """Put a batch's merged sessions into slots (new slots for new sessions)."""
        sl = self.slots
        surv = plan.survivor.copy()
        fresh = np.flatnonzero(surv < 0)
        if len(fresh):
            new_slots = sl.allocate(len(fresh))
            surv[fresh] = new_slots
            sl.kid[new_slots] = plan.kid[fresh]
            sl.seq[new_slots] = 0
        if plan.acc is not None:
            sl.acc[surv] = plan.acc
        if plan.objs is not None:
            for s, objs in zip(surv.tolist(), plan.objs, strict=True):
                sl.objs[s] = objs
        if len(plan.absorbed):
            self._absorb(surv[plan.absorbed_into], plan.absorbed)
        sl.start[surv] = plan.start
        sl.last[surv] = plan.last
        sl.dirty[surv] = True
        return surv

    def apply_one(self, kid: int, ex: Sessions, m: OneMerge) -> int:
        """Put one event's merged session into its slot; the slot."""
        sl = self.slots
        if not len(m.joined):
            s = int(sl.allocate(1)[0])
            sl.kid[s], sl.seq[s] = kid, 0
        else:
            s = int(ex.slot[m.joined[0]])
            if len(m.joined) > 1:
                gone = ex.slot[m.joined[1:]]
                self._absorb(np.full(len(gone), s, dtype=np.int64), gone)
        if self.aggs.width:
            sl.acc[s] = m.acc
        if m.objs is not None:
            sl.objs[s] = m.objs
        sl.start[s], sl.last[s] = m.start, m.last
        sl.dirty[s] = True
        return s

    def add_objects(
        self, slot: int, values: list[Any], order: Ordering, kid: int
    ) -> PendingMessage | None:
        """Add one event's values to a session's object accumulators.

        Returns the message to keep in the Message Store (None without full-state ops).
        """
        objs = self.slots.objs[slot]
        assert objs is not None
        for o, (_, op) in enumerate(self.aggs.objects):
            objs[o] = op.accumulate(objs[o], values[o], order)
        if not self.aggs.full_state:
            return None
        full = tuple(values[o] for o in self.aggs.full_state)
        return PendingMessage(kid, order.ts, order.partition, order.offset, full)

    def settle(self, slots: IntArray, closed: BoolArray, late_on: bool) -> None:
        """Mark merged sessions closed (late: a LATE update pends) or open (EARLY due)."""
        sl = self.slots
        sl.closed[slots] = closed
        sl.pending[slots] = closed & late_on
        sl.early[slots] = ~closed

    def _absorb(self, into: IntArray, gone: IntArray) -> None:
        """Merge the bookkeeping of sessions merged away into their survivors; free them."""
        sl = self.slots
        for t, s in zip(into.tolist(), gone.tolist(), strict=True):
            sl.seq[t] = max(int(sl.seq[t]), int(sl.seq[s]))
            bounds = sl.emitted_bounds(s)
            if bounds:
                if not sl.emitted[t]:
                    sl.emitted[t] = True
                    sl.em_start[t], sl.em_end[t] = bounds[0]
                    bounds = bounds[1:]
                if bounds:
                    sl.extra.setdefault(t, []).extend(bounds)
            if sl.stored[s]:
                self.superseded[(int(sl.kid[s]), int(sl.stored_start[s]))] = bool(sl.p_stored[s])
        sl.release(gone)

    # -- emitting -----------------------------------------------------------------------

    def fired(self, slots: IntArray) -> None:
        """Sessions fired ON_TIME: closed, nothing pending.

        Not marked dirty: a stored record that says "open" although the watermark has
        closed it is known to have fired like this (see the trigger), so the store is
        not written once more per session just for the bookkeeping.
        """
        sl = self.slots
        sl.closed[slots] = True
        sl.pending[slots] = False
        sl.early[slots] = False

    def emitted(
        self, slots: IntArray, start: IntArray, end: IntArray, retracted: list[int], dirty: bool
    ) -> None:
        """Record that sessions were emitted under ``[start, end)``.

        ``retracted``: slots whose older identities (beyond the last emitted) went out
        as RETRACTs.
        """
        sl = self.slots
        for s in retracted:
            sl.extra.pop(s, None)
        sl.seq[slots] += 1
        sl.emitted[slots] = True
        sl.em_start[slots] = start
        sl.em_end[slots] = end
        if dirty:
            sl.dirty[slots] = True

    def late_sent(self, slots: IntArray) -> None:
        """LATE updates of ``slots`` went out."""
        self.slots.pending[slots] = False

    def early_sent(self, slots: IntArray) -> None:
        """EARLY results of ``slots`` went out."""
        self.slots.early[slots] = False

    # -- the store side -----------------------------------------------------------------

    def load(self, kid: IntArray, start: IntArray, last: IntArray, heads: RecordHeads) -> IntArray:
        """Put stored sessions into new slots (tails are set with :meth:`set_tail`)."""
        sl = self.slots
        slots = sl.allocate(len(kid))
        flags = heads.flags
        sl.kid[slots] = kid
        sl.start[slots] = start
        sl.last[slots] = last
        sl.seq[slots] = heads.seq
        sl.em_start[slots] = heads.em_start
        sl.em_end[slots] = heads.em_end
        sl.emitted[slots] = (flags & FLAG_EMITTED) != 0
        sl.closed[slots] = (flags & FLAG_CLOSED) != 0
        sl.pending[slots] = (flags & FLAG_PENDING) != 0
        sl.early[slots] = (flags & FLAG_EARLY) != 0
        sl.stored[slots] = True
        sl.stored_start[slots] = start
        sl.p_stored[slots] = sl.pending[slots]
        if self.aggs.width:
            sl.acc[slots] = heads.acc
        return slots

    def replay(self, slot: int, values: list[Any], order: Ordering) -> None:
        """Add a stored message's values to a loaded session's full-state accumulators."""
        objs = self.slots.objs[slot]
        assert objs is not None
        ops = self.aggs.objects
        for j, val in zip(self.aggs.full_state, values, strict=True):
            objs[j] = ops[j][1].accumulate(objs[j], val, order)

    def set_tail(self, slot: int, tail: RecordTail) -> None:
        """A loaded session's emitted bounds beyond the head's and object accumulators."""
        if tail.extra is not None:
            self.slots.extra[slot] = tail.extra
        if tail.objs is not None:
            self.slots.objs[slot] = tail.objs

    def fired_while_stored(self, slots: IntArray, pad: int) -> None:
        """Apply the ON_TIME firing a loaded record was not rewritten for."""
        sl = self.slots
        sl.seq[slots] += 1
        sl.emitted[slots] = True
        sl.em_start[slots] = sl.start[slots]
        sl.em_end[slots] = sl.last[slots] + pad
        sl.closed[slots] = True
        sl.early[slots] = False
        for s in slots.tolist():
            sl.extra.pop(s, None)

    def indexed(self, slots: IntArray, bucket: IntArray) -> None:
        """The expiry index holds ``slots`` under ``bucket`` (a lower bound of where)."""
        self.slots.idx_bucket[slots] = bucket

    def written(self, slots: IntArray) -> None:
        """``slots`` were written back: their records are current."""
        sl = self.slots
        sl.stored[slots] = True
        sl.stored_start[slots] = sl.start[slots]
        sl.p_stored[slots] = sl.pending[slots]
        sl.dirty[slots] = False

    def take_superseded(self) -> dict[StoredId, bool]:
        """Hand over (and forget) the stored records memory superseded (see ``superseded``)."""
        out, self.superseded = self.superseded, {}
        return out

    def take_ended(self) -> IntArray:
        """Ended (emitted, closed) tuple sessions: nothing can change them; not to be written."""
        sl = self.slots
        ended = np.flatnonzero((sl.kid >= 0) & sl.closed)
        sl.dirty[ended] = False
        return ended

    def release(self, slots: IntArray) -> None:
        """Forget sessions (dropped, expired or evicted)."""
        self.slots.release(slots)

    # -- keys ---------------------------------------------------------------------------

    def live_kids(self) -> IntArray:
        """Key ids the cached sessions and the superseded records refer to."""
        sl = self.slots
        kids = sl.kid[sl.kid >= 0]
        if self.superseded:
            gone = np.fromiter((k for k, _ in self.superseded), np.int64, len(self.superseded))
            kids = np.concatenate([kids, gone])
        return kids

    def renumber_keys(self, remap: IntArray) -> None:
        """Apply a key table compaction (old id -> new id) to the cached sessions."""
        sl = self.slots
        live = sl.kid >= 0
        sl.kid[live] = remap[sl.kid[live]]
        self.superseded = {(int(remap[k]), s): p for (k, s), p in self.superseded.items()}

"""Emission of session results: ON_TIME firings, LATE and EARLY updates, RETRACTs.

A result is identified by ``(key, window_start, window_end)``. A session emitted under
bounds that differ from what was emitted for it (or for the sessions merged into it)
before is preceded, in the same step, by a RETRACT for each superseded identity. Within
a step results are ordered by ``(window_end, window_start, key hash)``.
"""

from __future__ import annotations

import numpy as np

from window_operator.results import Kind, ResultBatch
from window_operator.session.arrays import IntArray
from window_operator.session.state import SessionState

__all__ = ["SessionEmitter"]


class SessionEmitter(SessionState):
    """Decides which cached sessions are due and appends their result batches."""

    def _fire(self) -> None:
        """Emit ON_TIME results for open sessions whose end the watermark has reached."""
        sl = self.slots
        open_ = np.flatnonzero((sl.kid >= 0) & ~sl.closed)
        if not len(open_):
            return
        if self._eot:
            due = open_
        else:
            close_at = sl.last[open_] + self._gap
            if self.by_offsets:
                parts = self.keys.part_arr[sl.kid[open_]]
                up, inv = np.unique(parts, return_inverse=True)
                offs = np.array([self._offsets.get(p, -1) for p in up.tolist()], dtype=np.int64)
                due = open_[close_at <= offs[inv.reshape(-1)]]
            else:
                due = open_[close_at <= self._wm]
        if not len(due):
            return
        # Not marked dirty: a stored record that says "open" although its end is behind
        # the watermark is known to have fired like this (see _load), so the store is
        # not written once more per session just for the bookkeeping.
        self._emit(Kind.ON_TIME, due, dirty=False)
        sl.closed[due] = True
        sl.pending[due] = False
        sl.early[due] = False

    def _pending_slots(self) -> IntArray:
        sl = self.slots
        return np.flatnonzero(sl.pending & (sl.kid >= 0))

    def _emit_late(self, slots: IntArray | None = None) -> None:
        sl = self.slots
        due = self._pending_slots() if slots is None else slots
        if not len(due):
            return
        self._emit(Kind.LATE, due)
        sl.pending[due] = False
        if not self._pending_slots().size:
            self._late_since = None

    def _emit_early(self) -> None:
        sl = self.slots
        due = np.flatnonzero((sl.kid >= 0) & ~sl.closed & sl.early)
        if not len(due):
            return
        self._emit(Kind.EARLY, due)
        sl.early[due] = False

    def _emit(self, kind: Kind, slots: IntArray, *, dirty: bool = True) -> None:
        """Emit sessions (RETRACTs of their superseded identities first) and record it."""
        sl = self.slots
        kids = sl.kid[slots]
        starts = sl.start[slots]
        ends = sl.last[slots] + self._pad
        # a deterministic order (end, start, key) that does not depend on slot or key ids
        order = np.lexsort((self.keys.code[kids], starts, ends))
        slots, kids, starts, ends = slots[order], kids[order], starts[order], ends[order]
        seqs = sl.seq[slots].copy()
        names = self.keys.name
        r_keys: list[str] = []
        r_start: list[int] = []
        r_end: list[int] = []
        r_seq: list[int] = []
        stale = sl.emitted[slots] & ((sl.em_start[slots] != starts) | (sl.em_end[slots] != ends))
        extra = sl.extra
        for j in np.flatnonzero(stale | np.isin(slots, list(extra)) if extra else stale).tolist():
            s = int(slots[j])
            bounds = sl.emitted_bounds(s)
            for a, b in bounds:
                if (a, b) != (int(starts[j]), int(ends[j])):
                    r_keys.append(names[int(kids[j])])
                    r_start.append(a)
                    r_end.append(b)
                    r_seq.append(int(seqs[j]))
            extra.pop(s, None)
        if r_keys:
            self._results.append(
                ResultBatch(
                    kind=Kind.RETRACT,
                    keys=r_keys,
                    window_start=np.asarray(r_start, dtype=np.int64),
                    window_end=np.asarray(r_end, dtype=np.int64),
                    update_seq=np.asarray(r_seq, dtype=np.int64),
                    values={},
                )
            )
        self._results.append(
            ResultBatch(
                kind=kind,
                keys=[names[k] for k in kids.tolist()],
                window_start=starts.copy(),
                window_end=ends,
                update_seq=seqs,
                values=self.aggs.finish(sl.acc[slots], self._objs_of(slots)),
            )
        )
        sl.seq[slots] += 1
        sl.emitted[slots] = True
        sl.em_start[slots] = starts
        sl.em_end[slots] = ends
        if dirty:
            sl.dirty[slots] = True

"""Outer-join state: the rows of an outer side that have not matched yet, when they are
emitted unmatched, when a late match retracts them, and how they are persisted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import BoolArray, IntArray, ObjArray
from window_operator.join.keys import JoinKeyTable
from window_operator.join.spec import JoinSpec
from window_operator.join.state import OUTER, OuterRecord

__all__ = ["OuterRow", "OuterRows"]


@dataclass(slots=True)
class OuterRow:
    """A row of an outer side that has not matched yet."""

    kid: int
    ts: int
    rec: bytes
    emitted: bool
    persisted: bool
    #: the row's position in its input (``partition * 2**48 + offset``)
    pos: int = -1


class OuterRows:
    """Unmatched rows of one outer side, by position, with emission and expiry queues.

    A row is emitted unmatched once the watermark passes its deadline
    (:meth:`JoinSpec.deadline`) and never after it has matched; a row that matches after
    it was emitted is retracted. Rows are persisted in the Window Meta Store
    (:data:`~window_operator.join.state.OUTER`).
    """

    def __init__(self, side: int, spec: JoinSpec) -> None:
        self.side = side
        self.spec = spec
        self.keyspace = OUTER[side]
        self.rows: dict[int, OuterRow] = {}
        self.deadlines: list[tuple[int, int]] = []
        self.expiry: list[tuple[int, int]] = []
        self.dirty: set[int] = set()
        self.deletes: list[bytes] = []

    def register(
        self, kids: IntArray, ts: IntArray, pos: IntArray, rec: ObjArray, unmatched: BoolArray
    ) -> None:
        """Track the new rows selected by ``unmatched`` until they match or expire."""
        for i in np.flatnonzero(unmatched).tolist():
            t, p = int(ts[i]), int(pos[i])
            self.rows[p] = OuterRow(int(kids[i]), t, rec[i], emitted=False, persisted=False, pos=p)
            self.dirty.add(p)
            heapq.heappush(self.deadlines, (self.spec.deadline(self.side, t), p))
            heapq.heappush(self.expiry, (t, p))

    def matched(self, positions: IntArray) -> list[OuterRow]:
        """Forget rows that just matched; return those already emitted (to retract)."""
        if not self.rows:
            return []
        retracted: list[OuterRow] = []
        for p in dict.fromkeys(positions.tolist()):
            row = self.rows.pop(p, None)
            if row is None:
                continue
            self.dirty.discard(p)
            if row.persisted:
                self.deletes.append(self.keyspace.key(row.ts, p))
            if row.emitted:
                retracted.append(row)
        return retracted

    def due(self, wm: int) -> list[OuterRow]:
        """Mark emitted, and return, the rows whose deadline the watermark ``wm`` passed."""
        due: list[OuterRow] = []
        while self.deadlines and self.deadlines[0][0] < wm:
            _, p = heapq.heappop(self.deadlines)
            row = self.rows.get(p)
            if row is None or row.emitted:
                continue
            row.emitted = True
            self.dirty.add(p)
            due.append(row)
        return due

    def write(self, batch: StoreBatch, encoded: list[EncodedKey]) -> None:
        """Persist the changed rows (``encoded[kid]``: the equal fields of a key)."""
        ks = self.keyspace
        for key in self.deletes:
            batch.delete(ks.cf, key)
        self.deletes = []
        for p in sorted(self.dirty):
            row = self.rows[p]
            value = OuterRecord.encode(row.emitted, row.ts, p, encoded[row.kid], row.rec)
            batch.put(ks.cf, ks.key(row.ts, p), value)
            row.persisted = True
        self.dirty.clear()

    def expire(self, cut: int, batch: StoreBatch) -> None:
        """Drop the rows with ``ts`` below ``cut``, in memory and in the store."""
        while self.expiry and self.expiry[0][0] < cut:
            _, p = heapq.heappop(self.expiry)
            row = self.rows.pop(p, None)
            if row is not None:
                self.dirty.discard(p)
        batch.delete_keys(self.keyspace.before(cut))

    def restore(self, store: TaskStore, keys: JoinKeyTable) -> None:
        """Load the persisted rows of this side (interning their join keys)."""
        for _, v in store.scan_range(self.keyspace.all()):
            r = OuterRecord.decode(v)
            kid = keys.from_encoded(r.fields)
            self.rows[r.pos] = OuterRow(
                kid, r.ts, r.rec, emitted=r.emitted, persisted=True, pos=r.pos
            )
            if not r.emitted:
                heapq.heappush(self.deadlines, (self.spec.deadline(self.side, r.ts), r.pos))
            heapq.heappush(self.expiry, (r.ts, r.pos))

    def live_kids(self) -> IntArray:
        """The key ids the rows refer to."""
        return np.asarray([r.kid for r in self.rows.values()], np.int64)

    def remap(self, remap: IntArray) -> None:
        """Renumber the rows' key ids (old id -> ``remap[old]``)."""
        for row in self.rows.values():
            row.kid = int(remap[row.kid])

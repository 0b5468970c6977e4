"""Outer-join state: the rows of an outer side that have not matched yet, when they are
emitted unmatched, when a late match retracts them, and how they are persisted.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass

import numpy as np

from stores.keys import MIN_I64, encode_i64, prefix_upper_bound, ts_range
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.join.common import BoolArray, IntArray, ObjArray
from window_operator.join.keys import KeyTable
from window_operator.join.layouts import MSG_TAG
from window_operator.join.spec import JoinSpec

__all__ = ["OuterRow", "OuterRows"]

_OUTER_TAG = b"U"
#: The outer-join record after its flag byte: ts, position, length of the equal fields.
_HDR = struct.Struct(">qqI")


@dataclass(slots=True)
class OuterRow:
    """A row of an outer side that has not matched yet."""

    kid: int
    ts: int
    rec: bytes
    emitted: bool
    persisted: bool


class OuterRows:
    """Unmatched rows of one outer side, by position, with emission and expiry queues.

    A row is emitted unmatched once the watermark passes its deadline
    (:meth:`JoinSpec.deadline`) and never after it has matched; a row that matches after
    it was emitted is retracted. Rows are persisted in the Window Meta Store under
    ``U <side> i64(ts) i64(position)``.
    """

    def __init__(self, side: int, spec: JoinSpec) -> None:
        self.side = side
        self.spec = spec
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
            self.rows[p] = OuterRow(int(kids[i]), t, rec[i], emitted=False, persisted=False)
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
                self.deletes.append(self.key(row.ts, p))
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

    def key(self, ts: int, pos: int) -> bytes:
        """The Window Meta Store key of the row at ``(ts, pos)``."""
        return _OUTER_TAG + MSG_TAG[self.side] + encode_i64(ts) + encode_i64(pos)

    def write(self, batch: StoreBatch, encoded: list[bytes]) -> None:
        """Persist the changed rows (``encoded[kid]``: the equal fields of a key)."""
        for key in self.deletes:
            batch.delete(ColumnFamily.WINDOW_META, key)
        self.deletes = []
        for p in sorted(self.dirty):
            row = self.rows[p]
            enc = encoded[row.kid]
            value = bytes((row.emitted,)) + _HDR.pack(row.ts, p, len(enc)) + enc + row.rec
            batch.put(ColumnFamily.WINDOW_META, self.key(row.ts, p), value)
            row.persisted = True
        self.dirty.clear()

    def expire(self, cut: int, batch: StoreBatch) -> None:
        """Drop the rows with ``ts`` below ``cut``, in memory and in the store."""
        while self.expiry and self.expiry[0][0] < cut:
            _, p = heapq.heappop(self.expiry)
            row = self.rows.pop(p, None)
            if row is not None:
                self.dirty.discard(p)
        tag = _OUTER_TAG + MSG_TAG[self.side]
        batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(tag, MIN_I64, cut))

    def restore(self, store: TaskStore, keys: KeyTable) -> None:
        """Load the persisted rows of this side (interning their join keys)."""
        w = _HDR.size
        u_tag = _OUTER_TAG + MSG_TAG[self.side]
        for _, v in store.scan(ColumnFamily.WINDOW_META, u_tag, prefix_upper_bound(u_tag)):
            t, p, fl = _HDR.unpack_from(v, 1)
            kid = keys.from_encoded(v[1 + w : 1 + w + fl])
            emitted = bool(v[0])
            self.rows[p] = OuterRow(kid, t, v[1 + w + fl :], emitted=emitted, persisted=True)
            if not emitted:
                heapq.heappush(self.deadlines, (self.spec.deadline(self.side, t), p))
            heapq.heappush(self.expiry, (t, p))

    def live_kids(self) -> IntArray:
        """The key ids the rows refer to."""
        return np.asarray([r.kid for r in self.rows.values()], np.int64)

    def remap(self, remap: IntArray) -> None:
        """Renumber the rows' key ids (old id -> ``remap[old]``)."""
        for row in self.rows.values():
            row.kid = int(remap[row.kid])

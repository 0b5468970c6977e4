"""Writing changed sessions, the expiry index and pending messages to a store batch.

Open sessions live in the write-back cache and are written once per flush: one put per
changed session, deletes of records memory superseded (merged away, or the session's
start moved), ``P`` markers of pending LATE updates, ``X`` index entries written
:data:`INDEX_HEADROOM` buckets ahead of the session's end, and full-state messages.
"""

from __future__ import annotations

import numpy as np
import orjson

from stores.keys import encode_i64
from stores.rocks import ColumnFamily, StoreBatch
from window_operator.session.arrays import IntArray
from window_operator.session.keys import INDEX_TAG, PENDING_TAG, SESSION_TAG, i64_bytes
from window_operator.session.records import INDEX_HEADROOM
from window_operator.session.state import SessionState

__all__ = ["SessionPersistence"]


class SessionPersistence(SessionState):
    """Persists the changed part of the cache."""

    def _persist(self, batch: StoreBatch) -> set[tuple[int, int]]:
        """Write every changed session (and pending messages) into ``batch``.

        Returns the identities of the records this batch deletes because memory
        superseded them (merged away, or the session's start moved).
        """
        sl = self.slots
        superseded = set(self._deletes)
        # Superseded records first, so that a put of the same key later in the batch wins.
        for (kid, start), had_p in self._deletes.items():
            batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(SESSION_TAG, kid, start))
            if had_p:
                batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(PENDING_TAG, kid, start))
        self._deletes.clear()
        slots = np.flatnonzero(sl.dirty & (sl.kid >= 0))
        if len(slots):
            superseded |= self._write_sessions(batch, slots)
        for m in self._messages:
            if self.by_offsets:
                key = self.keys.enc[m.kid] + encode_i64(m.offset)
                value = orjson.dumps([m.ts, *m.values])
            else:
                key = (
                    self.keys.enc[m.kid]
                    + encode_i64(m.ts)
                    + encode_i64(m.partition)
                    + encode_i64(m.offset)
                )
                value = orjson.dumps(list(m.values))
            batch.put(ColumnFamily.MESSAGES, key, value)
        self._messages.clear()
        return superseded

    def _write_sessions(self, batch: StoreBatch, slots: IntArray) -> set[tuple[int, int]]:
        sl = self.slots
        kids = sl.kid[slots]
        starts = sl.start[slots]
        moved = sl.stored[slots] & (sl.stored_start[slots] != starts)
        moved_from: set[tuple[int, int]] = set()
        for j in np.flatnonzero(moved).tolist():
            kid, old = int(kids[j]), int(sl.stored_start[slots[j]])
            moved_from.add((kid, old))
            batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(SESSION_TAG, kid, old))
            if sl.p_stored[slots[j]]:
                batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(PENDING_TAG, kid, old))
        keys = self.codec.skeys(SESSION_TAG, kids, starts)
        batch.put_many(ColumnFamily.WINDOW_META, keys, self.codec.encode(slots))
        pending = sl.pending[slots]
        p_old = sl.p_stored[slots] & ~moved
        p_put = np.flatnonzero(pending & ~p_old)
        p_del = np.flatnonzero(p_old & ~pending)
        if len(p_put):
            batch.put_many(
                ColumnFamily.WINDOW_META,
                self.codec.skeys(PENDING_TAG, kids[p_put], starts[p_put]),
                [b""] * len(p_put),
            )
        for j in p_del.tolist():
            batch.delete(
                ColumnFamily.WINDOW_META, self.codec.skey(PENDING_TAG, int(kids[j]), int(starts[j]))
            )
        if not self.by_offsets:
            bucket = (sl.last[slots] + self._gap) // self._bucket
            need = ~sl.stored[slots] | moved | (sl.idx_bucket[slots] < bucket)
            ix = np.flatnonzero(need)
            if len(ix):
                enc = self.keys.enc
                bucket[ix] += INDEX_HEADROOM
                sl.idx_bucket[slots[ix]] = bucket[ix]
                bb = i64_bytes(bucket[ix])
                sb = i64_bytes(starts[ix])
                ikeys = [
                    INDEX_TAG + bb[8 * j : 8 * j + 8] + enc[k] + sb[8 * j : 8 * j + 8]
                    for j, k in enumerate(kids[ix].tolist())
                ]
                batch.put_many(ColumnFamily.WINDOW_META, ikeys, [b""] * len(ix))
        self._max_len = max(self._max_len, int((sl.last[slots] - starts).max()))
        sl.stored[slots] = True
        sl.stored_start[slots] = starts
        sl.p_stored[slots] = pending
        sl.dirty[slots] = False
        return moved_from

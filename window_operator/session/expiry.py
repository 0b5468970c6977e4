"""Forgetting sessions: expiry past retention, ended tuple sessions, cache eviction.

Expiry range-deletes whole ``X`` index buckets past retention and only reads the index
entries being deleted (hints, checked against the record), never live keys. Ended tuple
sessions are deleted at flush; closed, clean time sessions are evicted from the cache
(they stay in the store until they expire).
"""

from __future__ import annotations

import numpy as np

from stores.keys import decode_i64, encode_i64
from stores.rocks import ColumnFamily, StoreBatch
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.session.arrays import IntArray
from window_operator.session.keys import INDEX_TAG, MIN_I64_BYTES, PENDING_TAG, SESSION_TAG
from window_operator.session.loading import StoredSessionLoader
from window_operator.session.records import FLAG_PENDING, record_end

__all__ = ["SessionExpiry"]


class SessionExpiry(StoredSessionLoader):
    """Deletes sessions nothing can change any more and evicts closed ones."""

    def _ended_tuple_sessions(self) -> IntArray:
        """Tuple sessions that were emitted as ended: nothing can change them any more."""
        if not self.by_offsets:
            return np.zeros(0, dtype=np.int64)
        sl = self.slots
        ended = np.flatnonzero((sl.kid >= 0) & sl.closed)
        sl.dirty[ended] = False
        return ended

    def _drop(self, batch: StoreBatch, slots: IntArray) -> None:
        """Delete sessions and their messages (after this batch's puts) and free them."""
        sl = self.slots
        enc = self.keys.enc
        for s in slots.tolist():
            kid = int(sl.kid[s])
            if sl.stored[s]:
                start = int(sl.stored_start[s])
                batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(SESSION_TAG, kid, start))
                if sl.p_stored[s]:
                    batch.delete(ColumnFamily.WINDOW_META, self.codec.skey(PENDING_TAG, kid, start))
            if self.aggs.full_state:
                end = encode_i64(int(sl.last[s]) + 1)
                batch.delete_range(ColumnFamily.MESSAGES, enc[kid] + MIN_I64_BYTES, enc[kid] + end)
        sl.release(slots)

    def _expire(self, batch: StoreBatch, superseded: set[tuple[int, int]]) -> None:
        """Delete sessions past retention: whole index buckets, by range delete.

        ``superseded`` are records this batch already deletes: their data lives on in
        another session, so their messages must not be deleted with them.
        """
        wm = self._wm
        if wm <= NO_WATERMARK or wm >= END_OF_TIME:
            return
        cutoff = wm - self.policy.retention
        b_max = (cutoff + 1) // self._bucket - 1
        if self._expired_upto is not None and b_max <= self._expired_upto:
            return
        sl = self.slots
        live = sl.live()
        gone = live[(sl.last[live] + self._gap) // self._bucket <= b_max]
        done = set(superseded)
        if len(gone):
            done.update(zip(sl.kid[gone].tolist(), sl.stored_start[gone].tolist(), strict=True))
            self._drop(batch, gone)
        lo = INDEX_TAG + (
            MIN_I64_BYTES if self._expired_upto is None else encode_i64(self._expired_upto + 1)
        )
        hi = INDEX_TAG + encode_i64(b_max + 1)
        # Index entries are hints: the record may have moved on (extended, merged).
        cand = dict.fromkeys(k[9:] for k, _ in self.store.scan(ColumnFamily.WINDOW_META, lo, hi))
        if cand:
            rest = list(cand)
            kids = [self.keys.id_of_encoded(r[:-8]) for r in rest]
            self.keys.sync()
            starts = [decode_i64(r, len(r) - 8) for r in rest]
            known = self._known(set(kids)) | done
            todo = [j for j in range(len(rest)) if (kids[j], starts[j]) not in known]
            values = self.store.multi_get(
                ColumnFamily.WINDOW_META, [SESSION_TAG + rest[j] for j in todo]
            )
            enc = self.keys.enc
            for j, v in zip(todo, values, strict=True):
                if v is None:
                    continue
                last = record_end(v) - self._pad
                if (last + self._gap) // self._bucket > b_max:
                    continue
                batch.delete(ColumnFamily.WINDOW_META, SESSION_TAG + rest[j])
                if v[1] & FLAG_PENDING:
                    batch.delete(ColumnFamily.WINDOW_META, PENDING_TAG + rest[j])
                if self.aggs.full_state:
                    prefix = enc[kids[j]]
                    batch.delete_range(
                        ColumnFamily.MESSAGES,
                        prefix + MIN_I64_BYTES,
                        prefix + encode_i64(last + 1),
                    )
        batch.delete_range(ColumnFamily.WINDOW_META, INDEX_TAG + MIN_I64_BYTES, hi)
        self._expired_upto = b_max

    def _evict_closed(self) -> None:
        """Free closed, clean sessions (they are in the store); remember how far they reach."""
        sl = self.slots
        cand = np.flatnonzero((sl.kid >= 0) & sl.closed & ~sl.dirty & ~sl.pending)
        if not len(cand):
            return
        kids = sl.kid[cand]
        self._disk_end_of(kids)
        np.maximum.at(self._disk_end, kids, sl.last[cand] + self._gap)
        sl.release(cand)

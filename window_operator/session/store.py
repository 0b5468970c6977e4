"""The store part of a session operator: writing back, expiry, eviction (and loading).

Open sessions live in the write-back cache and are written once per flush: one put per
changed session, deletes of records memory superseded (merged away, or the session's
start moved), ``P`` markers of pending LATE updates, ``X`` index entries written
:data:`~window_operator.session.state.INDEX_HEADROOM` buckets ahead of the session's
close, and full-state messages.

Expiry range-deletes whole ``X`` index buckets past retention and only reads the index
entries being deleted (hints, checked against the record), never live keys. Ended tuple
sessions are deleted at flush; closed, clean time sessions are evicted from the cache
(they stay in the store until they expire) and read back by the
:class:`~window_operator.session.loader.SessionLoader` when a late event may touch them.

Memory budget (time sessions): when the open sessions' estimated size exceeds
``max_bytes`` at a flush, the least recently extended ones without an EARLY result due
are written back and evicted too (*spilled*), until a share of the budget is left. They
are read back like evicted ones when an event may touch them, and when the watermark
reaches their close, so that they fire (:meth:`SessionStore.unspill`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from stores.keys import MIN_I64
from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch
from window_operator.aggset import PendingMessage
from window_operator.arrays import BoolArray, IntArray, present_ids
from window_operator.session.cache import StoredId
from window_operator.session.loader import SessionLoader
from window_operator.session.state import (
    INDEX,
    INDEX_HEADROOM,
    PENDING,
    SESSIONS,
    RecordHeads,
)

__all__ = ["SessionStore"]

#: Estimated bytes of a cached session: its slot arrays (eight int64, seven flags, the
#: object list's pointer), besides the accumulator row and object accumulators.
_SLOT_OVERHEAD = 8 * 8 + 7 + 8
#: Estimated bytes of one object accumulator (a cheap constant: they are not measured).
_OBJECT_BYTES = 256
#: A spill leaves the open sessions at this share of the budget, so it does not recur at
#: every flush.
_SPILL_TO = 0.75


class SessionStore:
    """Every read and write of session state in the task store (see module doc)."""

    def __init__(
        self, loader: SessionLoader, *, max_bytes: int | None = None, early: bool = False
    ) -> None:
        self.loader = loader
        self.store = loader.store
        self.cache = loader.cache
        self.trigger = loader.trigger
        self.aggs = loader.aggs
        self.progress = loader.progress
        self.codec = loader.codec
        self.messages = loader.messages
        #: full-state messages of applied events, written at the next flush
        self.pending: list[PendingMessage] = []
        self.max_bytes = max_bytes
        aggs = self.aggs
        self.slot_bytes = _SLOT_OVERHEAD + 8 * aggs.width + _OBJECT_BYTES * len(aggs.objects)
        #: EARLY results are on: sessions changed since the last ones are not spilled
        self.early = early
        #: the closes of spilled sessions not yet read back to fire (stale ones harmless)
        self.spilled: IntArray = np.zeros(0, dtype=np.int64)
        #: sessions this flush writes back to spill them (released at the eviction)
        self._spilling: IntArray = np.zeros(0, dtype=np.int64)

    def keep(self, messages: Iterable[PendingMessage]) -> None:
        """Queue full-state messages for the next :meth:`persist`."""
        self.pending.extend(messages)

    # -- writing back -------------------------------------------------------------------

    def persist(self, batch: StoreBatch) -> set[StoredId]:
        """Write every changed session (and pending messages) into ``batch``.

        Returns the identities of the records this batch deletes because memory
        superseded them (merged away, or the session's start moved). Open sessions
        beyond the memory budget are written too, to be spilled by :meth:`evict_closed`.
        """
        self._spilling = self._select_spill()
        cache = self.cache
        records = cache.take_superseded()
        superseded = set(records)
        # Superseded records first, so that a put of the same key later in the batch wins.
        for (kid, start), had_p in records.items():
            self._delete_record(batch, kid, start, had_p)
        sl = cache.slots
        slots = np.flatnonzero(sl.dirty & (sl.kid >= 0))
        if len(slots):
            superseded |= self._write_sessions(batch, slots)
        enc, layout = cache.keys.enc, self.messages
        for m in self.pending:
            batch.put(layout.cf, layout.key(enc[m.kid], m), layout.value(m))
        self.pending.clear()
        return superseded

    def _delete_record(self, batch: StoreBatch, kid: int, start: int, pending: bool) -> None:
        enc = self.cache.keys.enc[kid]
        batch.delete(SESSIONS.cf, SESSIONS.key(enc, start))
        if pending:
            batch.delete(PENDING.cf, PENDING.key(enc, start))

    def _write_sessions(self, batch: StoreBatch, slots: IntArray) -> set[StoredId]:
        cache = self.cache
        sl, keys = cache.slots, cache.keys
        kids = sl.kid[slots]
        starts = sl.start[slots]
        moved = sl.stored[slots] & (sl.stored_start[slots] != starts)
        moved_from: set[StoredId] = set()
        for j in np.flatnonzero(moved).tolist():
            kid, old = int(kids[j]), int(sl.stored_start[slots[j]])
            moved_from.add((kid, old))
            self._delete_record(batch, kid, old, bool(sl.p_stored[slots[j]]))
        batch.put_many(
            SESSIONS.cf, SESSIONS.keys_of(keys.prefix, kids, starts), self._records(slots)
        )
        pending = sl.pending[slots]
        p_old = sl.p_stored[slots] & ~moved
        enc = keys.enc
        p_put = np.flatnonzero(pending & ~p_old).tolist()
        if p_put:
            batch.put_many(
                PENDING.cf,
                [PENDING.key(enc[int(kids[j])], int(starts[j])) for j in p_put],
                [b""] * len(p_put),
            )
        for j in np.flatnonzero(p_old & ~pending).tolist():
            batch.delete(PENDING.cf, PENDING.key(enc[int(kids[j])], int(starts[j])))
        if not self.trigger.by_offsets:
            self._write_index(batch, slots, moved)
        self.progress.max_len = max(self.progress.max_len, int((sl.last[slots] - starts).max()))
        cache.written(slots)
        return moved_from

    def _records(self, slots: IntArray) -> list[bytes]:
        """The session records of ``slots``: heads in one pass, tails where needed."""
        sl, codec = self.cache.slots, self.codec
        extra = sl.extra
        has_extra = np.isin(slots, list(extra)) if extra else np.zeros(len(slots), np.bool_)
        heads = RecordHeads(
            codec.flags(
                sl.closed[slots], sl.pending[slots], sl.early[slots], sl.emitted[slots], has_extra
            ),
            sl.last[slots] + self.trigger.pad,
            sl.seq[slots],
            sl.em_start[slots],
            sl.em_end[slots],
            sl.acc[slots],
        )
        values = codec.encode(heads)
        if self.aggs.objects or has_extra.any():
            rows = range(len(slots)) if self.aggs.objects else np.flatnonzero(has_extra).tolist()
            for j in rows:
                s = int(slots[j])
                values[j] += codec.encode_tail(extra.get(s), sl.objs[s])
        return values

    def _write_index(self, batch: StoreBatch, slots: IntArray, moved: BoolArray) -> None:
        """Index entries of sessions not indexed at or after their close's bucket yet."""
        sl = self.cache.slots
        bucket = self.trigger.bucket_of(sl.last[slots], self.progress.bucket)
        ix = np.flatnonzero(~sl.stored[slots] | moved | (sl.idx_bucket[slots] < bucket))
        if not len(ix):
            return
        bucket = bucket[ix] + INDEX_HEADROOM
        self.cache.indexed(slots[ix], bucket)
        keys = INDEX.keys_of(self.cache.keys.enc, sl.kid[slots[ix]], bucket, sl.start[slots[ix]])
        batch.put_many(INDEX.cf, keys, [b""] * len(ix))

    # -- forgetting ---------------------------------------------------------------------

    def drop(self, batch: StoreBatch, slots: IntArray) -> None:
        """Delete sessions and their messages (after this batch's puts) and free them."""
        sl = self.cache.slots
        enc = self.cache.keys.enc
        for s in slots.tolist():
            kid = int(sl.kid[s])
            if sl.stored[s]:
                self._delete_record(batch, kid, int(sl.stored_start[s]), bool(sl.p_stored[s]))
            if self.aggs.full_state:
                batch.delete_keys(self.messages.span(enc[kid], MIN_I64, int(sl.last[s]) + 1))
        self.cache.release(slots)

    def expire(self, batch: StoreBatch, superseded: set[StoredId], watermark: int) -> None:
        """Delete sessions past retention at ``watermark``: whole index buckets.

        ``superseded`` are records this batch already deletes: their data lives on in
        another session, so their messages must not be deleted with them.
        """
        progress = self.progress
        b_max = self.trigger.expiry_bucket(watermark, progress.bucket)
        if b_max is None or (progress.expired_upto is not None and b_max <= progress.expired_upto):
            return
        sl = self.cache.slots
        live = sl.live()
        gone = live[self.trigger.bucket_of(sl.last[live], progress.bucket) <= b_max]
        done = set(superseded)
        if len(gone):
            done.update(zip(sl.kid[gone].tolist(), sl.stored_start[gone].tolist(), strict=True))
            self.drop(batch, gone)
        lo = MIN_I64 if progress.expired_upto is None else progress.expired_upto + 1
        # Index entries are hints: the record may have moved on (extended, merged). This
        # batch deletes what they are read from: their blocks stay out of the block cache.
        entries: dict[tuple[EncodedKey, int], None] = {}
        for k, _ in self.store.scan_range(INDEX.buckets(lo, b_max + 1), fill_cache=False):
            e = INDEX.parse(k)
            entries[(e.key, e.time)] = None
        if entries:
            self._expire_stored(batch, list(entries), b_max, done)
        batch.delete_keys(INDEX.buckets(MIN_I64, b_max + 1))
        progress.expired_upto = b_max

    def _expire_stored(
        self,
        batch: StoreBatch,
        entries: list[tuple[EncodedKey, int]],
        b_max: int,
        done: set[StoredId],
    ) -> None:
        """Delete the stored sessions of index ``entries`` that closed by bucket ``b_max``."""
        cache, trigger = self.cache, self.trigger
        kids = cache.keys.ids_of_encoded([enc for enc, _ in entries]).tolist()
        known = cache.known(set(kids)) | done
        todo = [j for j, (_, start) in enumerate(entries) if (kids[j], start) not in known]
        todo_keys = [SESSIONS.key(*entries[j]) for j in todo]
        values = self.store.multi_get(SESSIONS.cf, todo_keys, fill_cache=False)
        for j, v in zip(todo, values, strict=True):
            if v is None:
                continue
            last = self.codec.end_of(v) - trigger.pad
            if trigger.bucket_of_one(last, self.progress.bucket) > b_max:
                continue
            enc, start = entries[j]
            batch.delete(SESSIONS.cf, SESSIONS.key(enc, start))
            if self.codec.pending_of(v):
                batch.delete(PENDING.cf, PENDING.key(enc, start))
            if self.aggs.full_state:
                batch.delete_keys(self.messages.span(enc, MIN_I64, last + 1))

    def release_keys(self, cutoff: int, slack: int) -> int:
        """Forget the keys nothing in memory refers to and with nothing retained on disk.

        Compacts the key table once it holds more than twice those keys plus ``slack``
        (the cost is then amortized over the keys released); returns how many it forgot.
        """
        cache = self.cache
        parts = [cache.live_kids(), self.loader.kids_on_disk(cutoff)]
        if self.pending:
            parts.append(np.fromiter((m.kid for m in self.pending), np.int64, len(self.pending)))
        n = len(cache.keys)
        live = present_ids(parts, n)
        if n <= 2 * len(live) + slack:
            return 0
        remap = cache.keys.compact(live)
        cache.renumber_keys(remap)
        self.loader.renumber_keys(remap, len(live))
        self.pending = [replace(m, kid=int(remap[m.kid])) for m in self.pending]
        return n - len(live)

    # -- the memory budget ---------------------------------------------------------------

    def _select_spill(self) -> IntArray:
        """Open sessions beyond the budget, least recently extended first. Those without
        a current record (changed since written or read, or never written) are dirty, so
        :meth:`persist` writes them; one read back and spilled unchanged is not written
        again."""
        open_ = self.cache.open_slots()
        if (
            self.max_bytes is None
            or self.trigger.by_offsets
            or len(open_) * self.slot_bytes <= self.max_bytes
        ):
            return np.zeros(0, dtype=np.int64)
        sl = self.cache.slots
        free = open_[~sl.early[open_]] if self.early else open_
        n = len(open_) - int(self.max_bytes * _SPILL_TO) // self.slot_bytes
        victims = free[np.argsort(sl.last[free], kind="stable")[: max(n, 0)]]
        sl.dirty[victims[~sl.stored[victims]]] = True
        return victims

    def _release_spilled(self, slots: IntArray) -> None:
        """Free spilled sessions (written by this flush); remember when they close."""
        if not len(slots):
            return
        sl = self.cache.slots
        close = sl.last[slots] + self.trigger.gap
        self.loader.evicted(sl.kid[slots], close)
        self.spilled = np.concatenate([self.spilled, close])
        self.cache.release(slots)

    def unspill(self, before: int, after: int) -> None:
        """The watermark moved from ``before`` to ``after``: read back the spilled sessions
        it closed, as open ones (they fire next)."""
        first = int(self.spilled.min()) if len(self.spilled) else None
        if first is None or first > after:
            return
        # no spilled session closes before the first remembered close
        self.loader.closing(max(before, first - 1), after)
        self.spilled = self.spilled[self.spilled > after]

    def evict_closed(self) -> None:
        """Free closed, clean sessions (they are in the store); remember how far they reach.

        Sessions spilled by this flush's :meth:`persist` are freed as well.
        """
        self._release_spilled(self._spilling)
        self._spilling = np.zeros(0, dtype=np.int64)
        cand = self.cache.evictable()
        if not len(cand):
            return
        sl = self.cache.slots
        self.loader.evicted(sl.kid[cand], sl.last[cand] + self.trigger.gap)
        self.cache.release(cand)

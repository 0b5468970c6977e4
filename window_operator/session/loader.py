"""Reading stored sessions back into the cache: on demand, for queries, at restore.

Closed, clean sessions are evicted at flush; a late event that may touch one brings it
back with one short range scan of its key's records (:meth:`SessionLoader.touching`).
Loading skips records memory already accounts for, applies the ON_TIME firing a record
was not rewritten for, and rebuilds full-state accumulators from the Message Store.

Restore loads the sessions of index buckets at or after the watermark's (the open ones)
plus the ones with a LATE update pending; every other stored session closed at or
before the watermark and is read back only when a late event may touch it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stores.errors import StateCorruptError
from stores.keys import MIN_I64
from stores.keyspace import EncodedKey, encode_key
from stores.rocks import TaskStore
from window_operator.arrays import IntArray, one
from window_operator.kernel import EventClock
from window_operator.policies import NO_WATERMARK
from window_operator.session.cache import SessionCache, StoredId
from window_operator.session.state import (
    FLAG_CLOSED,
    FLAG_EXTRA,
    FLAG_PENDING,
    INDEX,
    INDEX_HEADROOM,
    MAX_BUCKET_MS,
    MIN_BUCKET_MS,
    PENDING,
    SESSIONS,
    RecordHeads,
    SessionRecordCodec,
    message_layout,
)
from window_operator.session.trigger import SessionTrigger

__all__ = ["SessionLoader", "StoreProgress"]


@dataclass(slots=True)
class StoreProgress:
    """What the store part keeps in the checkpoint.

    ``bucket``: the index bucket width (ms); ``max_len``: the longest session written
    (``last - start``), which bounds how far back a key's records must be scanned;
    ``expired_upto``: the last index bucket expired.
    """

    bucket: int
    max_len: int = 0
    expired_upto: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Checkpoint fields."""
        return {
            "bucket_ms": self.bucket,
            "max_len": self.max_len,
            "expired_upto": self.expired_upto,
        }

    def load_json(self, doc: dict[str, Any]) -> None:
        """Take the fields of :meth:`to_json` (:class:`StateCorruptError` when missing)."""
        try:
            self.bucket = int(doc["bucket_ms"])
            self.max_len = int(doc["max_len"])
            expired = doc.get("expired_upto")
            self.expired_upto = None if expired is None else int(expired)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateCorruptError(f"session checkpoint fields do not decode: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class _Records:
    """Session records read from the store (not yet in the cache)."""

    kid: IntArray
    start: IntArray
    heads: RecordHeads
    tails: list[bytes]

    def take(self, idx: IntArray) -> _Records:
        return _Records(
            self.kid[idx], self.start[idx], self.heads.take(idx), [self.tails[i] for i in idx]
        )


class SessionLoader:
    """Loads stored sessions into the cache (see module doc)."""

    def __init__(
        self,
        store: TaskStore,
        cache: SessionCache,
        trigger: SessionTrigger,
        clock: EventClock,
    ) -> None:
        self.store = store
        self.cache = cache
        self.trigger = trigger
        self.clock = clock
        self.aggs = cache.aggs
        self.progress = StoreProgress(bucket=min(max(trigger.gap, MIN_BUCKET_MS), MAX_BUCKET_MS))
        self.codec = SessionRecordCodec(cache.aggs)
        self.messages = message_layout(trigger.by_offsets)
        # Upper bound of the close of any session of a key that is stored but not cached:
        # a batch session starting after it cannot touch anything on disk.
        self._disk_end: IntArray = np.zeros(0, dtype=np.int64)
        self._disk_end_default = NO_WATERMARK

    # -- what is on disk only -----------------------------------------------------------

    def disk_end_of(self, kids: IntArray) -> IntArray:
        """Per key, an upper bound of the close of its sessions that are stored only."""
        return self._ends(len(self.cache.keys))[kids]

    def _ends(self, n: int) -> IntArray:
        """The bounds of keys ``0 .. n-1`` (and beyond: the array grows, never shrinks here)."""
        if len(self._disk_end) < n:
            grow = np.full(n - len(self._disk_end), self._disk_end_default, dtype=np.int64)
            self._disk_end = np.concatenate([self._disk_end, grow])
        return self._disk_end[:n]

    def evicted(self, kids: IntArray, close: IntArray) -> None:
        """Sessions of ``kids`` closing at ``close`` left the cache (they are stored)."""
        self.disk_end_of(kids)
        np.maximum.at(self._disk_end, kids, close)

    def kids_on_disk(self, cutoff: int) -> IntArray:
        """Keys that may have a stored, uncached session within retention at ``cutoff``.

        The others can be forgotten: should one come back, the default bound it gets
        may be lower than its stored sessions' closes, but those are past retention
        (``cutoff`` never decreases), so nothing reads them again.
        """
        if self.trigger.by_offsets:
            return np.zeros(0, dtype=np.int64)  # every stored tuple session is cached
        return np.flatnonzero(self._ends(len(self.cache.keys)) > cutoff).astype(np.int64)

    def renumber_keys(self, remap: IntArray, n_live: int) -> None:
        """Apply a key table compaction (old id -> new id) to the per-key bounds."""
        old = self._ends(len(remap))
        kept = remap >= 0
        ends = np.full(n_live, self._disk_end_default, dtype=np.int64)
        ends[remap[kept]] = old[kept]
        self._disk_end = ends

    # -- loading ------------------------------------------------------------------------

    def touching(self, q_kid: IntArray, lo: IntArray, hi: IntArray, cutoff: int) -> None:
        """Load stored, uncached, retained sessions with ``start <= hi`` and ``close >= lo``.

        Keys are key-first, so this is one short range scan per key: a session closing
        at or after ``lo`` starts at or after ``lo - gap - max_len``.
        """
        dend = self.disk_end_of(q_kid)
        need = (lo <= dend) & (dend > cutoff)
        if not need.any():
            return
        q_kid, lo, hi = q_kid[need], lo[need], hi[need]
        ranges: dict[int, tuple[int, int]] = {}
        for k, a, b in zip(q_kid.tolist(), lo.tolist(), hi.tolist(), strict=True):
            r = ranges.get(k)
            ranges[k] = (a, b) if r is None else (min(r[0], a), max(r[1], b))
        known = self.cache.known(set(ranges))
        gap, pad, reach = (
            self.trigger.gap,
            self.trigger.pad,
            self.trigger.gap + self.progress.max_len,
        )
        end_of = self.codec.end_of
        keys: list[bytes] = []
        values: list[bytes] = []
        enc = self.cache.keys.enc
        for k, (a, b) in ranges.items():
            for key, value in self.store.scan_range(SESSIONS.times(enc[k], a - reach, b + 1)):
                close = end_of(value) - pad + gap
                if close >= a and close > cutoff:
                    keys.append(key)
                    values.append(value)
        if keys:
            self._load(self._decode(keys, values), known)

    def touching_one(self, kid: int, t: int, cutoff: int) -> None:
        """:meth:`touching` for one event at ``t`` (without arrays when nothing is stored)."""
        reach = int(self.disk_end_of(one(kid))[0])
        if t <= reach and reach > cutoff:
            self.touching(one(kid), one(t), one(t + self.trigger.gap), cutoff)

    def key(self, key: str, end: int) -> None:
        """Load the stored sessions of ``key`` starting before ``end`` (every partition)."""
        enc = encode_key(key)
        if self.trigger.by_offsets:
            rng = SESSIONS.starting_with(enc)
        else:
            rng = SESSIONS.times(enc, MIN_I64, end)
        found = list(self.store.scan_range(rng))
        if found:
            self._load(self._decode([k for k, _ in found], [v for _, v in found]), None)

    def restore(self) -> None:
        """Load the open and the pending sessions of a restored store (see module doc)."""
        wm = self.clock.watermark
        if self.trigger.by_offsets:
            # ended tuple sessions are deleted at flush: every stored one is open
            found = list(self.store.scan_range(SESSIONS.all()))
            keys = [k for k, _ in found]
            values: list[bytes | None] = [v for _, v in found]
        else:
            ids: dict[tuple[EncodedKey, int], None] = {}
            for k, _ in self.store.scan_range(INDEX.since(wm // self.progress.bucket)):
                e = INDEX.parse(k)
                ids[(e.key, e.time)] = None
            for k, _ in self.store.scan_range(PENDING.all()):
                ids[PENDING.parse(k)] = None
            keys = [SESSIONS.key(enc, start) for enc, start in ids]
            values = self.store.multi_get(SESSIONS.cf, keys)
        present = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        if present:
            rec = self._decode([k for k, _ in present], [v for _, v in present])
            if not self.trigger.by_offsets:
                h = rec.heads
                close = h.end - self.trigger.pad + self.trigger.gap
                rec = rec.take(np.flatnonzero((close > wm) | ((h.flags & FLAG_PENDING) != 0)))
            self._load(rec, set())
        # every stored session that was not loaded closed at or before the watermark
        self._disk_end_default = wm

    def stored_only_open(self) -> list[EncodedKey]:
        """The keys of the open sessions that are in the store only (spilled beyond the
        memory budget), one entry per session (read-only: nothing is loaded).

        The open sessions are those the index holds at or after the watermark's bucket
        whose close the watermark has not passed (as at restore); memory's own sessions
        and the records it superseded are left out.
        """
        wm, cache = self.clock.watermark, self.cache
        sl, enc = cache.slots, cache.keys.enc
        live = sl.live()
        kids, starts = sl.kid[live].tolist(), sl.start[live].tolist()
        known = {(enc[k], start) for k, start in zip(kids, starts, strict=True)}
        stored = live[sl.stored[live]]
        kids, starts = sl.kid[stored].tolist(), sl.stored_start[stored].tolist()
        known.update((enc[k], start) for k, start in zip(kids, starts, strict=True))
        known.update((enc[k], start) for k, start in cache.superseded)
        ids: dict[tuple[EncodedKey, int], None] = {}
        rng = INDEX.since(wm // self.progress.bucket)
        for k, _ in self.store.scan_range(rng, fill_cache=False):
            e = INDEX.parse(k)
            if (e.key, e.time) not in known:
                ids[(e.key, e.time)] = None
        if not ids:
            return []
        keys = [SESSIONS.key(e, start) for e, start in ids]
        values = self.store.multi_get(SESSIONS.cf, keys)
        pairs = [(e, v) for (e, _), v in zip(ids, values, strict=True) if v is not None]
        if not pairs:
            return []
        heads, _ = self.codec.decode([v for _, v in pairs])
        close = heads.end - self.trigger.pad + self.trigger.gap
        is_open = (close > wm) & ((heads.flags & FLAG_CLOSED) == 0)
        return [pairs[i][0] for i in np.flatnonzero(is_open).tolist()]

    def _decode(self, keys: list[bytes], values: list[bytes]) -> _Records:
        encs, starts = SESSIONS.parse_many(keys)
        kid = self.cache.keys.ids_of_encoded(encs)
        heads, tails = self.codec.decode(values)
        return _Records(kid, starts, heads, tails)

    def closing(self, after: int, upto: int) -> None:
        """Load the stored, uncached open sessions closing in ``(after, upto]``.

        They were spilled (evicted while open, beyond the memory budget) and must fire
        now, so they are loaded as open, unlike what :meth:`_load` assumes of a record
        stored as open whose close the watermark passed: every session that closed by
        ``after`` was in the cache when it did. Their index entries are in the buckets of
        their closes or up to :data:`INDEX_HEADROOM` later.
        """
        bucket = self.progress.bucket
        rng = INDEX.buckets((after + 1) // bucket, upto // bucket + INDEX_HEADROOM + 1)
        ids: dict[tuple[EncodedKey, int], None] = {}
        for k, _ in self.store.scan_range(rng):
            e = INDEX.parse(k)
            ids[(e.key, e.time)] = None
        keys = [SESSIONS.key(enc, start) for enc, start in ids]
        found = [(k, v) for k, v in zip(keys, self.store.multi_get(SESSIONS.cf, keys), strict=True)]
        present = [(k, v) for k, v in found if v is not None]
        if not present:
            return
        encs, starts = SESSIONS.parse_many([k for k, _ in present])
        heads, tails = self.codec.decode([v for _, v in present])
        close = heads.end - self.trigger.pad + self.trigger.gap
        due = (close > after) & (close <= upto) & ((heads.flags & FLAG_CLOSED) == 0)
        idx = np.flatnonzero(due)
        kid = self.cache.keys.ids_of_encoded([encs[i] for i in idx.tolist()])
        rec = _Records(kid, starts[idx], heads.take(idx), [tails[i] for i in idx.tolist()])
        self._load(rec, None, fire_check=False)

    def _load(
        self, rec: _Records, known: set[StoredId] | None, *, fire_check: bool = True
    ) -> IntArray:
        """Put records into the cache, skipping ones memory already accounts for.

        ``fire_check``: apply the ON_TIME firing a record stored as open was not
        rewritten for (see :meth:`SessionTrigger.fired_while_stored`).
        """
        if known is None:
            known = self.cache.known(set(rec.kid.tolist()))
        take = np.fromiter(
            (
                (k, s) not in known
                for k, s in zip(rec.kid.tolist(), rec.start.tolist(), strict=True)
            ),
            dtype=np.bool_,
            count=len(rec.kid),
        )
        idx = np.flatnonzero(take)
        if not len(idx):
            return idx
        rec = rec.take(idx)
        trigger, cache = self.trigger, self.cache
        last = rec.heads.end - trigger.pad
        slots = cache.load(rec.kid, rec.start, last, rec.heads)
        # a lower bound of the bucket its index entry is in (>= the bucket of its close)
        cache.indexed(slots, trigger.bucket_of(last, self.progress.bucket))
        if self.aggs.objects or bool((rec.heads.flags & FLAG_EXTRA).any()):
            for j, s in enumerate(slots.tolist()):
                cache.set_tail(s, self.codec.decode_tail(int(rec.heads.flags[j]), rec.tails[j]))
        if not trigger.by_offsets and fire_check:
            sl = cache.slots
            fired = trigger.fired_while_stored(sl.closed[slots], last, self.clock.watermark)
            cache.fired_while_stored(slots[fired], trigger.pad)
        if self.aggs.full_state:
            for s in slots.tolist():
                self._replay_messages(s)
        return slots

    def _replay_messages(self, slot: int) -> None:
        """Rebuild full-state accumulators of a loaded session from the Message Store."""
        sl, keys = self.cache.slots, self.cache.keys
        kid = int(sl.kid[slot])
        enc = keys.enc[kid]
        part = int(keys.part_arr[kid])
        rng = self.messages.span(enc, int(sl.start[slot]), int(sl.last[slot]) + 1)
        for k, v in self.store.scan_range(rng):
            m = self.messages.parse(enc, part, k, v)
            self.cache.replay(slot, m.values, m.order)

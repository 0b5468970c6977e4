"""Reading stored sessions back into the cache.

Closed, clean sessions are evicted at flush; a late event that may touch one brings it
back with one short range scan of its key's records (:meth:`_load_touching`). Loading
skips records memory already accounts for, applies the ON_TIME firing a record was not
rewritten for, and rebuilds full-state accumulators from the Message Store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import orjson

from stores.keys import decode_i64, encode_i64
from stores.rocks import ColumnFamily
from window_operator.aggregations.base import Ordering
from window_operator.session.arrays import IntArray
from window_operator.session.keys import SESSION_TAG, clamp_i64
from window_operator.session.records import (
    FLAG_CLOSED,
    FLAG_EARLY,
    FLAG_EMITTED,
    FLAG_EXTRA,
    FLAG_PENDING,
    Decoded,
    record_end,
)
from window_operator.session.state import SessionState

__all__ = ["StoredSessionLoader"]


class StoredSessionLoader(SessionState):
    """Loads stored sessions into cache slots."""

    def _disk_end_of(self, kids: IntArray) -> IntArray:
        n = len(self.keys)
        if len(self._disk_end) < n:
            grow = np.full(n - len(self._disk_end), self._disk_end_default, dtype=np.int64)
            self._disk_end = np.concatenate([self._disk_end, grow])
        return self._disk_end[kids]

    def _known(self, kids: Iterable[int]) -> set[tuple[int, int]]:
        """Store identities of the given keys that memory already accounts for."""
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[np.fromiter(kids, dtype=np.int64)] = True
        sl = self.slots
        cached = sl.of_kids(mask)
        known = set(zip(sl.kid[cached].tolist(), sl.start[cached].tolist(), strict=True))
        st = cached[sl.stored[cached]]
        known.update(zip(sl.kid[st].tolist(), sl.stored_start[st].tolist(), strict=True))
        known.update(self._deletes)
        return known

    def _load_touching(self, q_kid: IntArray, lo: IntArray, hi: IntArray, cutoff: int) -> None:
        """Load stored, uncached, retained sessions with ``start <= hi`` and ``end >= lo``.

        Keys are key-first, so this is one short range scan per key: a session ending at
        or after ``lo`` starts at or after ``lo - gap - max_len``.
        """
        dend = self._disk_end_of(q_kid)
        need = (lo <= dend) & (dend > cutoff)
        if not need.any():
            return
        q_kid, lo, hi = q_kid[need], lo[need], hi[need]
        ranges: dict[int, tuple[int, int]] = {}
        for k, a, b in zip(q_kid.tolist(), lo.tolist(), hi.tolist(), strict=True):
            r = ranges.get(k)
            ranges[k] = (a, b) if r is None else (min(r[0], a), max(r[1], b))
        known = self._known(ranges)
        gap, reach = self._gap, self._gap + self._max_len
        keys: list[bytes] = []
        values: list[bytes] = []
        for k, (a, b) in ranges.items():
            prefix = SESSION_TAG + self.keys.enc[k]
            scan_lo = prefix + encode_i64(clamp_i64(a - reach))
            scan_hi = prefix + encode_i64(clamp_i64(b + 1))
            for key, value in self.store.scan(ColumnFamily.WINDOW_META, scan_lo, scan_hi):
                last = record_end(value) - self._pad
                if last + gap >= a and last + gap > cutoff:
                    keys.append(key)
                    values.append(value)
        if keys:
            self._load(self.codec.decode(keys, values), lambda _: known)

    def _load(self, rec: Decoded, known_of: Callable[[set[int]], set[tuple[int, int]]]) -> IntArray:
        """Put decoded records into cache slots, skipping ones memory already accounts for."""
        known: set[tuple[int, int]] = known_of(set(rec.kid.tolist()))
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
        sl = self.slots
        slots = sl.allocate(len(idx))
        head = rec.head[idx]
        flags = head["flags"].astype(np.int64)
        sl.kid[slots] = rec.kid[idx]
        sl.start[slots] = rec.start[idx]
        sl.last[slots] = head["end"].astype(np.int64) - self._pad
        sl.seq[slots] = head["seq"]
        sl.em_start[slots] = head["em_start"]
        sl.em_end[slots] = head["em_end"]
        sl.emitted[slots] = (flags & FLAG_EMITTED) != 0
        sl.closed[slots] = (flags & FLAG_CLOSED) != 0
        sl.pending[slots] = (flags & FLAG_PENDING) != 0
        sl.early[slots] = (flags & FLAG_EARLY) != 0
        sl.stored[slots] = True
        sl.stored_start[slots] = rec.start[idx]
        sl.p_stored[slots] = sl.pending[slots]
        # a lower bound of the bucket its index entry is in (>= the bucket of its end)
        sl.idx_bucket[slots] = (sl.last[slots] + self._gap) // self._bucket
        if self.aggs.width:
            sl.acc[slots] = head["acc"]
        if self.aggs.objects or bool((flags & FLAG_EXTRA).any()):
            for j, (i, s) in enumerate(zip(idx.tolist(), slots.tolist(), strict=True)):
                self.codec.decode_tail(s, int(flags[j]), rec.tails[i])
        if not self.by_offsets:
            self._infer_fired(slots)
        if self.aggs.full_state:
            for s in slots.tolist():
                self._load_messages(s)
        return slots

    def _infer_fired(self, slots: IntArray) -> None:
        """Apply the ON_TIME firing a record was not rewritten for (see :meth:`_fire`).

        Open sessions are always cached and fire as soon as the watermark reaches their
        end, so a record written while open whose end the watermark has passed fired
        exactly once since, with its current bounds, retracting everything else.
        """
        sl = self.slots
        fired = slots[~sl.closed[slots] & (sl.last[slots] + self._gap <= self._wm)]
        if not len(fired):
            return
        sl.seq[fired] += 1
        sl.emitted[fired] = True
        sl.em_start[fired] = sl.start[fired]
        sl.em_end[fired] = sl.last[fired] + self._pad
        sl.closed[fired] = True
        sl.early[fired] = False
        for s in fired.tolist():
            sl.extra.pop(s, None)

    def _load_messages(self, slot: int) -> None:
        """Rebuild full-state accumulators of a loaded session from the Message Store."""
        sl = self.slots
        objs = sl.objs[slot]
        assert objs is not None
        kid = int(sl.kid[slot])
        prefix = self.keys.enc[kid]
        lo = prefix + encode_i64(int(sl.start[slot]))
        hi = prefix + encode_i64(int(sl.last[slot]) + 1)
        plen = len(prefix)
        ops = self.aggs.objects
        for k, v in self.store.scan(ColumnFamily.MESSAGES, lo, hi):
            vals = orjson.loads(v)
            if self.by_offsets:
                off = decode_i64(k, plen)
                order = Ordering(int(vals[0]), int(self.keys.part_arr[kid]), off)
                vals = vals[1:]
            else:
                order = Ordering(
                    decode_i64(k, plen), decode_i64(k, plen + 8), decode_i64(k, plen + 16)
                )
            for j, val in zip(self.aggs.full_state, vals, strict=True):
                objs[j] = ops[j][1].accumulate(objs[j], val, order)

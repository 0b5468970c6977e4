"""Reading committed messages back from the Message Store: range scans per join key or
per time range, and the deep matches of probes that reach below the cache's horizon.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from stores.keys import prefix_upper_bound, ts_range
from stores.rocks import ColumnFamily, TaskStore
from window_operator.join.cache import SideCache, range_join
from window_operator.join.common import EMPTY, BoolArray, IntArray, ObjArray, obj_array
from window_operator.join.keys import KeyTable
from window_operator.join.layouts import MSG_TAG, StoreLayout, decode_message

__all__ = ["MessageReader"]


class MessageReader:
    """Reads the messages of either input from ``store`` (stored in ``layout``)."""

    def __init__(self, store: TaskStore, layout: StoreLayout, keys: KeyTable) -> None:
        self.store = store
        self.layout = layout
        self.keys = keys

    def scan(
        self, side: int, kids: Collection[int] | None, lo: int, hi: int
    ) -> list[tuple[int, int, int, bytes]]:
        """Committed messages of ``side`` with ``lo <= ts <= hi``: (kid, ts, pos, rec)."""
        tag = MSG_TAG[side]
        keys = self.keys
        layout = self.layout
        out: list[tuple[int, int, int, bytes]] = []
        end: bytes | None
        if layout.key_first and kids is not None:
            for kid in kids:
                prefix = tag + keys.encoded[kid]
                if layout is StoreLayout.FIELDS_TS_OFFSET:
                    start, end = ts_range(prefix, lo, hi + 1)
                else:
                    start, end = prefix, prefix_upper_bound(prefix)
                for k, v in self.store.scan(ColumnFamily.MESSAGES, start, end):
                    _, t, p, rec = decode_message(layout, k, v)
                    if lo <= t <= hi:
                        out.append((kid, t, p, rec))
            return out
        if layout.key_first:
            start, end = tag, prefix_upper_bound(tag)
        else:
            start, end = ts_range(tag, lo, hi + 1)
        wanted = kids if kids is None or isinstance(kids, set | frozenset) else set(kids)
        by_enc = keys.by_encoded
        for k, v in self.store.scan(ColumnFamily.MESSAGES, start, end):
            enc, t, p, rec = decode_message(layout, k, v)
            if not lo <= t <= hi:
                continue
            if wanted is None:
                kid = keys.from_encoded(enc)
            else:
                found = by_enc.get(enc)
                if found is None or found not in wanted:
                    continue
                kid = found
            out.append((kid, t, p, rec))
        return out

    def deep_matches(
        self,
        side: int,
        cache: SideCache,
        kids: IntArray,
        lo_ts: IntArray,
        hi_ts: IntArray,
        deep: BoolArray,
    ) -> tuple[IntArray, IntArray, IntArray, ObjArray]:
        """Matches in ``side`` below its ``cache``'s horizon, read from RocksDB.

        Probe ``i`` (where ``deep[i]``) asks for key ``kids[i]`` with ts in
        ``[lo_ts[i], hi_ts[i]]``; returns ``(probe, ts, position, record)`` per match.
        """
        h = cache.horizon
        di = np.flatnonzero(deep)
        q_kid, q_lo = kids[di], lo_ts[di]
        q_hi = np.minimum(hi_ts[di], h - 1)
        ok = q_lo <= q_hi
        di, q_kid, q_lo, q_hi = di[ok], q_kid[ok], q_lo[ok], q_hi[ok]
        empty = (EMPTY, EMPTY, EMPTY, np.empty(0, dtype=object))
        if not len(di):
            return empty
        if self.layout.key_first:
            found = self._scan_per_key(side, q_kid, q_lo, q_hi)
        else:
            found = self._scan_per_range(side, q_kid, q_lo, q_hi)
        if not found:
            return empty
        below = cache.ts < h
        if below.any():
            # flushed messages still cached below the horizon come from the cache
            cached = set(cache.pos[below].tolist())
            found = [f for f in found if f[2] not in cached]
            if not found:
                return empty
        c_kid = np.fromiter((f[0] for f in found), dtype=np.int64, count=len(found))
        c_ts = np.fromiter((f[1] for f in found), dtype=np.int64, count=len(found))
        c_pos = np.fromiter((f[2] for f in found), dtype=np.int64, count=len(found))
        c_rec = obj_array([f[3] for f in found])
        qi, ci = range_join(c_kid, c_ts, q_kid, q_lo, q_hi)
        return di[qi], c_ts[ci], c_pos[ci], c_rec[ci]

    def _scan_per_key(
        self, side: int, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
    ) -> list[tuple[int, int, int, bytes]]:
        """One range scan per join key, over the union of its probes' ranges."""
        found: list[tuple[int, int, int, bytes]] = []
        order = np.argsort(q_kid, kind="stable")
        sk = q_kid[order]
        bounds = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1], [True])))
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            sel = order[s:e]
            kid = int(sk[s])
            found.extend(self.scan(side, [kid], int(q_lo[sel].min()), int(q_hi[sel].max())))
        return found

    def _scan_per_range(
        self, side: int, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
    ) -> list[tuple[int, int, int, bytes]]:
        """One range scan per merged time range, for every key at once."""
        found: list[tuple[int, int, int, bytes]] = []
        wanted = set(q_kid.tolist())
        order = np.argsort(q_lo, kind="stable")
        cl, ch = int(q_lo[order[0]]), int(q_hi[order[0]])
        ranges: list[tuple[int, int]] = []
        for lo, hi in zip(q_lo[order].tolist(), q_hi[order].tolist(), strict=True):
            if lo > ch + 1:
                ranges.append((cl, ch))
                cl, ch = lo, hi
            else:
                ch = max(ch, hi)
        ranges.append((cl, ch))
        for lo, hi in ranges:
            found.extend(self.scan(side, wanted, lo, hi))
        return found

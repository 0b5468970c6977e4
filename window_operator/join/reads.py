"""Reading committed messages back from the Message Store: range scans per join key or
per time range, and the deep matches of probes that reach below the cache's horizon.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from stores.keyspace import KeyRange, MessageLayout
from stores.rocks import TaskStore
from window_operator.arrays import BoolArray, IntArray, ObjArray
from window_operator.join.cache import SideCache, range_join
from window_operator.join.common import EMPTY, obj_array
from window_operator.join.keys import JoinKeyTable
from window_operator.join.state import MessageCodec

__all__ = ["FoundMessages", "MessageReader", "Partners"]


@dataclass(frozen=True, slots=True)
class FoundMessages:
    """Committed messages of one input (key id, event time, position, record JSON)."""

    kid: IntArray
    ts: IntArray
    pos: IntArray
    rec: list[bytes]

    def __len__(self) -> int:
        return len(self.rec)

    def select(self, mask: BoolArray) -> FoundMessages:
        """The messages where ``mask`` is set."""
        idx = np.flatnonzero(mask).tolist()
        return FoundMessages(
            self.kid[mask], self.ts[mask], self.pos[mask], [self.rec[i] for i in idx]
        )

    @staticmethod
    def concat(parts: list[FoundMessages]) -> FoundMessages:
        """The messages of every part, in order."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return FoundMessages(EMPTY, EMPTY, EMPTY, [])
        return FoundMessages(
            np.concatenate([p.kid for p in parts]),
            np.concatenate([p.ts for p in parts]),
            np.concatenate([p.pos for p in parts]),
            [r for p in parts for r in p.rec],
        )


@dataclass(frozen=True, slots=True)
class Partners:
    """Stored partners of probes: per match, the probe's index and the partner's event
    time, position and record JSON."""

    probe: IntArray
    ts: IntArray
    pos: IntArray
    rec: ObjArray


NO_PARTNERS = Partners(EMPTY, EMPTY, EMPTY, np.empty(0, dtype=object))


class MessageReader:
    """Reads the messages of either input from ``store`` (each through its codec)."""

    def __init__(
        self, store: TaskStore, codecs: tuple[MessageCodec, MessageCodec], keys: JoinKeyTable
    ) -> None:
        self.store = store
        self.codecs = codecs
        self.keys = keys

    def scan(self, side: int, kids: Collection[int] | None, lo: int, hi: int) -> FoundMessages:
        """Committed messages of ``side`` with ``lo <= ts <= hi`` (of ``kids``, or all)."""
        ks = self.codecs[side].keyspace
        layout = ks.layout
        if layout.key_first and kids is not None:
            parts = []
            for kid in kids:
                enc = self.keys.encoded[kid]
                if layout is MessageLayout.FIELDS_TS_OFFSET:
                    rng = ks.key_times(enc, lo, hi + 1)
                else:
                    rng = ks.of_key(enc)
                parts.append(self._read(side, rng, lo, hi, kid, None))
            return FoundMessages.concat(parts)
        rng = ks.all() if layout.key_first else ks.times(lo, hi + 1)
        wanted = None if kids is None else np.fromiter(kids, dtype=np.int64, count=len(kids))
        return self._read(side, rng, lo, hi, None, wanted)

    def _read(
        self, side: int, rng: KeyRange, lo: int, hi: int, kid: int | None, wanted: IntArray | None
    ) -> FoundMessages:
        """The messages of a range with ``lo <= ts <= hi``: all of ``kid`` when given,
        else those of the ``wanted`` keys (``None``: every key, interned as needed)."""
        items = list(self.store.scan_range(rng))
        if not items:
            return FoundMessages.concat([])
        msgs = self.codecs[side].decode([k for k, _ in items], [v for _, v in items])
        keep = (msgs.ts >= lo) & (msgs.ts <= hi)
        idx = np.flatnonzero(keep).tolist()
        fields = [msgs.fields[i] for i in idx]
        if kid is not None:
            kids = np.full(len(idx), kid, dtype=np.int64)
        elif wanted is None:
            kids = np.asarray([self.keys.from_encoded(f) for f in fields], dtype=np.int64)
        else:
            by_enc = self.keys.by_encoded
            kids = np.asarray([by_enc.get(f, -1) for f in fields], dtype=np.int64)
        found = FoundMessages(kids, msgs.ts[keep], msgs.pos[keep], [msgs.rec[i] for i in idx])
        if wanted is not None:
            found = found.select(np.isin(kids, wanted))
        return found

    def deep_matches(
        self,
        side: int,
        cache: SideCache,
        kids: IntArray,
        lo_ts: IntArray,
        hi_ts: IntArray,
        deep: BoolArray,
    ) -> Partners:
        """Matches in ``side`` below its ``cache``'s horizon, read from RocksDB.

        Probe ``i`` (where ``deep[i]``) asks for key ``kids[i]`` with ts in
        ``[lo_ts[i], hi_ts[i]]``.
        """
        h = cache.horizon
        di = np.flatnonzero(deep)
        q_kid, q_lo = kids[di], lo_ts[di]
        q_hi = np.minimum(hi_ts[di], h - 1)
        ok = q_lo <= q_hi
        di, q_kid, q_lo, q_hi = di[ok], q_kid[ok], q_lo[ok], q_hi[ok]
        if not len(di):
            return NO_PARTNERS
        if self.codecs[side].layout.key_first:
            found = self._scan_per_key(side, q_kid, q_lo, q_hi)
        else:
            found = self._scan_per_range(side, q_kid, q_lo, q_hi)
        below = cache.ts < h
        if len(found) and below.any():
            # flushed messages still cached below the horizon come from the cache
            found = found.select(~np.isin(found.pos, cache.pos[below]))
        if not len(found):
            return NO_PARTNERS
        qi, ci = range_join(found.kid, found.ts, q_kid, q_lo, q_hi)
        return Partners(di[qi], found.ts[ci], found.pos[ci], obj_array(found.rec)[ci])

    def _scan_per_key(
        self, side: int, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
    ) -> FoundMessages:
        """One range scan per join key, over the union of its probes' ranges."""
        parts: list[FoundMessages] = []
        order = np.argsort(q_kid, kind="stable")
        sk = q_kid[order]
        bounds = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1], [True])))
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            sel = order[s:e]
            kid = int(sk[s])
            parts.append(self.scan(side, [kid], int(q_lo[sel].min()), int(q_hi[sel].max())))
        return FoundMessages.concat(parts)

    def _scan_per_range(
        self, side: int, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
    ) -> FoundMessages:
        """One range scan per merged time range, for every key at once."""
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
        return FoundMessages.concat([self.scan(side, wanted, lo, hi) for lo, hi in ranges])

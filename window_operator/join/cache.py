"""The in-memory message cache of the hot path: each input's recent messages sorted by
``(join key, ts)`` under one int64 code, and vectorized range matching over sorted codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stores.keys import MIN_I64
from window_operator.arrays import BoolArray, IntArray, ObjArray
from window_operator.join.common import EMPTY

__all__ = ["Codec", "SideCache", "expand", "fit_codec", "range_join"]


@dataclass(frozen=True, slots=True)
class Codec:
    """Maps ``(key id, ts)`` to one sortable int64: ``kid << bits | (ts - base)``."""

    base: int
    bits: int

    def fits(self, kid_max: int, ts_min: int, ts_max: int) -> bool:
        """Whether key ids up to ``kid_max`` and times in ``[ts_min, ts_max]`` have codes."""
        return (
            kid_max < (1 << (62 - self.bits))
            and ts_min >= self.base
            and ts_max < self.base + (1 << self.bits)
        )

    def codes(self, kids: IntArray, ts: IntArray) -> IntArray:
        """The code of each ``(kids[i], ts[i])``."""
        out: IntArray = (kids << self.bits) + (ts - self.base)
        return out

    def range_codes(self, kids: IntArray, lo: IntArray, hi: IntArray) -> tuple[IntArray, IntArray]:
        """Codes bounding ``[lo, hi]`` per key: ``[start, end)`` (clipped to the codec)."""
        span = 1 << self.bits
        k = kids << self.bits
        start: IntArray = k + np.clip(lo - self.base, 0, span)
        end: IntArray = k + np.clip(hi - self.base + 1, 0, span)
        return start, end


class SideCache:
    """Recent messages of one input, sorted by ``(key, ts)``; complete for ts >= horizon."""

    def __init__(self) -> None:
        self.code: IntArray = EMPTY
        self.kid: IntArray = EMPTY
        self.ts: IntArray = EMPTY
        self.pos: IntArray = EMPTY
        self.rec: ObjArray = np.empty(0, dtype=object)
        #: Every stored message with ``ts >= horizon`` is in the cache.
        self.horizon = MIN_I64

    def __len__(self) -> int:
        return len(self.code)

    def insert(
        self, code: IntArray, kid: IntArray, ts: IntArray, pos: IntArray, rec: ObjArray
    ) -> None:
        """Add messages (any order), keeping the cache sorted by code."""
        order = np.argsort(code, kind="stable")
        code, kid, ts, pos, rec = code[order], kid[order], ts[order], pos[order], rec[order]
        if not len(self.code):
            self.code, self.kid, self.ts, self.pos, self.rec = code, kid, ts, pos, rec
            return
        at = np.searchsorted(self.code, code, side="right")
        self.code = np.insert(self.code, at, code)
        self.kid = np.insert(self.kid, at, kid)
        self.ts = np.insert(self.ts, at, ts)
        self.pos = np.insert(self.pos, at, pos)
        self.rec = np.insert(self.rec, at, rec)

    def keep(self, mask: BoolArray) -> None:
        """Keep only the messages selected by ``mask``."""
        self.code, self.kid, self.ts = self.code[mask], self.kid[mask], self.ts[mask]
        self.pos, self.rec = self.pos[mask], self.rec[mask]

    def recode(self, codec: Codec, remap: IntArray | None = None) -> None:
        """Recompute the codes under ``codec``, first renumbering key ids by ``remap``."""
        if remap is not None:
            self.kid = remap[self.kid]
        self.code = codec.codes(self.kid, self.ts)
        if remap is not None:
            # new ids need not keep the old key order
            order = np.argsort(self.code, kind="stable")
            self.code, self.kid, self.ts = self.code[order], self.kid[order], self.ts[order]
            self.pos, self.rec = self.pos[order], self.rec[order]

    def evict(self, target: int, max_rows: int) -> None:
        """Raise the horizon to ``target`` (or higher, to hold at most ``max_rows``)."""
        h = max(self.horizon, target)
        if len(self) > max_rows:
            cap = max_rows
            h = max(h, int(np.partition(self.ts, len(self) - cap - 1)[len(self) - cap - 1]) + 1)
        self.horizon = h
        if len(self):
            stale = self.ts < h
            n_stale = int(stale.sum())
            # Messages below the horizon may stay: they are flushed, and deep reads
            # skip their disk copies. Compacting only in bulk keeps eviction cheap.
            if n_stale and (n_stale > max(4096, len(self) // 8) or len(self) > max_rows):
                self.keep(~stale)


def fit_codec(
    caches: Sequence[SideCache], n_keys: int, kid_max: int, ts_min: int, ts_max: int
) -> Codec:
    """A codec for ``n_keys`` keys and ``[ts_min, ts_max]`` plus the cached messages.

    The caches are recoded under it. Raises :class:`RuntimeError` when no 62-bit code
    can hold them.
    """
    lo, hi = ts_min, ts_max
    for cache in caches:
        if len(cache):
            lo, hi = min(lo, int(cache.ts.min())), max(hi, int(cache.ts.max()))
    kid_bits = (max(kid_max + 1, n_keys) * 2).bit_length()
    bits = max(min(40, 62 - kid_bits), (hi - lo).bit_length() + 1)
    if bits + kid_bits > 62:
        raise RuntimeError(
            f"the cached messages span {hi - lo} ms over {n_keys} join keys, "
            "more than a 62-bit (key, time) code can hold; lower cache_max_rows"
        )
    span = 1 << bits
    codec = Codec(lo - (span - (hi - lo)) // 2, bits)
    for cache in caches:
        cache.recode(codec)
    return codec


def expand(starts: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """Flatten ranges ``[starts[i], ends[i])`` into ``(i, index)`` pairs."""
    counts = np.maximum(ends - starts, 0)
    total = int(counts.sum())
    if total == 0:
        return EMPTY, EMPTY
    probe = np.repeat(np.arange(len(starts), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    slots: IntArray = starts[probe] + (np.arange(total, dtype=np.int64) - first[probe])
    return probe, slots


def range_join(
    c_kid: IntArray, c_ts: IntArray, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
) -> tuple[IntArray, IntArray]:
    """Pairs ``(query, candidate)`` with equal key and ``q_lo <= c_ts <= q_hi``."""
    if not len(c_kid) or not len(q_kid):
        return EMPTY, EMPTY
    order = np.lexsort((c_ts, c_kid))
    sk, st = c_kid[order], c_ts[order]
    ukid, inv = np.unique(np.concatenate([sk, q_kid]), return_inverse=True)
    rk, rq = inv[: len(sk)].astype(np.int64), inv[len(sk) :].astype(np.int64)
    tmin = min(int(st.min()), int(q_lo.min()))
    tmax = max(int(st.max()), int(q_hi.max()))
    span = tmax - tmin + 2
    if span * (len(ukid) + 1) < 2**62:
        codes = rk * span + (st - tmin)
        lo = rq * span + (np.minimum(q_lo, tmax + 1) - tmin)
        hi = rq * span + (np.minimum(q_hi, tmax) - tmin + 1)
        qi, k = expand(np.searchsorted(codes, lo), np.searchsorted(codes, hi))
        return qi, order[k]
    # Extreme timestamps: per key, searching the key's slice by time.
    q_out: list[IntArray] = []
    c_out: list[IntArray] = []
    for r in np.unique(rq).tolist():
        a, b = np.searchsorted(rk, r), np.searchsorted(rk, r, side="right")
        qs = np.flatnonzero(rq == r)
        seg = st[a:b]
        qi, k = expand(np.searchsorted(seg, q_lo[qs]), np.searchsorted(seg, q_hi[qs], side="right"))
        q_out.append(qs[qi])
        c_out.append(order[a + k])
    return np.concatenate(q_out), np.concatenate(c_out)

"""The partners of new messages of a time join: the other input's recent messages from
its in-memory cache (vectorized range searches), older ones from RocksDB.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import numpy as np

from window_operator.arrays import IntArray, ObjArray
from window_operator.join.cache import Codec, SideCache, expand, fit_codec
from window_operator.join.common import EMPTY
from window_operator.join.keys import JoinKeyTable
from window_operator.join.reads import MessageReader, Partners
from window_operator.join.spec import JoinSpec
from window_operator.policies import END_OF_TIME, NO_WATERMARK

__all__ = ["TimeMatcher"]

#: Bytes of a cached message besides its record's: five array entries and the record's
#: object header and allocation.
_ROW_OVERHEAD = 5 * 8 + 48
#: Records measured to estimate the mean record length of a cache.
_SAMPLE = 64


@dataclass(eq=False)
class TimeMatcher:
    """Each input's message cache (sorted by ``(join key, ts)`` codes) and the probes.

    A cache holds every stored message of its input from its horizon on; probes that
    reach below it read RocksDB. ``slack_ms`` / ``max_rows`` / ``max_bytes`` bound what
    stays cached after a flush (how far behind the watermark's reach, how many messages
    per input, and the estimated bytes of both caches; ``None``: no byte bound).
    """

    spec: JoinSpec
    keys: JoinKeyTable
    reader: MessageReader
    _: KW_ONLY
    slack_ms: int
    max_rows: int
    max_bytes: int | None = None
    caches: tuple[SideCache, SideCache] = field(
        init=False, default_factory=lambda: (SideCache(), SideCache())
    )
    codec: Codec | None = field(init=False, default=None)

    def partners(self, side: int, kids: IntArray, ts: IntArray) -> Partners:
        """The stored messages of the other input that new messages of ``side`` join,
        by probe then partner ``(ts, position)``."""
        codec = self._ensure_codec(int(kids.max()), int(ts.min()), int(ts.max()))
        other = 1 - side
        a, b = self.spec.reach(other)
        lo_ts, hi_ts = ts + a, ts + b
        cache = self.caches[other]
        probe, slots = EMPTY, EMPTY
        if len(cache):
            lo_c, hi_c = codec.range_codes(kids, lo_ts, hi_ts)
            probe, slots = expand(
                np.searchsorted(cache.code, lo_c), np.searchsorted(cache.code, hi_c)
            )
        found = Partners(probe, cache.ts[slots], cache.pos[slots], cache.rec[slots])
        deep = lo_ts < cache.horizon
        if not deep.any():
            return found
        stored = self.reader.deep_matches(other, cache, kids, lo_ts, hi_ts, deep)
        if not len(stored.probe):
            return found
        probe = np.concatenate([found.probe, stored.probe])
        p_ts = np.concatenate([found.ts, stored.ts])
        p_pos = np.concatenate([found.pos, stored.pos])
        order = np.lexsort((p_pos, p_ts, probe))
        p_rec = np.concatenate([found.rec, stored.rec])[order]
        return Partners(probe[order], p_ts[order], p_pos[order], p_rec)

    def insert(self, side: int, kids: IntArray, ts: IntArray, pos: IntArray, rec: ObjArray) -> None:
        """Cache new messages of ``side`` (after :meth:`partners` fitted the codec)."""
        assert self.codec is not None
        self.caches[side].insert(self.codec.codes(kids, ts), kids, ts, pos, rec)

    def evict(self, watermark: int) -> None:
        """Drop flushed messages the watermark's reach has passed (or beyond the cap)."""
        if self.spec.rows is not None or watermark <= NO_WATERMARK:
            return
        for side, cache in enumerate(self.caches):
            a, _ = self.spec.reach(side)
            target = watermark + a - self.slack_ms if watermark < END_OF_TIME else END_OF_TIME
            cache.evict(target, min(self.max_rows, self._budget_rows(cache)))

    def _budget_rows(self, cache: SideCache) -> int:
        """How many messages of ``cache`` fit its half of the byte budget (estimated from a
        sample of its records)."""
        n = len(cache)
        if not n or self.max_bytes is None:
            return self.max_rows
        sample = cache.rec[:: max(1, n // _SAMPLE)]
        per_row = _ROW_OVERHEAD + sum(map(len, sample)) / len(sample)
        return int(self.max_bytes // 2 / per_row)

    def live_kids(self) -> list[IntArray]:
        """The key ids the caches refer to."""
        return [c.kid for c in self.caches]

    def remap(self, remap: IntArray) -> None:
        """Renumber the cached key ids (old id -> ``remap[old]``)."""
        if self.codec is not None:
            for cache in self.caches:
                cache.recode(self.codec, remap)

    def _ensure_codec(self, kid_max: int, ts_min: int, ts_max: int) -> Codec:
        c = self.codec
        if c is None or not c.fits(kid_max, ts_min, ts_max):
            c = self.codec = fit_codec(self.caches, len(self.keys), kid_max, ts_min, ts_max)
        return c

"""The batch sweep: cut a batch into sessions and merge them with existing ones.

Accepted events are sorted per (key, time) and cut into the batch's own sessions,
pre-aggregated with NumPy, then swept together with the retained sessions of the
touched keys (cached, or loaded from the store when they may touch): every group of
touching intervals becomes one session, whose accumulators are *combined* (never
recomputed from messages). The survivor of a group is its earliest existing session,
in whose slot the others are merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet
from window_operator.events import EventBatch
from window_operator.policies import NO_WATERMARK, LateMode
from window_operator.session.arrays import BoolArray, FloatArray, IntArray
from window_operator.session.loading import StoredSessionLoader
from window_operator.session.records import PendingMessage

__all__ = [
    "BatchMerge",
    "BatchSessions",
    "Sweep",
    "plain",
    "reduce_groups",
    "session_breaks",
    "sweep",
]


def plain(value: Any) -> Any:
    """NaN (the columnar null) back to None for object operations."""
    if isinstance(value, float) and value != value:
        return None
    return value


@dataclass(frozen=True, slots=True)
class BatchSessions:
    """The batch's own sessions, in (key, start) order, pre-aggregated."""

    kid: IntArray
    start: IntArray
    last: IntArray
    #: accumulator row per session (``AggregationSet`` layout)
    partial: FloatArray
    #: object accumulators per session (None without object operations)
    objs: list[list[Any]] | None
    #: number of events per session
    events: IntArray


@dataclass(frozen=True, slots=True)
class Sweep:
    """Batch and existing sessions grouped into the sessions they merge into.

    Members (one per batch or existing session that belongs to a group touched by the
    batch) are in (key, start) order; ``src`` is a cache slot where ``is_ex`` (an
    existing session) and an index into :class:`BatchSessions` elsewhere; ``gid`` is the
    group of each member. Per group: its first member, size, key and merged bounds.
    """

    src: IntArray
    is_ex: BoolArray
    gid: IntArray
    g_first: IntArray
    g_size: IntArray
    g_kid: IntArray
    g_start: IntArray
    g_last: IntArray


def sweep(
    ex_kid: IntArray,
    ex_start: IntArray,
    ex_last: IntArray,
    ex: IntArray,
    b: BatchSessions,
    gap: int,
) -> Sweep:
    """Sweep batch sessions and existing ones (slots ``ex``) together, per key in start order.

    Every group of touching intervals becomes one session; groups without a batch session
    are left out (nothing changes them).
    """
    b_kid, b_start, b_last = b.kid, b.start, b.last
    nb = len(b_kid)
    ne = len(ex)
    m_kid = np.concatenate([ex_kid, b_kid])
    m_start = np.concatenate([ex_start, b_start])
    m_last = np.concatenate([ex_last, b_last])
    m_src = np.concatenate([ex, np.arange(nb, dtype=np.int64)])
    m_is_ex = np.arange(ne + nb) < ne
    order = np.lexsort((m_start, m_kid))
    m_kid, m_start, m_last = m_kid[order], m_start[order], m_last[order]
    m_src, m_is_ex = m_src[order], m_is_ex[order]
    gid = np.cumsum(session_breaks(m_kid, m_start, m_last + gap)) - 1
    has_batch = np.zeros(int(gid[-1]) + 1, dtype=np.bool_)
    has_batch[gid[~m_is_ex]] = True
    keep = has_batch[gid]
    m_kid, m_start, m_last = m_kid[keep], m_start[keep], m_last[keep]
    m_src, m_is_ex, gid = m_src[keep], m_is_ex[keep], gid[keep]
    newg = np.ones(len(gid), dtype=np.bool_)
    newg[1:] = gid[1:] != gid[:-1]
    gid = np.cumsum(newg) - 1
    g_first = np.flatnonzero(newg)
    g_size = np.diff(np.append(g_first, len(gid)))
    g_kid = m_kid[g_first]
    g_start = m_start[g_first]
    g_last = np.maximum.reduceat(m_last, g_first)
    return Sweep(m_src, m_is_ex, gid, g_first, g_size, g_kid, g_start, g_last)


class BatchMerge(StoredSessionLoader):
    """Merges a batch of accepted events into the sessions of their keys."""

    def _apply(
        self,
        batch: EventBatch,
        idx: IntArray,
        kids: IntArray,
        axis: IntArray,
        off: IntArray,
        wm_before: int,
    ) -> int:
        """Merge accepted events into sessions; return how many landed in closed ones."""
        b = self._batch_sessions(batch, idx, kids, axis, off)
        ex = self._touched_sessions(b, wm_before)
        sl = self.slots
        sw = sweep(sl.kid[ex], sl.start[ex], sl.last[ex], ex, b, self._gap)
        surv = self._merge_groups(sw, b)
        closed = self._settle(surv, sw, wm_before)
        if not closed.any():
            return 0
        nb = len(b.kid)
        b_group = np.empty(nb, dtype=np.int64)
        batch_pos = np.flatnonzero(~sw.is_ex)
        b_group[sw.src[batch_pos]] = sw.gid[batch_pos]
        return int(b.events[closed[b_group]].sum())

    def _batch_sessions(
        self, batch: EventBatch, idx: IntArray, kids: IntArray, axis: IntArray, off: IntArray
    ) -> BatchSessions:
        """The batch's own sessions: sort per (key, time), cut where the gap is exceeded."""
        gap = self._gap
        aggs = self.aggs
        order = np.lexsort((axis, kids))
        sk, sa = kids[order], axis[order]
        cut = np.ones(len(sk), dtype=np.bool_)
        cut[1:] = (sk[1:] != sk[:-1]) | (sa[1:] - sa[:-1] > gap)
        first = np.flatnonzero(cut)
        b_kid, b_start = sk[first], sa[first]
        b_last = np.append(sa[first[1:] - 1], sa[-1])
        groups = np.empty(len(sk), dtype=np.int64)
        groups[order] = np.cumsum(cut) - 1
        nb = len(first)
        partial = np.empty((nb, aggs.width))
        if aggs.width:
            whole = len(idx) == len(batch)
            numeric = batch.numeric if whole else {f: v[idx] for f, v in batch.numeric.items()}
            partial = aggs.accumulate(numeric, batch.ts[idx], groups, nb)
        b_objs = self._batch_objects(batch, idx, groups, nb, kids, off) if aggs.objects else None
        b_events = np.bincount(groups, minlength=nb)
        return BatchSessions(b_kid, b_start, b_last, partial, b_objs, b_events)

    def _touched_sessions(self, b: BatchSessions, wm_before: int) -> IntArray:
        """Existing sessions of the touched keys (stored ones too, when they may touch)."""
        gap = self._gap
        cutoff = NO_WATERMARK if self.by_offsets else wm_before - self.policy.retention
        if not self.by_offsets:
            self._load_touching(b.kid, b.start, b.last + gap, cutoff)
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[b.kid] = True
        sl = self.slots
        ex = sl.of_kids(mask)
        if not self.by_offsets and len(ex):
            # sessions past retention take part in nothing (see _retained)
            ex = ex[sl.last[ex] + gap > cutoff]
        return ex

    def _merge_groups(self, sw: Sweep, b: BatchSessions) -> IntArray:
        """Combine each group into one slot; return the slot of each group.

        The survivor of a group is its earliest existing session: its record key stays
        valid (unless the batch reaches further back); others are merged in.
        """
        aggs = self.aggs
        sl = self.slots
        m_src, m_is_ex, gid = sw.src, sw.is_ex, sw.gid
        g_first, g_size = sw.g_first, sw.g_size
        surv = np.full(len(g_first), -1, dtype=np.int64)
        ex_pos = np.flatnonzero(m_is_ex)
        ex_gid = gid[ex_pos]
        u_gid, first_ex = np.unique(ex_gid, return_index=True)
        surv[u_gid] = m_src[ex_pos[first_ex]]
        merged_away = np.ones(len(ex_pos), dtype=np.bool_)
        merged_away[first_ex] = False
        gone = m_src[ex_pos[merged_away]]
        fresh_g = np.flatnonzero(surv < 0)
        if len(fresh_g):
            new_slots = sl.allocate(len(fresh_g))
            surv[fresh_g] = new_slots
            sl.kid[new_slots] = sw.g_kid[fresh_g]
            sl.seq[new_slots] = 0
        if aggs.width:
            rows = np.where(
                m_is_ex[:, None],
                sl.acc[np.where(m_is_ex, m_src, 0)],
                b.partial[np.where(m_is_ex, 0, m_src)],
            )
            sl.acc[surv] = reduce_groups(aggs, rows, gid, g_first, g_size)
        if b.objs is not None:
            self._combine_group_objects(surv, m_src, m_is_ex, g_first, g_size, b.objs)
        if len(gone):
            self._absorb(surv, gid[ex_pos[merged_away]], gone)
        return surv

    def _settle(self, surv: IntArray, sw: Sweep, wm_before: int) -> BoolArray:
        """Set the new bounds and state of every touched session; return which are closed."""
        sl = self.slots
        g_last = sw.g_last
        sl.start[surv] = sw.g_start
        sl.last[surv] = g_last
        sl.dirty[surv] = True
        closed: BoolArray
        if self.by_offsets:
            closed = np.zeros(len(surv), dtype=np.bool_)
        else:
            closed = g_last + self._gap <= wm_before
        late_on = self.policy.late_mode is not LateMode.OFF
        sl.closed[surv] = closed
        sl.pending[surv] = closed & late_on
        sl.early[surv] = ~closed
        if late_on and closed.any() and self._late_since is None:
            if self.policy.late_mode is LateMode.PERIOD:
                self._late_since = None if self._now <= NO_WATERMARK else self._now
        return closed

    def _batch_objects(
        self,
        batch: EventBatch,
        idx: IntArray,
        groups: IntArray,
        nb: int,
        kids: IntArray,
        off: IntArray,
    ) -> list[list[Any]]:
        """Object accumulators of the batch's sessions (and full-state messages to store)."""
        ops = self.aggs.objects
        out = [self.aggs.create_objects() for _ in range(nb)]
        n = len(batch)
        cols = [
            [None] * n
            if agg.field is None
            else batch.objects[agg.field]
            if agg.field in batch.objects
            else batch.numeric[agg.field].tolist()
            for agg, _ in ops
        ]
        full = self.aggs.full_state
        ts_l = batch.ts.tolist()
        part_l = batch.partition.tolist()
        off_l = off.tolist()
        kid_l = kids.tolist()
        grp_l = groups.tolist()
        pending = self._messages
        for j, i in enumerate(idx.tolist()):
            objs = out[grp_l[j]]
            order = Ordering(ts_l[i], part_l[i], off_l[i])
            for o, (_, op) in enumerate(ops):
                objs[o] = op.accumulate(objs[o], plain(cols[o][i]), order)
            if full:
                values = tuple(plain(cols[o][i]) for o in full)
                pending.append(PendingMessage(kid_l[j], ts_l[i], part_l[i], off_l[i], values))
        return out

    def _combine_group_objects(
        self,
        surv: IntArray,
        m_src: IntArray,
        m_is_ex: BoolArray,
        g_first: IntArray,
        g_size: IntArray,
        b_objs: list[list[Any]],
    ) -> None:
        sl = self.slots
        aggs = self.aggs
        src_l = m_src.tolist()
        is_ex_l = m_is_ex.tolist()
        for g, (f, size) in enumerate(zip(g_first.tolist(), g_size.tolist(), strict=True)):
            acc: list[Any] | None = None
            for m in range(f, f + size):
                part = sl.objs[src_l[m]] if is_ex_l[m] else b_objs[src_l[m]]
                assert part is not None
                acc = part if acc is None else aggs.combine_objects(acc, part)
            sl.objs[int(surv[g])] = acc

    def _absorb(self, surv: IntArray, groups: IntArray, gone: IntArray) -> None:
        """Merge the bookkeeping of sessions merged away into their survivors; free them."""
        sl = self.slots
        for g, s in zip(groups.tolist(), gone.tolist(), strict=True):
            t = int(surv[g])
            sl.seq[t] = max(int(sl.seq[t]), int(sl.seq[s]))
            bounds = sl.emitted_bounds(s)
            if bounds:
                if not sl.emitted[t]:
                    sl.emitted[t] = True
                    sl.em_start[t], sl.em_end[t] = bounds[0]
                    bounds = bounds[1:]
                if bounds:
                    sl.extra.setdefault(t, []).extend(bounds)
            if sl.stored[s]:
                self._deletes[(int(sl.kid[s]), int(sl.stored_start[s]))] = bool(sl.p_stored[s])
        sl.release(gone)


def session_breaks(kid: IntArray, start: IntArray, reach: IntArray) -> BoolArray:
    """Where a new session begins in intervals sorted by ``(kid, start)``.

    Interval ``i`` continues the current session iff it has the same key and
    ``start[i] <= max(reach[j])`` over the earlier intervals of that session. The
    running max is one ``maximum.accumulate`` over all keys at once: each key's times
    are shifted into a band of its own, above every earlier key's band.
    """
    n = len(kid)
    first = np.ones(n, dtype=np.bool_)
    first[1:] = kid[1:] != kid[:-1]
    seg = np.flatnonzero(first)
    seg_len = np.diff(np.append(seg, n))
    kmin = start[seg]
    span = np.maximum.reduceat(reach - np.repeat(kmin, seg_len), seg) + 1
    if float(span.astype(np.float64).sum()) < 2.0**61:
        base = np.concatenate(([0], np.cumsum(span)[:-1]))
        shift = np.repeat(base - kmin, seg_len)
        prev = np.maximum.accumulate(reach + shift)
        brk = first.copy()
        brk[1:] |= start[1:] + shift[1:] > prev[:-1]
        return brk
    brk = first.copy()  # time spans too wide to band: one key at a time
    top = 0
    for i, (k, s, r) in enumerate(zip(first.tolist(), start.tolist(), reach.tolist(), strict=True)):
        if k or s > top:
            brk[i] = True
            top = r
        else:
            top = max(top, r)
    return brk


def reduce_groups(
    aggs: AggregationSet, rows: FloatArray, gid: IntArray, g_first: IntArray, g_size: IntArray
) -> FloatArray:
    """Combine the rows of each contiguous group: a log-depth tree of vectorized combines."""
    pos = np.arange(len(rows)) - g_first[gid]
    size = g_size[gid]
    step = 1
    top = int(g_size.max())
    while step < top:
        i = np.flatnonzero((pos % (2 * step) == 0) & (pos + step < size))
        rows[i] = aggs.combine(rows[i], rows[i + step])
        step *= 2
    out: FloatArray = rows[g_first]
    return out

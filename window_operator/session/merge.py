"""Merging events into sessions: arrays in, sessions out (no store, no cache).

A batch's accepted events are sorted per (key, time) and cut into the batch's own
sessions (:func:`cut_batch`), pre-aggregated, then swept together with the existing
sessions of the touched keys (:func:`merge`): every group of touching intervals becomes
one session, whose accumulators are *combined* (never recomputed from messages). The
survivor of a group is its earliest existing session, into which the others merge (so
its store record usually keeps its key). :func:`merge_one` is the same for one event,
without the batch pipeline's fixed cost.

Intervals: a session of events ``start .. last`` covers ``[start, last + gap]``; two
intervals touch when they overlap, inclusively. Object accumulators are combined in
place where the operations do so: the inputs' object lists are consumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.events import DecodedEvent, EventBatch

__all__ = [
    "BatchCut",
    "BatchSessions",
    "MergePlan",
    "OneMerge",
    "Sessions",
    "cut_batch",
    "event_objects",
    "event_values",
    "merge",
    "merge_one",
    "plain",
    "reduce_groups",
    "session_breaks",
]


def plain(value: Any) -> Any:
    """NaN (the columnar null) back to None for object operations."""
    if isinstance(value, float) and value != value:
        return None
    return value


@dataclass(frozen=True, slots=True)
class Sessions:
    """Existing sessions: where they live (cache slots), keys, bounds, accumulators."""

    slot: IntArray
    kid: IntArray
    start: IntArray
    last: IntArray
    acc: FloatArray
    #: object accumulators per session (None without object operations)
    objs: list[list[Any]] | None


@dataclass(frozen=True, slots=True)
class BatchCut:
    """A batch's events cut into its own sessions, in (key, start) order."""

    kid: IntArray
    start: IntArray
    last: IntArray
    #: the session of each event (in the order the events came)
    groups: IntArray
    #: number of events per session
    events: IntArray

    def __len__(self) -> int:
        return len(self.kid)


@dataclass(frozen=True, slots=True)
class BatchSessions:
    """The batch's own sessions, pre-aggregated."""

    cut: BatchCut
    #: accumulator row per session (``AggregationSet`` layout)
    partial: FloatArray
    #: object accumulators per session (None without object operations)
    objs: list[list[Any]] | None


@dataclass(frozen=True, slots=True)
class MergePlan:
    """The sessions a batch leaves behind: one per group of touching intervals.

    Per group: its key, bounds, the existing session that survives (a slot; ``-1``: a
    new session), combined accumulators and the number of batch events in it. Existing
    sessions merged into a survivor are ``absorbed`` (slots) into group ``absorbed_into``.
    """

    kid: IntArray
    start: IntArray
    last: IntArray
    survivor: IntArray
    acc: FloatArray | None
    objs: list[list[Any]] | None
    events: IntArray
    absorbed: IntArray
    absorbed_into: IntArray


def cut_batch(kids: IntArray, axis: IntArray, gap: int) -> BatchCut:
    """Sort events per (key, time) and cut where consecutive times differ by more than gap."""
    order = np.lexsort((axis, kids))
    sk, sa = kids[order], axis[order]
    cut = np.ones(len(sk), dtype=np.bool_)
    cut[1:] = (sk[1:] != sk[:-1]) | (sa[1:] - sa[:-1] > gap)
    first = np.flatnonzero(cut)
    last = np.append(sa[first[1:] - 1], sa[-1])
    groups = np.empty(len(sk), dtype=np.int64)
    groups[order] = np.cumsum(cut) - 1
    events = np.bincount(groups, minlength=len(first))
    return BatchCut(sk[first], sa[first], last, groups, events)


def event_values(aggs: AggregationSet, event: DecodedEvent) -> list[Any]:
    """The values one event gives each object operation."""
    values: list[Any] = []
    for agg, _ in aggs.objects:
        if agg.field is None:
            values.append(None)
        elif agg.field in event.objects:
            values.append(event.objects[agg.field])
        else:
            values.append(plain(event.numeric[agg.field]))
    return values


def event_objects(
    aggs: AggregationSet,
    batch: EventBatch,
    idx: IntArray,
    kids: IntArray,
    cut: BatchCut,
    off: IntArray,
) -> tuple[list[list[Any]], list[PendingMessage]]:
    """Object accumulators of the batch's sessions, and the full-state messages to store.

    ``idx`` are the batch rows of the cut's events (in order) and ``kids`` their session
    keys; ``off`` is every row's offset.
    """
    ops = aggs.objects
    out = [aggs.create_objects() for _ in range(len(cut))]
    n = len(batch)
    cols = [
        [None] * n
        if agg.field is None
        else batch.objects[agg.field]
        if agg.field in batch.objects
        else batch.numeric[agg.field].tolist()
        for agg, _ in ops
    ]
    full = aggs.full_state
    ts_l = batch.ts.tolist()
    part_l = batch.partition.tolist()
    off_l = off.tolist()
    grp_l = cut.groups.tolist()
    kid_l = kids.tolist()
    messages: list[PendingMessage] = []
    for j, i in enumerate(idx.tolist()):
        objs = out[grp_l[j]]
        order = Ordering(ts_l[i], part_l[i], off_l[i])
        for o, (_, op) in enumerate(ops):
            objs[o] = op.accumulate(objs[o], plain(cols[o][i]), order)
        if full:
            values = tuple(plain(cols[o][i]) for o in full)
            messages.append(PendingMessage(kid_l[j], ts_l[i], part_l[i], off_l[i], values))
    return out, messages


@dataclass(frozen=True, slots=True)
class _Sweep:
    """Batch and existing sessions grouped into the sessions they merge into.

    Members (in (key, start) order) are existing sessions (``is_ex``; ``src`` indexes
    :class:`Sessions`) and batch sessions (``src`` indexes the cut); ``gid`` is each
    member's group. Per group: its first member, size, key and merged bounds.
    """

    src: IntArray
    is_ex: BoolArray
    gid: IntArray
    g_first: IntArray
    g_size: IntArray
    g_kid: IntArray
    g_start: IntArray
    g_last: IntArray


def _sweep(ex: Sessions, b: BatchCut, gap: int) -> _Sweep:
    """Sweep batch and existing sessions together, per key in start order.

    Groups without a batch session are left out (nothing changes them).
    """
    nb, ne = len(b.kid), len(ex.kid)
    m_kid = np.concatenate([ex.kid, b.kid])
    m_start = np.concatenate([ex.start, b.start])
    m_last = np.concatenate([ex.last, b.last])
    m_src = np.concatenate([np.arange(ne, dtype=np.int64), np.arange(nb, dtype=np.int64)])
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
    g_last = np.maximum.reduceat(m_last, g_first)
    return _Sweep(m_src, m_is_ex, gid, g_first, g_size, m_kid[g_first], m_start[g_first], g_last)


def merge(ex: Sessions, batch: BatchSessions, gap: int, aggs: AggregationSet) -> MergePlan:
    """Merge the batch's sessions with the existing ones (see module doc)."""
    b = batch.cut
    sw = _sweep(ex, b, gap)
    ngroups = len(sw.g_first)
    ex_pos = np.flatnonzero(sw.is_ex)
    u_gid, first_ex = np.unique(sw.gid[ex_pos], return_index=True)
    survivor = np.full(ngroups, -1, dtype=np.int64)
    survivor[u_gid] = ex.slot[sw.src[ex_pos[first_ex]]]
    merged_away = np.ones(len(ex_pos), dtype=np.bool_)
    merged_away[first_ex] = False
    b_pos = np.flatnonzero(~sw.is_ex)
    acc: FloatArray | None = None
    if aggs.width:
        rows = np.empty((len(sw.src), aggs.width), dtype=np.float64)
        rows[ex_pos] = ex.acc[sw.src[ex_pos]]
        rows[b_pos] = batch.partial[sw.src[b_pos]]
        acc = reduce_groups(aggs, rows, sw.gid, sw.g_first, sw.g_size)
    objs = None
    if batch.objs is not None:
        assert ex.objs is not None
        objs = _combine_objects(aggs, sw, ex.objs, batch.objs)
    events = np.zeros(ngroups, dtype=np.int64)
    np.add.at(events, sw.gid[b_pos], b.events[sw.src[b_pos]])
    gone = ex_pos[merged_away]
    return MergePlan(
        sw.g_kid,
        sw.g_start,
        sw.g_last,
        survivor,
        acc,
        objs,
        events,
        ex.slot[sw.src[gone]],
        sw.gid[gone],
    )


def _combine_objects(
    aggs: AggregationSet, sw: _Sweep, ex_objs: list[list[Any]], b_objs: list[list[Any]]
) -> list[list[Any]]:
    """The object accumulators of each group: its members' combined in member order."""
    out: list[list[Any]] = []
    src_l = sw.src.tolist()
    is_ex_l = sw.is_ex.tolist()
    for f, size in zip(sw.g_first.tolist(), sw.g_size.tolist(), strict=True):
        acc: list[Any] | None = None
        for m in range(f, f + size):
            part = ex_objs[src_l[m]] if is_ex_l[m] else b_objs[src_l[m]]
            acc = part if acc is None else aggs.combine_objects(acc, part)
        assert acc is not None
        out.append(acc)
    return out


@dataclass(frozen=True, slots=True)
class OneMerge:
    """Where one event lands: the existing sessions it joins, merged bounds, accumulators.

    ``joined`` indexes the given :class:`Sessions`, in start order: the first survives
    and the others merge into it; empty for a new session. ``objs`` are the merged
    object accumulators before the event's own values are added.
    """

    joined: IntArray
    start: int
    last: int
    acc: FloatArray
    objs: list[Any] | None


def merge_one(
    ex: Sessions, t: int, row: FloatArray, gap: int, cutoff: int, aggs: AggregationSet
) -> OneMerge:
    """:func:`merge` of one event at ``t`` (accumulator ``row``) with its key's sessions.

    Sessions whose interval ends at or before ``cutoff`` (past retention) take no part.
    """
    reach = ex.last + gap
    touch = np.flatnonzero((ex.start <= t + gap) & (reach >= t) & (reach > cutoff))
    touch = touch[np.argsort(ex.start[touch], kind="stable")]
    if not len(touch):
        return OneMerge(touch, t, t, row, aggs.create_objects() if aggs.objects else None)
    first = int(touch[0])
    acc = ex.acc[first]
    if aggs.width:
        acc = aggs.combine(ex.acc[first : first + 1], row[None, :])[0]
        for o in touch[1:].tolist():
            acc = aggs.combine(acc[None, :], ex.acc[o : o + 1])[0]
    objs = None
    if ex.objs is not None:
        objs = ex.objs[first]
        for o in touch[1:].tolist():
            objs = aggs.combine_objects(objs, ex.objs[o])
    start = min(t, int(ex.start[first]))
    last = max(t, int(ex.last[touch].max()))
    return OneMerge(touch, start, last, acc, objs)


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
    """Combine the rows of each contiguous group: a log-depth tree of vectorized combines.

    ``rows`` is overwritten.
    """
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

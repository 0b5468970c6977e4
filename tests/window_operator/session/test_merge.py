"""Merging events into sessions: Jet timelines through the operator, then the pure merge.

The pure part (:mod:`window_operator.session.merge`) takes arrays and gives sessions: no
store, no cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sessionkit import OpenAgg, S, Window, apply, ev, session_runtime, windows

from window_operator.aggregations.base import Ordering
from window_operator.arrays import IntArray
from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import Kind
from window_operator.session.merge import (
    BatchSessions,
    MergePlan,
    Sessions,
    cut_batch,
    merge,
    merge_one,
    reduce_groups,
    session_breaks,
)

# --------------------------------------------------------------------------- Jet timelines

# Jet: an event's interval is [ts, ts + gap]; a session is the union of overlapping
# intervals. With gap 10 s:
#
#   time (s)      0    5    10   15   20   25   30   35   40
#   a@1            [=========]                                   one event
#   a@7                  [=========]                             extends: [1, 17]
#   a@25                                 [=========]             new session [25, 35]
#   a@16                          [=========]                    bridges: merge
#
# a@16 overlaps [1, 17] (16 <= 17) and [25, 35] (16 + 10 >= 25): one session [1, 35]
# of four events.
JET = [ev("a", 1), ev("a", 7), ev("a", 25), ev("a", 16)]


def test_single_event_session_covers_its_interval(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_message(ev("a", 1))
    (w,) = agg.get_windows("a", 0, 100 * S)
    assert (w.window_start, w.window_end, w.values["n"], w.fired) == (1 * S, 11 * S, 1, False)


@pytest.mark.parametrize("one_by_one", [True, False])
def test_jet_extend_new_and_merge(open_agg: OpenAgg, one_by_one: bool) -> None:
    agg = open_agg(session_runtime(watermark={"allowed_lateness": "1m"}))
    steps: list[list[tuple[int, int, int]]] = []
    for chunk in [[e] for e in JET] if one_by_one else [JET]:
        if one_by_one:
            agg.add_message(chunk[0])
        else:
            agg.add_batch(chunk)
        steps.append(
            [
                (w.window_start // S, w.window_end // S, w.values["n"])
                for w in agg.get_windows("a", 0, 10**6)
            ]
        )
    if one_by_one:
        assert steps == [
            [(1, 11, 1)],  # a single event
            [(1, 17, 2)],  # extended
            [(1, 17, 2), (25, 35, 1)],  # a new session after the gap
            [(1, 35, 4)],  # merged by the bridging event
        ]
    assert steps[-1] == [(1, 35, 4)]
    (w,) = agg.get_windows("a", 0, 10**6)
    assert w.values["sum"] == 49.0 and w.values["vals"] == [1, 7, 16, 25]
    assert w.values["median"] == 11.5 and (w.values["min"], w.values["max"]) == (1.0, 25.0)
    agg.timeout(END_OF_TIME)
    (r,) = agg.get_result()
    assert (r.kind, r.window_start, r.window_end, r.update_seq) == (Kind.ON_TIME, 1 * S, 35 * S, 0)


def test_gap_is_inclusive(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(watermark={"allowed_lateness": "1m"}))
    # 0 and 10 differ by exactly the gap: one session; 20.001 is 10.001 s after 10: a new one
    agg.add_batch([ev("a", 0), ev("a", 10), ev("a", 20.001)])
    assert [(w.window_start, w.window_end) for w in agg.get_windows("a", -(10**6), 10**6)] == [
        (0, 20 * S),
        (20_001, 30_001),
    ]


def test_out_of_order_input_gives_the_sessions_of_sorted_input(open_agg: OpenAgg) -> None:
    times = [50, 3, 41, 12, 95, 30, 22, 60, 71, 84, 0]
    agg = open_agg(session_runtime(watermark={"allowed_lateness": "10m"}))
    for t in times:
        agg.add_message(ev("a", t))
    agg.timeout(END_OF_TIME)
    view: dict[Window, dict[str, Any]] = {}
    apply(view, agg.get_result())
    # sorted: 0 3 12 22 30 41 50 60 71 84 95 -> gaps 3 9 10 8 11 9 10 11 13 11
    assert windows(view) == {
        ("a", 0, 40 * S): 5,
        ("a", 41 * S, 70 * S): 3,
        ("a", 71 * S, 81 * S): 1,
        ("a", 84 * S, 94 * S): 1,
        ("a", 95 * S, 105 * S): 1,
    }


def test_sessions_of_times_too_far_apart_to_vectorize(open_agg: OpenAgg) -> None:
    # one key spanning 2^61 ms: the sweep falls back from one banded running max to a
    # per-key loop, with the same answer
    far = 2**60
    agg = open_agg(session_runtime())
    agg.add_batch(
        EventBatch.from_columns(
            ["a", "b", "a", "b", "a", "a"],
            [-far, 0, far, 3 * S, -far + 5 * S, far - 12 * S],
            numeric={"v": [1, 2, 3, 4, 5, 6]},
        )
    )
    spans = {
        k: [
            (w.window_start, w.window_end, w.values["n"])
            for w in agg.get_windows(k, -(2**62), 2**62)
        ]
        for k in "ab"
    }
    assert spans == {
        "a": [(-far, -far + 15 * S, 2), (far - 12 * S, far - 2 * S, 1), (far, far + 10 * S, 1)],
        "b": [(0, 13 * S, 2)],
    }


# --------------------------------------------------------------------------- the pure merge

UNIT = session_runtime(
    aggregations=[
        {"name": "n", "op": "count"},
        {"name": "sum", "op": "sum", "field": "v"},
        {"name": "vals", "op": "collect", "field": "v"},
    ]
).aggregations
A, B = 0, 1  # key ids


def arr(*xs: int) -> IntArray:
    return np.array(xs, dtype=np.int64)


def batch_of(events: list[tuple[int, int]], gap: int) -> BatchSessions:
    """The batch sessions of ``(key id, t)`` events (value = t), as the operator builds them."""
    kids = arr(*[k for k, _ in events])
    ts = arr(*[t for _, t in events])
    cut = cut_batch(kids, ts, gap)
    partial = UNIT.accumulate({"v": ts.astype(np.float64)}, ts, cut.groups, len(cut))
    objs = [UNIT.create_objects() for _ in range(len(cut))]
    for j, (g, t) in enumerate(zip(cut.groups.tolist(), ts.tolist(), strict=True)):
        objs[g][0] = UNIT.objects[0][1].accumulate(objs[g][0], t, Ordering(t, 0, j))
    return BatchSessions(cut, partial, objs)


def existing(sessions: list[tuple[int, int, list[int]]]) -> Sessions:
    """Existing sessions ``(slot, key id, event times)`` (values = event times)."""
    parts = [batch_of([(k, t) for t in evs], gap=10**9) for _, k, evs in sessions]
    return Sessions(
        arr(*[slot for slot, _, _ in sessions]),
        np.concatenate([p.cut.kid for p in parts]),
        np.concatenate([p.cut.start for p in parts]),
        np.concatenate([p.cut.last for p in parts]),
        np.vstack([p.partial for p in parts]),
        [p.objs[0] for p in parts if p.objs is not None],
    )


def values(plan: MergePlan) -> list[tuple[int, int, float, list[int]]]:
    assert plan.acc is not None and plan.objs is not None
    out = UNIT.finish(plan.acc, plan.objs)
    return list(zip(out["n"], out["sum"], out["vals"], strict=True))


# gap 8; events in arrival order a@1 a@7 a@25 a@16 b@3:
#
#   a:  1 ----- 7 ---------- 16 ---------- 25      7 - 1 <= 8; 16 - 7 > 8; 25 - 16 > 8
#   b:    3
#
# -> a[1, 7] (2 events), a[16, 16], a[25, 25], b[3, 3], in (key, start) order; each
# event's session in arrival order: 0, 0, 2, 1, 3
def test_cut_batch_sorts_per_key_and_cuts_where_the_gap_is_exceeded() -> None:
    cut = cut_batch(arr(A, A, A, A, B), arr(1, 7, 25, 16, 3), gap=8)
    assert (cut.kid.tolist(), cut.start.tolist(), cut.last.tolist()) == (
        [A, A, A, B],
        [1, 16, 25, 3],
        [7, 16, 25, 3],
    )
    assert cut.groups.tolist() == [0, 0, 2, 1, 3]
    assert cut.events.tolist() == [2, 1, 1, 1]


# gap 10; existing sessions in slots 5, 9, 6 and 4, a batch of four events:
#
#   time     0    5    10   15   20   25   30   35   40   ..  50   ..  90   95   100
#   slot 5  a[0 ..5]=======)                                                  [0, 15]
#   slot 9  a                    [20..22]=======)                             [20, 32]
#   slot 6  b                                             [50]====)           untouched
#   slot 4  b                                                      [90]=======[100]
#   batch   a          [13..14]                [40]
#   batch   b                                                                 [100]
#
# a@13..14 bridges slots 5 and 9 (13 <= 5 + 10, 14 + 10 >= 20): one session [0, 22] in
# the earliest existing slot (5), slot 9 absorbed; a@40 starts a session (40 > 22 + 10);
# b@100 extends slot 4 (100 <= 90 + 10); slot 6 is not in the plan.
def test_merge_bridges_extends_and_starts_sessions() -> None:
    ex = existing([(5, A, [0, 5]), (9, A, [20, 22]), (6, B, [50]), (4, B, [90])])
    plan = merge(ex, batch_of([(A, 13), (A, 14), (A, 40), (B, 100)], gap=10), 10, UNIT)
    assert plan.kid.tolist() == [A, A, B]
    assert (plan.start.tolist(), plan.last.tolist()) == ([0, 40, 90], [22, 40, 100])
    assert plan.survivor.tolist() == [5, -1, 4]
    assert (plan.absorbed.tolist(), plan.absorbed_into.tolist()) == ([9], [0])
    assert plan.events.tolist() == [2, 1, 1]
    assert values(plan) == [
        (6, 74.0, [0, 5, 13, 14, 20, 22]),
        (1, 40.0, [40]),
        (2, 190.0, [90, 100]),
    ]


# A batch session before the earliest existing one still merges into the existing
# slot (its store record is found there), and groups the batch does not reach are left
# out of the plan:
#
#   slot 2  a          [10..12]                 [40] slot 3: untouched
#   batch   a   [3]                              3 + 10 >= 10: merges -> [3, 12]
def test_merge_keeps_the_existing_slot_and_leaves_untouched_sessions_out() -> None:
    ex = existing([(2, A, [10, 12]), (3, A, [40])])
    plan = merge(ex, batch_of([(A, 3)], gap=10), 10, UNIT)
    assert (plan.survivor.tolist(), plan.start.tolist(), plan.last.tolist()) == ([2], [3], [12])
    assert len(plan.absorbed) == 0
    assert values(plan) == [(3, 25.0, [3, 10, 12])]


# gap 10, one key, existing [1, 7] (slot 3) and [25, 25] (slot 8):
#
#   t = 16: touches both (16 <= 17, 16 + 10 >= 25) -> [1, 25], slot 3 survives
#   t = 50: touches nothing -> a new session [50, 50]
#   cutoff 17 (retention): [1, 7] closes at 17 <= 17, past retention: t = 10 joins
#   nothing although its interval overlaps (a new session [10, 10])
def test_merge_one_event() -> None:
    ex = existing([(3, A, [1, 7]), (8, A, [25])])
    row = UNIT.identity.copy()
    UNIT.accumulate_one(row, {"v": 16.0}, 16)
    m = merge_one(ex, 16, row, 10, NO_WATERMARK, UNIT)
    assert (m.joined.tolist(), m.start, m.last) == ([0, 1], 1, 25)
    assert UNIT.finish(m.acc[None, :], [m.objs or []])["sum"] == [49.0]
    new = merge_one(ex, 50, row, 10, NO_WATERMARK, UNIT)
    assert (new.joined.tolist(), new.start, new.last) == ([], 50, 50)
    assert new.acc is row and new.objs == UNIT.create_objects()
    past = merge_one(ex, 10, row, 10, 17, UNIT)
    assert (past.joined.tolist(), past.start, past.last) == ([], 10, 10)


def test_reduce_groups_combines_each_group_like_a_fold() -> None:
    rng = np.random.default_rng(7)
    sizes = [1, 5, 2, 8, 3]
    rows = UNIT.accumulate(
        {"v": rng.normal(size=sum(sizes))},
        np.arange(sum(sizes), dtype=np.int64),
        np.arange(sum(sizes), dtype=np.int64),
        sum(sizes),
    )
    g_first = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    gid = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)
    out = reduce_groups(UNIT, rows.copy(), gid, g_first, arr(*sizes))
    for g, (f, n) in enumerate(zip(g_first.tolist(), sizes, strict=True)):
        fold = rows[f : f + 1]
        for i in range(f + 1, f + n):
            fold = UNIT.combine(fold, rows[i : i + 1])
        assert np.allclose(out[g], fold[0])


@pytest.mark.parametrize("scale", [1, 2**58])
def test_session_breaks_match_a_per_key_loop(scale: int) -> None:
    # scale 2**58: time spans too wide for the banded running max (the fallback loop)
    rng = np.random.default_rng(scale % 1000)
    kid = np.sort(rng.integers(0, 4, 60)).astype(np.int64)
    start = rng.integers(0, 40, 60).astype(np.int64) * scale
    order = np.lexsort((start, kid))
    kid, start = kid[order], start[order]
    reach = start + rng.integers(0, 5, 60).astype(np.int64) * scale
    expected = []
    top = 0
    for i, (k, s, r) in enumerate(zip(kid.tolist(), start.tolist(), reach.tolist(), strict=True)):
        new = i == 0 or k != kid[i - 1] or s > top
        expected.append(new)
        top = r if new else max(top, r)
    assert session_breaks(kid, start, reach).tolist() == expected

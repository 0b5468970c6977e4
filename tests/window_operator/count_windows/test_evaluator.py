"""Count-window values: full windows by deduct or recombination, and open windows."""

from __future__ import annotations

import numpy as np
import pytest
from countkit import DEDUCTIBLE, open_op, runtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from window_operator.aggset import AggregationSet
from window_operator.count_windows.evaluator import CountEvaluator
from window_operator.count_windows.firing import CountTrigger
from window_operator.count_windows.numbering import number
from window_operator.count_windows.ring import Ring
from window_operator.events import EventBatch


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def aggregations(size: int, step: int) -> AggregationSet:
    return runtime({"type": "count", "size": size, "step": step}, DEDUCTIBLE).aggregations


# size 6, step 2 (3 frames a window); one batch, keys interleaved, values = arrival index:
#
#   a  messages 0..9  -> [0,6) [2,8) [4,10) fire (three windows: deduct takes 2 steps)
#   b  messages 0..5  -> [0,6) fires
@pytest.mark.parametrize("use_deduct", [True, False, None])
def test_full_windows_by_deduct_or_recombination_agree(use_deduct: bool | None) -> None:
    aggs = aggregations(6, 2)
    ring = Ring(aggs, 3, 2)
    ring.ensure(2)
    kids = ints(*([0] * 4 + [1, 0] * 6))
    values = np.arange(len(kids), dtype=np.float64)
    num = number(kids, ring.count, 2, 2)
    n_groups = len(num.g_kid)
    merged = aggs.accumulate({"v": values}, np.zeros(len(kids), np.int64), num.groups, n_groups)
    full = CountTrigger(6, 2).full_windows(num)
    assert full is not None
    got = aggs.finish(CountEvaluator(ring, aggs, use_deduct).full(num, full, merged, []).acc, None)
    a = values[kids == 0].tolist()
    b = values[kids == 1].tolist()
    want = [sum(a[0:6]), sum(a[2:8]), sum(a[4:10]), sum(b[0:6])]
    assert full.kids.tolist() == [0, 0, 0, 1]
    assert got["sum"] == want
    assert got["count"] == [6, 6, 6, 6]


# size 4, step 2; key 0 holds 5 messages with values 1..5:
#
#   frame 1 (slot 1): messages 2, 3 (values 3, 4); frame 2 (slot 0): message 4 (value 5)
#   open windows [2,6) = frames 1, 2 and [4,8) = frame 2
def test_open_windows_combine_their_frames_up_to_the_last_message() -> None:
    aggs = aggregations(4, 2)
    ring = Ring(aggs, 2, 2)
    ring.ensure(1)
    rows = aggs.accumulate({"v": np.array([3.0, 4.0, 5.0])}, ints(0, 0, 0), ints(0, 0, 1), 2)
    ring.store_frames(ints(0, 0), ints(1, 0), rows, np.array([True, True]), None)
    ring.set_counts(ints(0), ints(5))
    trigger, ev = CountTrigger(4, 2), CountEvaluator(ring, aggs, None)
    wins = trigger.open_windows(ints(0), ring.count[:1])
    values = aggs.finish(ev.open_values(wins).acc, None)
    assert (wins.starts.tolist(), values["sum"], values["count"]) == ([1, 2], [12.0, 5.0], [3, 1])
    flag = np.zeros_like(ring.early)
    flag[0, 1] = True  # frame 1 changed: only [2,6) holds it
    assert ev.marked(wins, flag).tolist() == [True, False]
    flag[0, 0] = True
    assert ev.marked(wins, flag).tolist() == [True, True]


# size 3, step 1; key 0 holds 35185, then 65535 and up: deducting 35185 from the first
# window leaves two close values whose variance is ~1e-9 of the total's, so the second
# window is recombined from its frames (deduct alone is off by ~1e-7 relative).
def test_a_deduct_that_cancels_is_replaced_by_recombination() -> None:
    aggs = runtime(
        {"type": "count", "size": 3, "step": 1},
        [{"name": "var", "op": "variance", "field": "v"}],
    ).aggregations
    ring = Ring(aggs, 3, 1)
    ring.ensure(1)
    kids = ints(0, 0, 0, 0)
    values = np.array([35_185.0, 65_535.0, 65_536.0, 65_538.0])
    num = number(kids, ring.count, 1, 1)
    merged = aggs.accumulate({"v": values}, np.zeros(4, np.int64), num.groups, len(num.g_kid))
    full = CountTrigger(3, 1).full_windows(num)
    assert full is not None
    got = [
        aggs.finish(CountEvaluator(ring, aggs, deduct).full(num, full, merged, []).acc, None)
        for deduct in (True, False)
    ]
    assert got[0] == got[1]
    assert got[0]["var"][1] == np.var(values[1:], ddof=1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(1, 1), (4, 1), (6, 2), (6, 3), (9, 3), (12, 1), (5, 5)]),
    keys=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    data=st.data(),
)
def test_open_windows_and_their_marks_equal_a_window_by_window_combine(
    tmp_path_factory: pytest.TempPathFactory,
    shape: tuple[int, int],
    keys: list[int],
    data: st.DataObject,
) -> None:
    """Every open window (any subset, in any order) is the combine of its own messages,
    and is marked when one of its frames is: the suffix scan against a naive slice of
    each key's messages."""
    size, step = shape
    rt = runtime({"type": "count", "size": size, "step": step})
    op = open_op(rt, tmp_path_factory.mktemp("open"))
    names = [f"k{k}" for k in keys]
    values = [float(i % 7) for i in range(len(keys))]
    op.add_batch(EventBatch.from_columns(names, np.arange(len(keys)), numeric={"v": values}))
    eng = op.engine
    kids = np.arange(len(eng.keys), dtype=np.int64)
    every = eng.trigger.open_windows(kids, eng.ring.count[kids])
    order = data.draw(st.permutations(range(len(every))))
    chosen = np.array(order[: data.draw(st.integers(0, len(order)))], dtype=np.int64)
    wins = every.select(chosen)
    got_values = eng.evaluator.open_values(wins)
    got = rt.aggregations.finish(got_values.acc, got_values.objs)
    by_key: dict[str, list[float]] = {}
    for name, v in zip(names, values, strict=True):
        by_key.setdefault(name, []).append(v)
    k = size // step
    for j, (kid, start) in enumerate(zip(wins.kids.tolist(), wins.starts.tolist(), strict=True)):
        msgs = by_key[eng.keys.names[kid]][start * step : start * step + size]
        assert got["count"][j] == len(msgs)
        assert got["sum"][j] == sum(msgs)
        assert got["collect"][j] == msgs
        assert (got["first"][j], got["last"][j], got["max"][j]) == (msgs[0], msgs[-1], max(msgs))
    flag = np.array(
        data.draw(
            st.lists(st.booleans(), min_size=eng.ring.early.size, max_size=eng.ring.early.size)
        ),
        dtype=np.bool_,
    ).reshape(eng.ring.early.shape)
    for some in (every, wins):  # every open window in order, and the drawn ones
        # a window's frames: from its start, k of them, those that hold messages
        want = [
            any(flag[kid, f % k] for f in range(start, min(start + k, last + 1)))
            for kid, start, last in zip(
                some.kids.tolist(), some.starts.tolist(), some.last.tolist(), strict=True
            )
        ]
        assert eng.evaluator.marked(some, flag).tolist() == want
    # each window's object accumulators are its own, never the ring's (a user's finish
    # may keep or change them)
    ring_objects = {id(o) for o in eng.ring.objs}
    assert got_values.objs is not None
    assert not [o for o in got_values.objs if id(o) in ring_objects]
    op.close()

"""Count windows (``type: count``) through the operator: small timelines of a key's messages.

Timelines name a key's messages by their per-key index (``a0 a1 ...``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from countkit import DEDUCTIBLE, open_op, runtime, summary

from stores.rocks import ColumnFamily
from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME


# Tumbling count windows of 3; two keys interleaved:
#
#   arrival   a0  b0  a1  a2  b1  a3  b2  a4 | end
#   a         [0,3)-------full                 [3,6) holds a3 a4: partial at the end
#   b             [0,3)-----------------full
@pytest.mark.parametrize("one_by_one", [True, False])
def test_tumbling_count_window_fires_on_its_size_th_message(op: Any, one_by_one: bool) -> None:
    agg = op(runtime({"type": "count", "size": 3}))
    arrivals = [("a", 1), ("b", 10), ("a", 2), ("a", 3), ("b", 20), ("a", 4), ("b", 30), ("a", 5)]
    fired_after: list[list[tuple[Any, ...]]] = []
    if one_by_one:
        for k, v in arrivals:
            agg.add_message({"k": k, "ts": 0, "v": v})
            fired_after.append(summary(agg.get_result(), "count", "collect"))
        assert fired_after[3] == [("ON_TIME", "a", 0, 3, 0, 3, [1, 2, 3])]
        assert fired_after[6] == [("ON_TIME", "b", 0, 3, 0, 3, [10, 20, 30])]
        assert sum(map(len, fired_after)) == 2
    else:
        agg.add_batch([{"k": k, "ts": 0, "v": v} for k, v in arrivals])
        assert summary(agg.get_result(), "count", "collect") == [
            ("ON_TIME", "a", 0, 3, 0, 3, [1, 2, 3]),
            ("ON_TIME", "b", 0, 3, 0, 3, [10, 20, 30]),
        ]
    agg.timeout(END_OF_TIME)
    # every message is in the output: the partial tail is emitted at the end of input
    assert summary(agg.get_result(), "count", "collect") == [("ON_TIME", "a", 3, 6, 0, 2, [4, 5])]


# Hopping: size 4, step 2 (frames of 2 messages); one key:
#
#   message    0  1 | 2  3 | 4  5 | 6
#   [0,4)      ==========          full at message 3
#   [2,6)             ==========   full at message 5
#   [4,8)                    ====== partial (4, 5, 6) at the end
#   [6,10)                        = partial (6) at the end
@pytest.mark.parametrize("use_deduct", [True, False, None])
@pytest.mark.parametrize("one_by_one", [True, False])
def test_hopping_count_windows(op: Any, use_deduct: bool | None, one_by_one: bool) -> None:
    agg = op(runtime({"type": "count", "size": 4, "step": 2}, DEDUCTIBLE), use_deduct=use_deduct)
    events = [{"k": "a", "ts": 0, "v": v} for v in (1, 2, 3, 4, 5, 6, 7)]
    if one_by_one:
        for e in events:
            agg.add_message(e)
    else:
        agg.add_batch(events)
    assert summary(agg.get_result(), "count", "sum") == [
        ("ON_TIME", "a", 0, 4, 0, 4, 10.0),
        ("ON_TIME", "a", 2, 6, 0, 4, 18.0),
    ]
    agg.timeout(END_OF_TIME)
    assert summary(agg.get_result(), "count", "sum") == [
        ("ON_TIME", "a", 4, 8, 0, 3, 18.0),
        ("ON_TIME", "a", 6, 10, 0, 1, 7.0),
    ]


def test_end_of_input_emits_a_partial_window_again_only_when_it_changed(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 3}, DEDUCTIBLE)
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    agg.timeout(END_OF_TIME)
    assert summary(agg.get_result(), "count") == [("ON_TIME", "a", 0, 3, 0, 1)]
    assert agg.watermark == END_OF_TIME
    assert [w.fired for w in agg.get_windows("a", 0, 3)] == [True]
    agg.timeout(END_OF_TIME)
    assert agg.get_result() == []
    agg.close()
    agg = open_op(rt, tmp_path)  # the end-of-input marks survive a restart
    agg.timeout(END_OF_TIME)
    assert agg.get_result() == []
    agg.add_batch([{"k": "b", "ts": 0, "v": 1}, {"k": "a", "ts": 0, "v": 1}])
    assert [w.fired for w in agg.get_windows("a", 0, 3)] == [False]  # changed since
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    assert summary(agg.get_result(), "count") == [("ON_TIME", "a", 0, 3, 1, 3)]
    agg.close()


def test_early_results_for_open_windows_then_on_time(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 3}, DEDUCTIBLE, emit={"early": "2s"}))
    agg.add_message({"k": "a", "ts": 0, "v": 1}, wall_ms=100_000)
    agg.timeout(100_000)  # starts the early clock
    agg.timeout(102_000)
    assert summary(agg.get_result(), "count") == [("EARLY", "a", 0, 3, 0, 1)]
    agg.timeout(104_000)  # nothing changed: nothing to say
    assert agg.get_result() == []
    agg.add_message({"k": "a", "ts": 0, "v": 1})
    agg.add_message({"k": "b", "ts": 0, "v": 1})
    agg.timeout(106_000)
    assert summary(agg.get_result(), "count") == [
        ("EARLY", "a", 0, 3, 1, 2),
        ("EARLY", "b", 0, 3, 0, 1),
    ]
    agg.add_message({"k": "a", "ts": 0, "v": 1})
    assert summary(agg.get_result(), "count") == [("ON_TIME", "a", 0, 3, 2, 3)]


def test_replays_are_no_ops(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 2}, DEDUCTIBLE))
    first = agg.add_batch(
        EventBatch.from_columns(["a"] * 3, [0] * 3, numeric={"v": [1, 2, 3]}, offset=[0, 1, 2])
    )
    assert (first.applied, first.replayed) == (3, 0)
    again = agg.add_batch(
        EventBatch.from_columns(
            ["a"] * 4, [0] * 4, numeric={"v": [9, 9, 9, 4]}, offset=[1, 2, 2, 3]
        )
    )
    assert (again.applied, again.replayed) == (1, 3)
    assert agg.add_message({"k": "a", "ts": 0, "v": 9}, offset=3).replayed == 1
    agg.timeout(END_OF_TIME)
    assert summary(agg.get_result(), "count", "sum") == [
        ("ON_TIME", "a", 0, 2, 0, 2, 3.0),
        ("ON_TIME", "a", 2, 4, 0, 2, 7.0),
    ]


# A key's numbering runs across the operator's partitions in arrival order:
#
#   arrival      p0:a  p1:a  p1:b  p0:a
#   a's index    0     1           2     -> [0,2) = {p0:a, p1:a}
def test_a_keys_messages_are_numbered_across_partitions(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 2}, [{"name": "c", "op": "collect", "field": "v"}]))
    agg.add_message({"k": "a", "ts": 0, "v": "p0-0"}, partition=0, offset=0)
    agg.add_message({"k": "a", "ts": 0, "v": "p1-0"}, partition=1, offset=0)
    agg.add_message({"k": "b", "ts": 0, "v": "p1-1"}, partition=1, offset=1)
    agg.add_message({"k": "a", "ts": 0, "v": "p0-1"}, partition=0, offset=1)
    assert summary(agg.get_result(), "c") == [("ON_TIME", "a", 0, 2, 0, ["p0-0", "p1-0"])]
    assert agg.offsets == {(0, 0): 1, (0, 1): 1}


def test_state_keeps_only_the_frames_of_open_windows(op: Any) -> None:
    # size 10, step 5: a key needs at most 2 frames (and 10 messages for the median)
    agg = op(runtime({"type": "count", "size": 10, "step": 5}))
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = 97
        keys = [f"k{i}" for i in rng.integers(0, 5, n).tolist()]
        agg.add_batch(
            EventBatch.from_columns(
                keys, [0] * n, numeric={"v": rng.random(n)}, objects={"v": [1] * n}
            )
        )
        agg.flush()
    frames = list(agg.store.scan(ColumnFamily.WINDOW_META, b""))
    messages = list(agg.store.scan(ColumnFamily.MESSAGES, b""))
    assert len(frames) <= 5 * 2 and len(messages) <= 5 * 10
    assert len(agg.get_result()) > 300


def test_get_windows_shows_the_open_windows(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 4, "step": 2}, DEDUCTIBLE))
    agg.add_batch([{"k": "a", "ts": 0, "v": v} for v in (1, 2, 3, 4, 5)])
    # a's messages 0..4: [0,4) fired; [2,6) holds 3 messages and [4,8) one
    got = [
        (w.window_start, w.window_end, w.values["count"], w.fired)
        for w in agg.get_windows("a", 0, 100)
    ]
    assert got == [(2, 6, 3, False), (4, 8, 1, False)]
    assert [w.window_start for w in agg.get_windows("a", 0, 3)] == [2]
    assert agg.get_windows("nobody", 0, 100) == []


def test_full_state_values_survive_a_restart_exactly(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 3}, [{"name": "m", "op": "median", "field": "v"}])
    agg = open_op(rt, tmp_path)
    # built directly: from_columns refuses an infinite value, which no decoder yields,
    # but the Message Store keeps whatever float it is given
    two = np.zeros(2, dtype=np.int64)
    infs = {"v": np.full(2, math.inf)}
    agg.add_batch(EventBatch(["a", "a"], two, two.copy(), np.full(2, -1, np.int64), infs))
    agg.close()
    agg = open_op(rt, tmp_path)  # the median's values come back from the Message Store
    agg.add_message({"k": "a", "ts": 0, "v": 1.0})
    (r,) = agg.get_result()
    assert r.values["m"] == math.inf  # (JSON would have turned inf into null)
    agg.close()

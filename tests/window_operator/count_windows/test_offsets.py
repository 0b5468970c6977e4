"""Offsets windows (``type: offsets``): timelines named by offset, one partition per operator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from countkit import DEDUCTIBLE, runtime, summary

from window_operator.count_windows import OffsetsPartitionError
from window_operator.count_windows.offsets import EVENT_TIME, event_time_as_x, from_offset_zero
from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME
from window_operator.results import Kind, ResultBatch


# Offsets windows, size 4, step 2, over partition 0 (offsets have gaps):
#
#   offset   0  1  .  3  4  .  .  7  .  9 | end
#   key      a  b     a  a        b     a
#   [0,4)    a{0,3} b{1}    fires when offset 4 arrives (4 >= 0 + 4)
#   [2,6)    a{3,4}         fires at offset 7
#   [4,8)    a{4} b{7}      fires at offset 9 (an offset >= 8)
#   [6,10)   b{7} a{9}      at the end
#   [8,12)   a{9}           at the end
def test_offsets_windows_fire_when_the_partition_passes_their_end(op: Any) -> None:
    agg = op(
        runtime(
            {"type": "offsets", "size": 4, "step": 2},
            [{"name": "c", "op": "collect", "field": "v"}],
        )
    )
    fired: dict[int, list[tuple[Any, ...]]] = {}
    for off, key in [(0, "a"), (1, "b"), (3, "a"), (4, "a"), (7, "b"), (9, "a")]:
        agg.add_message({"k": key, "ts": 1000 - off, "v": off}, offset=off)
        fired[off] = sorted(summary(agg.get_result(), "c"))
    assert fired == {
        0: [],
        1: [],
        3: [],
        4: [("ON_TIME", "a", 0, 4, 0, [0, 3]), ("ON_TIME", "b", 0, 4, 0, [1])],
        7: [("ON_TIME", "a", 2, 6, 0, [3, 4])],
        9: [("ON_TIME", "a", 4, 8, 0, [4]), ("ON_TIME", "b", 4, 8, 0, [7])],
    }
    assert agg.watermark == 9
    agg.timeout(END_OF_TIME)
    assert sorted(summary(agg.get_result(), "c")) == [
        ("ON_TIME", "a", 6, 10, 0, [9]),
        ("ON_TIME", "a", 8, 12, 0, [9]),
        ("ON_TIME", "b", 6, 10, 0, [7]),
    ]


@pytest.mark.parametrize("window", [{"type": "offsets", "size": 4}, {"type": "count", "size": 4}])
def test_the_job_clock_of_count_and_offsets_windows_is_their_wall_clock_alone(
    op: Any, window: dict[str, Any]
) -> None:
    """Offsets windows keep their partition's offsets on the kernel's event-time axis,
    and count windows no event time: the job clock they give (what long-running
    workers start from) holds neither; it held the offsets, which a job switched from
    micro-batches then reported as its watermark, in 1970 (a walkthrough)."""
    agg = op(runtime(window, [{"name": "n", "op": "count"}]))
    wall = 1_700_000_005_000  # within watermark.max_future of the events: they are taken
    for off in range(6):
        agg.add_message({"k": "a", "ts": 1_700_000_000_000 + off}, offset=off, wall_ms=wall)
    clock = agg.clock_state()
    assert (clock.max_ts, clock.now) == ({}, wall)
    assert clock.watermark < 0  # none


def test_offsets_windows_name_their_partition(op: Any) -> None:
    """Two partitions give one key windows of the same bounds: the partition tells them
    apart (in the result, and in its Kafka key)."""
    agg = op(runtime({"type": "offsets", "size": 2}, [{"name": "n", "op": "count"}]))
    for off in range(5):
        agg.add_message({"k": "a", "ts": 0}, partition=3, offset=off)
    stored = [(w.window_start, w.fired, w.partition) for w in agg.get_windows("a", 0, 10)]
    assert stored == [(0, True, 3), (2, True, 3), (4, False, 3)]
    agg.timeout(END_OF_TIME)
    got = [(r.window_start, r.values["n"], r.partition) for r in agg.get_result()]
    assert sorted(got) == [(0, 2, 3), (2, 2, 3), (4, 1, 3)]


# size 4, step 4, partition 0:   offsets 0 1 2 3 are events of a; 4 is rejected (or handled
# outside): the partition delivered offset 4, so [0, 4) fires; 5..7 rejected, 8 fires [4, 8)
def test_a_rejected_record_past_a_window_fires_it(op: Any) -> None:
    agg = op(runtime({"type": "offsets", "size": 4, "step": 4}, [{"name": "n", "op": "count"}]))
    for off in range(4):
        agg.add_message({"k": "a", "ts": 0}, offset=off)
    assert agg.get_result() == []
    agg.add_message({"k": "a"}, offset=4)  # no timestamp: MISSING_TIMESTAMP
    assert [e.code.value for e in agg.get_errors()] == ["MISSING_TIMESTAMP"]
    assert [(r.window_start, r.values["n"]) for r in agg.get_result()] == [(0, 4)]
    agg.add_message({"k": "a", "ts": 0}, offset=6)
    agg.mark_consumed(0, 7)
    assert agg.get_result() == []
    agg.mark_consumed(0, 8)  # handled outside (e.g. rejected by the map side)
    assert [(r.window_start, r.values["n"]) for r in agg.get_result()] == [(4, 1)]
    agg.mark_consumed(0, 8)  # a replay fires nothing again
    assert agg.get_result() == []


def test_offsets_windows_refuse_a_second_partition(op: Any) -> None:
    agg = op(runtime({"type": "offsets", "size": 2}, DEDUCTIBLE))
    agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=3, offset=0)
    with pytest.raises(OffsetsPartitionError, match="one state task per partition"):
        agg.add_batch(
            EventBatch.from_columns(
                ["a", "a"], [0, 0], numeric={"v": [1, 1]}, partition=[3, 4], offset=[1, 0]
            )
        )
    with pytest.raises(OffsetsPartitionError):
        agg.mark_consumed(4, 0)
    assert agg.offsets == {(0, 3): 0}
    agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=3, offset=1)
    assert summary(agg.get_result(), "count") == []
    agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=3, offset=2)
    assert summary(agg.get_result(), "count") == [("ON_TIME", "a", 0, 2, 0, 2)]


def test_offsets_windows_give_linreg_the_event_time(op: Any) -> None:
    agg = op(
        runtime({"type": "offsets", "size": 10}, [{"name": "fit", "op": "linreg", "field": "v"}])
    )
    # v = 2 * ts + 1 at offsets 0, 5, 7: the slope is over event time, not offsets
    agg.add_batch(
        EventBatch.from_columns(
            ["a"] * 3, [10, 20, 40], numeric={"v": [21, 41, 81]}, offset=[0, 5, 7]
        )
    )
    agg.timeout(END_OF_TIME)
    (r,) = agg.get_result()
    assert r.values["fit"]["slope"] == pytest.approx(2.0)


def test_windows_starting_before_offset_zero_are_dropped() -> None:
    batch = ResultBatch(
        kind=Kind.ON_TIME,
        keys=["a", "b", "c"],
        window_start=np.array([-2, 0, 2]),
        window_end=np.array([2, 4, 6]),
        update_seq=np.array([0, 0, 1]),
        values={"n": [1, 2, 3]},
    )
    kept = from_offset_zero(batch)
    assert (kept.keys, kept.window_start.tolist(), kept.values) == (
        ["b", "c"],
        [0, 2],
        {"n": [2, 3]},
    )
    assert kept.update_seq.tolist() == [0, 1]
    assert from_offset_zero(kept) is kept


def test_two_input_operations_read_the_event_time_as_x() -> None:
    aggs = runtime(
        {"type": "offsets", "size": 4},
        [
            {"name": "fit", "op": "linreg", "field": "v"},
            {"name": "fit_w", "op": "linreg", "field": "v", "params": {"x": "w"}},
            {"name": "n", "op": "count"},
        ],
    ).aggregations
    x = [a.x_field for a in event_time_as_x(aggs).aggregations]
    assert x == [EVENT_TIME, "w", EVENT_TIME]  # (count ignores its x)

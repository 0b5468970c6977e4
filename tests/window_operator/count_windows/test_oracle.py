"""Count and offsets windows against a naive oracle (hypothesis), with restarts and replays."""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from countkit import AGGREGATIONS, DEDUCTIBLE, open_op, runtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from window_operator.count_windows import CountWindowAggregator
from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME
from window_operator.results import WindowResult


@dataclass(frozen=True)
class Ev:
    key: str
    partition: int
    offset: int
    v: float | None


def _nn(evs: Sequence[Ev]) -> list[float]:
    return [e.v for e in evs if e.v is not None]


ORACLE: dict[str, Callable[[Sequence[Ev]], Any]] = {
    "count": len,
    "sum": lambda evs: float(sum(_nn(evs))) if _nn(evs) else None,
    "mean": lambda evs: statistics.fmean(_nn(evs)) if _nn(evs) else None,
    "min": lambda evs: min(_nn(evs)) if _nn(evs) else None,
    "max": lambda evs: max(_nn(evs)) if _nn(evs) else None,
    "median": lambda evs: statistics.median(_nn(evs)) if _nn(evs) else None,
    "collect": lambda evs: [e.v for e in evs],
    "first": lambda evs: evs[0].v,
    "last": lambda evs: evs[-1].v,
}


def close(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def count_oracle(
    events: Sequence[Ev], size: int, step: int, names: Sequence[str]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Slice each key's message sequence into ``[s, s + size)`` for every ``s`` in steps."""
    per_key: dict[str, list[Ev]] = {}
    for e in events:
        per_key.setdefault(e.key, []).append(e)
    return {
        (key, s): {n: ORACLE[n](seq[s : s + size]) for n in names}
        for key, seq in per_key.items()
        for s in range(0, len(seq), step)
    }


def offsets_oracle(
    events: Sequence[Ev], size: int, step: int, names: Sequence[str]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Slice the partition's offsets into ``[s, s + size)``; group each slice by key."""
    last = max(e.offset for e in events)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for s in range(0, last + 1, step):
        in_window = [e for e in events if s <= e.offset < s + size]
        for key in sorted({e.key for e in in_window}):
            evs = [e for e in in_window if e.key == key]
            out[(key, s)] = {n: ORACLE[n](evs) for n in names}
    return out


values = st.one_of(st.none(), st.integers(-50, 50).map(float))


@st.composite
def count_streams(draw: st.DrawFn) -> list[Ev]:
    n = draw(st.integers(1, 50))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    parts = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    vals = draw(st.lists(values, min_size=n, max_size=n))
    next_off = [0, 0]
    out = []
    for k, p, v in zip(keys, parts, vals, strict=True):
        out.append(Ev(k, p, next_off[p], v))
        next_off[p] += 1
    return out


@st.composite
def offset_streams(draw: st.DrawFn) -> list[Ev]:
    n = draw(st.integers(1, 50))
    gaps = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    first = draw(st.integers(0, 6))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    vals = draw(st.lists(values, min_size=n, max_size=n))
    offsets = np.cumsum([first, *gaps[1:]]).tolist()
    return [Ev(k, 0, o, v) for k, o, v in zip(keys, offsets, vals, strict=True)]


@dataclass
class Step:
    """What one call added (the events up to ``upto``) and the results it produced."""

    upto: int
    results: list[WindowResult]


def feed(
    agg: CountWindowAggregator, events: Sequence[Ev], splits: Sequence[int], one_by_one: bool
) -> list[Step]:
    """Add ``events`` in batches (or one by one)."""
    steps: list[Step] = []
    if one_by_one:
        for i, e in enumerate(events):
            agg.add_message({"k": e.key, "ts": 0, "v": e.v}, partition=e.partition, offset=e.offset)
            steps.append(Step(i + 1, agg.get_result()))
        return steps
    bounds = sorted({0, len(events), *[s % (len(events) + 1) for s in splits]})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        chunk = events[lo:hi]
        agg.add_batch(
            EventBatch.from_columns(
                [e.key for e in chunk],
                [0] * len(chunk),
                numeric={"v": [math.nan if e.v is None else e.v for e in chunk]},
                objects={"v": [e.v for e in chunk]},
                partition=[e.partition for e in chunk],
                offset=[e.offset for e in chunk],
            )
        )
        steps.append(Step(hi, agg.get_result()))
    return steps


def results_of(steps: Sequence[Step]) -> list[WindowResult]:
    return [r for step in steps for r in step.results]


def run_against_oracle(
    window: dict[str, Any],
    aggregations: list[dict[str, Any]],
    events: list[Ev],
    splits: list[int],
    one_by_one: bool,
    use_deduct: bool | None,
    restart: bool,
) -> tuple[list[WindowResult], list[WindowResult]]:
    """Feed, restart midway (or flush), replay a prefix, end the input; (before end, at end)."""
    rt = runtime(window, aggregations)
    with tempfile.TemporaryDirectory() as tmp:
        agg = open_op(rt, Path(tmp), use_deduct)
        half = len(events) // 2
        before = results_of(feed(agg, events[:half], splits, one_by_one))
        if restart:
            agg.close()
            agg = open_op(rt, Path(tmp), use_deduct)
        else:
            agg.flush()
        before += results_of(feed(agg, events[half:], splits, one_by_one))
        # replaying a prefix changes nothing
        assert results_of(feed(agg, events[: half + 1], splits, one_by_one)) == []
        agg.timeout(END_OF_TIME)
        at_end = agg.get_result()
        assert agg.get_errors() == []
        agg.close()
    return before, at_end


def check(
    results: list[WindowResult], expected: dict[tuple[str, int], dict[str, Any]], size: int
) -> None:
    got = {(r.key, r.window_start): r for r in results}
    assert len(got) == len(results), "a window was emitted twice"
    assert got.keys() == expected.keys()
    for kw, want in expected.items():
        r = got[kw]
        assert r.window_end == r.window_start + size and r.update_seq == 0
        assert all(close(r.values[n], want[n]) for n in want), (kw, r.values, want)


SHAPES = [(1, 1), (3, 3), (5, 5), (4, 2), (6, 2), (8, 2), (3, 1), (4, 1), (6, 3)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=count_streams(),
    shape=st.sampled_from(SHAPES),
    splits=st.lists(st.integers(0, 50), max_size=4),
    one_by_one=st.booleans(),
    use_deduct=st.sampled_from([None, True, False]),
    restart=st.booleans(),
)
def test_count_windows_equal_slicing_each_keys_messages(
    events: list[Ev],
    shape: tuple[int, int],
    splits: list[int],
    one_by_one: bool,
    use_deduct: bool | None,
    restart: bool,
) -> None:
    size, step = shape
    window = {"type": "count", "size": size, "step": step}
    # deduct needs deductible operations only (min, max, median, ... have no inverse)
    aggregations = DEDUCTIBLE if use_deduct else AGGREGATIONS
    before, at_end = run_against_oracle(
        window, aggregations, events, splits, one_by_one, use_deduct, restart
    )
    # the full-size policy: a window is emitted before the end exactly when it is full
    assert all(r.values["count"] == size for r in before)
    assert all(r.values["count"] < size for r in at_end)
    names = [a["name"] for a in aggregations]
    check(before + at_end, count_oracle(events, size, step, names), size)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=offset_streams(),
    shape=st.sampled_from([(1, 1), (4, 4), (4, 2), (6, 2), (3, 1)]),
    splits=st.lists(st.integers(0, 50), max_size=4),
    one_by_one=st.booleans(),
    restart=st.booleans(),
)
def test_offsets_windows_equal_slicing_the_partitions_offsets(
    events: list[Ev], shape: tuple[int, int], splits: list[int], one_by_one: bool, restart: bool
) -> None:
    size, step = shape
    window = {"type": "offsets", "size": size, "step": step}
    rt = runtime(window)
    with tempfile.TemporaryDirectory() as tmp:
        agg = open_op(rt, Path(tmp))
        half = len(events) // 2
        steps = feed(agg, events[:half], splits, one_by_one)
        if restart:
            agg.close()
            agg = open_op(rt, Path(tmp))
        second = feed(agg, events[half:], splits, one_by_one)
        steps += [Step(half + s.upto, s.results) for s in second]
        assert results_of(feed(agg, events[: half + 1], splits, one_by_one)) == []
        agg.timeout(END_OF_TIME)
        at_end = agg.get_result()
        agg.close()
    # a window fires before the end exactly when an offset >= its end has been delivered
    for s in steps:
        delivered = events[s.upto - 1].offset
        assert all(r.window_end <= delivered for r in s.results)
    before = results_of(steps)
    assert all(r.window_end > events[-1].offset for r in at_end)
    check(before + at_end, offsets_oracle(events, size, step, list(ORACLE)), size)

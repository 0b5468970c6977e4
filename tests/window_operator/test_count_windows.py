"""Count and offsets windows: small timelines, a naive oracle, recovery, and the CLI.

Timelines name a key's messages by their per-key index (``a0 a1 ...``) for count
windows and by their offset for offsets windows.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from helpers import runtime_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.rocks import ColumnFamily, TaskStore
from window_operator.config import CountWindow
from window_operator.count_windows import (
    CountWindowAggregator,
    IncompatibleStateError,
    OffsetsPartitionError,
)
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode, WindowResult

ROOT = Path(__file__).resolve().parents[2]

AGGREGATIONS: list[dict[str, Any]] = [
    {"name": "count", "op": "count"},
    {"name": "sum", "op": "sum", "field": "v"},
    {"name": "mean", "op": "mean", "field": "v"},
    {"name": "min", "op": "min", "field": "v"},
    {"name": "max", "op": "max", "field": "v"},
    {"name": "median", "op": "median", "field": "v"},
    {"name": "collect", "op": "collect", "field": "v"},
    {"name": "first", "op": "first", "field": "v"},
    {"name": "last", "op": "last", "field": "v"},
]
DEDUCTIBLE = [a for a in AGGREGATIONS if a["op"] in ("count", "sum", "mean")]


def runtime(
    window: dict[str, Any], aggregations: list[dict[str, Any]] | None = None, **kw: Any
) -> JobRuntime:
    return runtime_for(window=window, aggregations=aggregations or AGGREGATIONS, **kw)


def open_op(rt: JobRuntime, path: Path, use_deduct: bool | None = None) -> CountWindowAggregator:
    """The operator a job builds, with ``use_deduct`` (the job does not pass it)."""
    window = rt.config.window
    assert isinstance(window, CountWindow)
    return CountWindowAggregator(
        window=window,
        aggregations=rt.aggregations,
        policy=rt.policy,
        store=TaskStore(path),
        decoder=rt.decoder,
        use_deduct=use_deduct,
    )


@pytest.fixture
def op(tmp_path: Path) -> Any:
    opened: list[CountWindowAggregator] = []

    def _open(
        rt: JobRuntime, name: str = "a", use_deduct: bool | None = None
    ) -> CountWindowAggregator:
        agg = open_op(rt, tmp_path / name, use_deduct)
        opened.append(agg)
        return agg

    yield _open
    for agg in opened:
        agg.close()


def summary(results: Sequence[WindowResult], *names: str) -> list[tuple[Any, ...]]:
    return [
        (
            r.kind.value,
            r.key,
            r.window_start,
            r.window_end,
            r.update_seq,
            *(r.values[n] for n in names),
        )
        for r in results
    ]


# --------------------------------------------------------------------------- count timelines


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


def test_bad_records_go_to_errors(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 2}, DEDUCTIBLE))
    stats = agg.add_batch(
        [{"k": "a", "ts": 0, "v": 1}, {"k": "a", "v": 1}, {"k": "a", "ts": 0, "v": "x"}]
    )
    assert (stats.applied, stats.rejected) == (1, 2)
    assert [e.code for e in agg.get_errors()] == [ErrorCode.MISSING_TIMESTAMP, ErrorCode.WRONG_TYPE]
    assert agg.add_message({"ts": 0, "v": 1}).rejected == 1
    (err,) = agg.get_errors()
    assert (err.code, err.offset) == (ErrorCode.MISSING_KEY, 1)


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


def test_reopening_with_another_window_shape_is_refused(tmp_path: Path) -> None:
    agg = open_op(runtime({"type": "count", "size": 4, "step": 2}), tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    agg.close()
    with pytest.raises(IncompatibleStateError, match="size"):
        open_op(runtime({"type": "count", "size": 6, "step": 2}), tmp_path)
    with pytest.raises(IncompatibleStateError, match="offsets"):
        open_op(runtime({"type": "offsets", "size": 4, "step": 2}), tmp_path)


def test_flush_without_commit_returns_one_batch_ending_in_the_checkpoint(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 2}, DEDUCTIBLE)
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    batch = agg.flush(commit=False)
    assert agg.store.get(ColumnFamily.CHECKPOINT, b"task") is None
    # the changelog writer needs exactly one checkpoint put: the batch's commit marker
    assert [m.cf for m in batch].count(ColumnFamily.CHECKPOINT) == 1
    agg.store.commit(batch)
    agg.store.close()
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 2}])
    assert summary(agg.get_result(), "count", "sum") == [("ON_TIME", "a", 0, 2, 0, 2, 3.0)]
    assert agg.batches == 1
    agg.close()


def test_full_state_values_survive_a_restart_exactly(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 3}, [{"name": "m", "op": "median", "field": "v"}])
    agg = open_op(rt, tmp_path)
    agg.add_batch(EventBatch.from_columns(["a", "a"], [0, 0], numeric={"v": [math.inf, math.inf]}))
    agg.close()
    agg = open_op(rt, tmp_path)  # the median's values come back from the Message Store
    agg.add_message({"k": "a", "ts": 0, "v": 1.0})
    (r,) = agg.get_result()
    assert r.values["m"] == math.inf  # (JSON would have turned inf into null)
    agg.close()


# --------------------------------------------------------------------------- offsets timelines


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


def test_offsets_windows_refuse_a_second_partition(op: Any) -> None:
    agg = op(runtime({"type": "offsets", "size": 2}, DEDUCTIBLE))
    agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=3, offset=0)
    with pytest.raises(OffsetsPartitionError, match="one operator .task. per partition"):
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


# --------------------------------------------------------------------------- recovery


RECOVERY_EVENTS = [
    {"k": k, "ts": i, "v": (i * 7) % 11} for i, k in enumerate("abaabbbaababaaabbaba")
]


# The offsets engine is the time-window aggregator, which does not persist which frames
# changed since the last EARLY result: it is checked without EARLY results.
@pytest.mark.parametrize(
    ("window", "emit"),
    [
        ({"type": "count", "size": 3}, {"early": "3s"}),
        ({"type": "count", "size": 4, "step": 2}, {"early": "3s"}),
        ({"type": "offsets", "size": 6, "step": 2}, {}),
    ],
)
def test_snapshot_restore_mid_stream_gives_the_same_results(
    tmp_path: Path, window: dict[str, Any], emit: dict[str, Any]
) -> None:
    rt = runtime(window, emit=emit)

    def run(split: int | None) -> list[list[tuple[Any, ...]]]:
        d = tmp_path / f"split-{split}"
        agg = open_op(rt, d)
        out: list[list[tuple[Any, ...]]] = []
        for i, e in enumerate(RECOVERY_EVENTS):
            if i == split:
                agg.close()  # snapshot ...
                agg = open_op(rt, d)  # ... and restore in the middle
            agg.add_message(e, wall_ms=i * 1000)
            agg.timeout(i * 1000)
            out.append(step_output(agg.get_result()))
        agg.timeout(END_OF_TIME)
        out.append(step_output(agg.get_result()))
        agg.close()
        return out

    reference = run(None)
    kinds = {kind for step in reference for kind, *_ in step}
    assert kinds == ({"EARLY", "ON_TIME"} if emit else {"ON_TIME"})
    for split in range(1, len(RECOVERY_EVENTS), 4):
        assert run(split) == reference, f"restore after {split} events"


def step_output(results: Sequence[WindowResult]) -> list[tuple[Any, ...]]:
    """The results of one call; their order across windows is not part of the contract."""
    return sorted(
        (r.kind.value, r.key, r.window_start, r.window_end, r.update_seq, orjson.dumps(r.values))
        for r in results
    )


# --------------------------------------------------------------------------- oracle


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


# --------------------------------------------------------------------------- CLI


def simulate(
    tmp_path: Path, config: str, lines: Sequence[dict[str, Any]], *extra: str
) -> list[dict[str, Any]]:
    job = tmp_path / "job.yaml"
    job.write_text(config)
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "window_operator",
            "simulate",
            "--config",
            str(job),
            "--input",
            str(events),
            "--output",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def test_simulate_count_windows_end_to_end(tmp_path: Path) -> None:
    config = (
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: count, size: 3, step: 1}\n"
        "aggregations: [{name: n, op: count}, {name: s, op: sum, field: v}]\n"
    )
    lines = [{"k": "ab"[i % 3 == 0], "ts": i, "v": i} for i in range(10)]
    results = simulate(tmp_path, config, lines, "--batch-size", "4")
    got = {
        (r["key"], r["window_start"]): (r["window_end"], r["values"]["n"], r["values"]["s"])
        for r in results
    }
    a = [i for i in range(10) if i % 3]
    b = [i for i in range(10) if not i % 3]
    want = {
        (key, s): (s + 3, len(seq[s : s + 3]), float(sum(seq[s : s + 3])))
        for key, seq in (("a", a), ("b", b))
        for s in range(len(seq))
    }
    assert got == want and len(results) == len(want)


def test_simulate_offsets_windows_end_to_end(tmp_path: Path) -> None:
    config = (
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: offsets, size: 4, step: 2}\n"
        "aggregations: [{name: n, op: count}]\n"
    )
    lines = [
        {"k": k, "ts": 0, "offset": o}
        for k, o in [("a", 0), ("b", 1), ("a", 3), ("a", 4), ("b", 7)]
    ]
    lines.append({"k": "a", "ts": 0, "offset": 3})  # a replay
    results = simulate(tmp_path, config, lines, "--batch-size", "2")
    got = sorted((r["key"], r["window_start"], r["window_end"], r["values"]["n"]) for r in results)
    assert got == [
        ("a", 0, 4, 2), ("a", 2, 6, 2), ("a", 4, 8, 1),
        ("b", 0, 4, 1), ("b", 4, 8, 1), ("b", 6, 10, 1),
    ]  # fmt: skip

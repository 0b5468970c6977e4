"""The session operator end to end: replays, restore, oracles, the CLI, the protocol.

A consumer of session results keeps the latest record per ``(key, window_start,
window_end)`` and deletes on RETRACT; after the input ends its view must equal the
sessions of the sorted input.
"""

from __future__ import annotations

import inspect
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sessionkit import (
    Ev,
    OpenAgg,
    S,
    Window,
    apply,
    close,
    ev,
    feed,
    fresh,
    oracle_sessions,
    oracle_tuple_sessions,
    reopen,
    session_runtime,
    streams,
    tuple_runtime,
    tuple_streams,
    windows,
)

from stores.rocks import TaskStore
from window_operator.errors import IncompatibleStateError
from window_operator.events import EventBatch
from window_operator.kernel import ClockState, InputPosition
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode, Kind, WindowResult
from window_operator.session import SessionAggregator

ROOT = Path(__file__).resolve().parents[3]

# --------------------------------------------------------------------------- replays, restore


def test_replays_are_no_ops(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    events = [ev("a", t) for t in (1, 2, 30, 3, 50)]
    first = agg.add_batch(
        EventBatch.from_columns(
            [e["k"] for e in events],
            [e["ts"] for e in events],
            numeric={"v": [e["v"] for e in events]},
            offset=range(5),
        )
    )
    assert first.applied == 5
    before = agg.get_result()
    again = agg.add_batch(
        EventBatch.from_columns(["a", "a"], [1 * S, 2 * S], numeric={"v": [1, 2]}, offset=[0, 1])
    )
    assert (again.applied, again.replayed) == (0, 2)
    assert agg.add_message(ev("a", 3), offset=3).replayed == 1
    agg.timeout(END_OF_TIME)
    view: dict[Window, dict[str, Any]] = {}
    apply(view, before + agg.get_result())
    assert windows(view) == {
        ("a", S, 13 * S): 3,
        ("a", 30 * S, 40 * S): 1,
        ("a", 50 * S, 60 * S): 1,
    }


RESTORE_EVENTS = [
    ev(k, t, v)
    for k, t, v in [
        ("a", 1, 3), ("b", 4, 1), ("a", 12, 7), ("a", 9, 2), ("b", 25, 5), ("a", 31, 8),
        ("b", 18, 4), ("a", 44, 1), ("a", 22, 9), ("b", 52, 6), ("b", 40, 0), ("a", 61, 2),
        ("a", 15, 5), ("b", 70, 3), ("a", 35, 4), ("c", 36, 1), ("b", 61, 8), ("a", 90, 7),
    ]
]  # fmt: skip


@pytest.mark.parametrize("late", ["per_arrival", "10s"])
def test_snapshot_restore_mid_stream_gives_identical_output(tmp_path: Path, late: str) -> None:
    runtime = session_runtime(
        watermark={"allowed_lateness": "5s"}, emit={"late": late, "early": "3s"}
    )

    def run(split: int | None) -> list[WindowResult]:
        d = tmp_path / f"{late}-{split}"
        agg = runtime.open_task(d)
        out: list[WindowResult] = []
        for i, e in enumerate(RESTORE_EVENTS):
            if i == split:
                agg.close()  # snapshot ...
                agg = runtime.open_task(d)  # ... and restore in the middle
            agg.add_message(e, wall_ms=i * 2 * S)
            agg.timeout(i * 2 * S)
            out += agg.get_result()
            if i % 4 == 3:
                agg.flush()  # flushes (evictions, expiry) change nothing either
        agg.timeout(END_OF_TIME)
        out += agg.get_result()
        agg.close()
        return out

    reference = run(None)
    assert {Kind.RETRACT, Kind.LATE, Kind.EARLY} <= {r.kind for r in reference}
    for split in range(1, len(RESTORE_EVENTS)):
        assert run(split) == reference, f"restore after {split} events"


# --------------------------------------------------------------------------- property test
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=streams(),
    gap=st.sampled_from([3 * S, 10 * S, 25 * S]),
    lateness=st.sampled_from([0, 5 * S, 30 * S]),
    late=st.sampled_from(["per_arrival", "10s"]),
    early=st.sampled_from([None, "5s"]),
    cuts=st.lists(st.integers(0, 50), max_size=4),
    one_by_one=st.booleans(),
    between=st.sampled_from(["nothing", "flush", "restore"]),
    flush_always=st.booleans(),
)
def test_surviving_windows_equal_the_oracle_sessions(
    store: TaskStore,
    events: list[Ev],
    gap: int,
    lateness: int,
    late: str,
    early: str | None,
    cuts: list[int],
    one_by_one: bool,
    between: str,
    flush_always: bool,
) -> None:
    emit: dict[str, Any] = {"late": late} if early is None else {"late": late, "early": early}
    runtime = session_runtime(gap=gap, watermark={"allowed_lateness": lateness}, emit=emit)
    view: dict[Window, dict[str, Any]] = {}
    seqs: dict[Window, list[int]] = {}
    agg: SessionAggregator = runtime.operator(fresh(store))
    half = len(events) // 2
    feed(agg, events[:half], cuts, one_by_one, view, seqs, flush_always)
    if between == "flush":
        agg.flush()
    elif between == "restore":
        agg = reopen(runtime, agg)
    feed(agg, events[half:], cuts, one_by_one, view, seqs, flush_always)
    # replaying a prefix changes nothing
    feed(agg, events[: half + 1], cuts, one_by_one, view, seqs, flush_always)
    agg.timeout(END_OF_TIME)
    apply(view, agg.get_result())
    assert agg.get_errors() == []
    expected = oracle_sessions(events, gap)
    assert view.keys() == expected.keys()
    for w, values in expected.items():
        assert close(view[w], values), (w, view[w], values)
    # update_seq grows with every record of an identity
    assert all(s == sorted(set(s)) for s in seqs.values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=streams(max_ts=120 * S),
    gap=st.sampled_from([3 * S, 10 * S]),
    lateness=st.sampled_from([0, 10 * S]),
    retention=st.sampled_from([0, 5 * S, 20 * S]),
    cuts=st.lists(st.integers(0, 50), max_size=4),
    one_by_one=st.booleans(),
    flush_always=st.booleans(),
)
def test_short_retention_keeps_every_accepted_event_exactly_once(
    store: TaskStore,
    events: list[Ev],
    gap: int,
    lateness: int,
    retention: int,
    cuts: list[int],
    one_by_one: bool,
    flush_always: bool,
) -> None:
    """Past retention sessions stop merging, so the oracle no longer applies; but every
    accepted event is in exactly one surviving window, every window is a chain of
    events no more than ``gap`` apart, and its median (kept in the Message Store, which
    expiry range-deletes) matches its events."""
    runtime = session_runtime(
        gap=gap,
        watermark={"allowed_lateness": lateness},
        retention={"time": retention},
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "vals", "op": "collect", "field": "v"},
            {"name": "median", "op": "median", "field": "v"},
        ],
    )
    timed = [Ev(e.key, e.ts, e.partition, e.offset, e.ts / S) for e in events]  # v = ts in s
    agg: SessionAggregator = runtime.operator(fresh(store))
    view: dict[Window, dict[str, Any]] = {}
    # A session past retention is forgotten (as Flink cleans a session up at its end +
    # allowed lateness): a later event just after it starts a new, overlapping session.
    feed(agg, timed, cuts, one_by_one, view, {}, flush_always, disjoint=False)
    agg.timeout(END_OF_TIME)
    apply(view, agg.get_result())
    errors = agg.get_errors()
    assert {e.code for e in errors} <= {ErrorCode.OUT_OF_RETENTION}
    rejected = {(e.partition, e.offset) for e in errors}
    accepted = sorted((e.key, e.v) for e in timed if (e.partition, e.offset) not in rejected)
    assert sorted((k, v) for (k, _, _), w in view.items() for v in w["vals"]) == accepted
    for (_, start, end), w in view.items():
        times = sorted(round(v * S) for v in w["vals"])
        assert (times[0], times[-1] + gap) == (start, end)
        assert all(b - a <= gap for a, b in zip(times, times[1:], strict=False))
        assert w["n"] == len(times) and w["median"] == statistics.median(w["vals"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=tuple_streams(),
    n=st.integers(1, 6),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    one_by_one=st.booleans(),
    restore=st.booleans(),
)
def test_tuple_sessions_equal_the_oracle(
    store: TaskStore, events: list[Ev], n: int, cuts: list[int], one_by_one: bool, restore: bool
) -> None:
    view: dict[Window, dict[str, Any]] = {}
    seqs: dict[Window, list[int]] = {}
    ended: dict[Window, int] = {}
    runtime = tuple_runtime(n)
    agg: SessionAggregator = runtime.operator(fresh(store))
    half = len(events) // 2
    feed(agg, events[:half], cuts, one_by_one, view, seqs)
    if restore:
        agg = reopen(runtime, agg)
    feed(agg, events[half:], cuts, one_by_one, view, seqs)
    feed(agg, events[:half], cuts, one_by_one, view, seqs)  # replays
    # every session emitted so far has really ended: N offsets without its key
    last_off = {p: max((e.offset for e in events if e.partition == p), default=-1) for p in (0, 1)}
    for k, _, end in view:
        ended[(k, 0, end)] = last_off[int(k[-1])] - (end - 1)
    agg.timeout(END_OF_TIME)
    apply(view, agg.get_result())
    assert all(gap >= n for gap in ended.values())
    assert all(s == [0] for s in seqs.values())  # one ON_TIME result per session
    expected = oracle_tuple_sessions(events, n)
    assert view.keys() == expected.keys()
    for w, values in expected.items():
        assert close(view[w], values), (w, view[w], values)


# --------------------------------------------------------------------------- CLI


def test_simulate_runs_a_session_job_end_to_end(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: s\ninput: {key: k, timestamp: ts}\n"
        "window: {type: session, gap: 10s}\n"
        "aggregations: [{name: n, op: count}, {name: p50, op: median, field: v}]\n"
        "watermark: {allowed_lateness: 2s}\n"
        "emit: {late: per_arrival}\n"
    )
    lines = [
        {"k": "a", "ts": 0, "v": 1},
        {"k": "a", "ts": 15_000, "v": 2},
        {"k": "b", "ts": 40_000, "v": 3},  # watermark 38 s: both sessions of a fire
        {"k": "a", "ts": 8_000, "v": 3},  # late: merges them
        {"k": "a", "ts": 3_000, "v": 4, "offset": 3},  # a replay of offset 3
        {"k": "a", "ts": "noon", "v": 5},
    ]
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    out = tmp_path / "out.jsonl"
    errs = tmp_path / "err.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "window_operator", "simulate", "--config", str(job),
         "--input", str(events), "--output", str(out), "--errors", str(errs),
         "--batch-size", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["kind"] for r in results].count("RETRACT") == 2
    view: dict[Window, Any] = {}
    for r in results:
        w = (r["key"], r["window_start"], r["window_end"])
        if r["kind"] == "RETRACT":
            assert r["values"] == {}
            del view[w]
        else:
            view[w] = r["values"]
    assert view == {
        ("a", 0, 25_000): {"n": 3, "p50": 2.0},
        ("b", 40_000, 50_000): {"n": 1, "p50": 3.0},
    }
    (err,) = [orjson.loads(line) for line in errs.read_bytes().splitlines()]
    assert err["code"] == "BAD_TIMESTAMP"
    assert "1 replayed" in proc.stderr


# --------------------------------------------------------------------------- the protocol


def test_the_operator_satisfies_the_window_operator_protocol(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    assert isinstance(agg, SessionAggregator)
    for name in ("store", "watermark", "offsets", "batches"):
        assert isinstance(inspect.getattr_static(agg, name), property), name
    for name in ("add_batch", "mark_consumed", "adopt_clock", "timeout", "flush", "close"):
        assert callable(getattr(agg, name)), name
    assert agg.flush() is not None and agg.batches == 1


# max_idle_messages 2, two partitions in one operator: offsets and sessions per partition.
#
#   partition 0:  offset 4 a, offset 5 a       a's session ends once p0 reaches 7
#   partition 1:  offset 7 b                   b's session ends once p1 reaches 9
#
# A record of partition 1 handled outside the operator (offset 9, e.g. rejected) ends b's
# session there; a's session in partition 0 stays open.
def test_tuple_sessions_of_several_partitions_keep_offsets_per_input_position(
    open_agg: OpenAgg,
) -> None:
    agg = open_agg(tuple_runtime(2))
    agg.add_batch(
        EventBatch.from_columns(
            ["a", "b", "a"], [0, 0, 0], numeric={"v": [1, 2, 3]}, partition=[0, 1, 0],
            offset=[4, 7, 5],
        )
    )  # fmt: skip
    assert agg.offsets == {InputPosition(0, 0): 5, InputPosition(0, 1): 7}
    assert agg.offsets == {(0, 0): 5, (0, 1): 7}
    assert agg.get_result() == []
    stored = [(w.key, w.window_start, w.partition) for w in agg.get_windows("b", 0, 100)]
    assert stored == [("b", 7, 1)]
    agg.mark_consumed(1, 9, source=0)
    ended = agg.get_result()
    assert [(r.key, r.window_start, r.window_end) for r in ended] == [("b", 7, 8)]
    assert [r.partition for r in ended] == [1]  # its bounds are offsets of partition 1
    assert agg.offsets[InputPosition(0, 1)] == 9
    agg.add_message({"k": "a", "ts": 0, "v": 4}, partition=0, offset=6)
    agg.mark_consumed(0, 8)  # 6 + 2: a's session [4, 7) ends
    ((key, start, end, n, part),) = [
        (r.key, r.window_start, r.window_end, r.values["n"], r.partition) for r in agg.get_result()
    ]
    assert (key, start, end, n) == ("a", 4, 7, 3)
    assert part == 0


# max_idle_messages 2: a record that does not decode counts as a message without any key,
# so two of them end a's session; a replay of one counts nothing.
def test_tuple_sessions_count_a_rejected_single_record_as_a_message(open_agg: OpenAgg) -> None:
    agg = open_agg(tuple_runtime(2))
    agg.add_message({"k": "a", "ts": 0, "v": 1}, offset=0)
    assert agg.add_message({"k": "a", "v": 1}, offset=1).rejected == 1
    assert agg.add_message({"k": "a", "v": 1}, offset=1).replayed == 1
    assert agg.get_result() == []
    assert agg.add_message({"k": "a", "ts": "soon", "v": 1}, offset=2).rejected == 1
    assert [(r.key, r.window_start, r.window_end) for r in agg.get_result()] == [("a", 0, 1)]
    assert [(e.code.value, e.offset) for e in agg.get_errors()] == [
        ("MISSING_TIMESTAMP", 1),
        ("BAD_TIMESTAMP", 2),
    ]


# gap 10 s: a@0 -> [0, 10]. The clock of the whole job is at 30 s (other tasks saw later
# events): adopting it fires a; afterwards records no longer move the clock.
def test_adopting_the_job_clock_fires_what_it_passed(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(watermark={"allowed_lateness": 0}))
    agg.add_message(ev("a", 0))
    assert agg.watermark == 0 and agg.get_result() == []
    p0 = InputPosition(0, 0)
    agg.adopt_clock(ClockState(max_ts={p0: 30 * S}, last_active={p0: 30 * S}, now=30 * S))
    assert agg.watermark == 30 * S
    assert [(r.kind, r.key, r.window_end) for r in agg.get_result()] == [
        (Kind.ON_TIME, "a", 10 * S)
    ]
    agg.add_message(ev("x", 100))
    assert agg.watermark == 30 * S  # the job's clock moves it now, not this task's records
    (w,) = agg.get_windows("x", 0, 200 * S)
    assert not w.fired


def test_a_store_is_continued_only_by_the_same_session_shape(tmp_path: Path) -> None:
    with TaskStore(tmp_path) as store:
        agg = session_runtime(gap="10s").operator(store)
        agg.add_message(ev("a", 0))
        agg.flush()
        with pytest.raises(IncompatibleStateError, match="gap"):
            session_runtime(gap="5s").operator(store)
        with pytest.raises(IncompatibleStateError, match="max_idle_messages"):
            tuple_runtime(3).operator(store)
        restored = session_runtime(gap="10s").operator(store)
        (w,) = restored.get_windows("a", 0, 100 * S)
        assert (w.window_start, w.window_end) == (0, 10 * S)


@pytest.mark.parametrize("one_by_one", [True, False])
def test_an_event_behind_retention_joins_only_inside_a_retained_session(
    tmp_path: Path, one_by_one: bool
) -> None:
    """46, 51, 81: [46, 56) is still updatable (56 + 30 s > 81 s). 48 s joins it, inside
    its span; 45 s would move its start back over time whose sessions may be forgotten
    (its own interval ends at 50 s, behind 81 s - 30 s): out of retention. Moving starts
    back there let a later event share a start, and so a store key, with an expired
    session (found by fuzzing a restart)."""
    runtime = session_runtime(
        gap="5s",
        watermark={"allowed_lateness": 0},
        retention={"time": "30s"},
        emit={"late": "per_arrival"},
    )
    agg = runtime.open_task(tmp_path)
    view: dict[Window, dict[str, Any]] = {}
    stream = [ev("a", 46), ev("a", 51), ev("a", 81), ev("a", 45), ev("a", 48)]
    for offset, event in enumerate(stream):
        if one_by_one:
            agg.add_message(event, offset=offset)
        else:
            agg.add_batch(
                EventBatch.from_columns(
                    [event["k"]], [event["ts"]], numeric={"v": [event["v"]]}, offset=[offset]
                )
            )
        apply(view, agg.get_result())
    agg.timeout(END_OF_TIME)
    apply(view, agg.get_result())
    assert windows(view) == {("a", 46 * S, 56 * S): 3, ("a", 81 * S, 86 * S): 1}
    (error,) = agg.get_errors()
    assert (error.code, error.offset) == (ErrorCode.OUT_OF_RETENTION, 3)
    agg.close()

"""Session windows on small timelines, against naive oracles, through restore and the CLI.

A consumer of session results keeps the latest record per ``(key, window_start,
window_end)`` and deletes on RETRACT (:func:`apply`); after the input ends its view must
equal the sessions of the sorted input.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import runtime_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode, Kind, WindowResult
from window_operator.session import SessionAggregator

OpenAgg = Callable[..., SessionAggregator]
S = 1000
ROOT = Path(__file__).resolve().parents[2]
Window = tuple[str, int, int]

AGGS = [
    {"name": "n", "op": "count"},
    {"name": "sum", "op": "sum", "field": "v"},
    {"name": "mean", "op": "mean", "field": "v"},
    {"name": "min", "op": "min", "field": "v"},
    {"name": "max", "op": "max", "field": "v"},
    {"name": "median", "op": "median", "field": "v"},
    {"name": "vals", "op": "collect", "field": "v"},
]


def session_runtime(gap: str | int = "10s", **overrides: Any) -> JobRuntime:
    sections: dict[str, Any] = {
        "window": {"type": "session", "gap": gap},
        "aggregations": AGGS,
        **overrides,
    }
    return runtime_for(**sections)


def ev(key: str, t: float, v: float | None = None) -> dict[str, Any]:
    """An event at ``t`` seconds (value defaults to ``t``)."""
    return {"k": key, "ts": int(t * S), "v": t if v is None else v}


def apply(view: dict[Window, dict[str, Any]], results: Sequence[WindowResult]) -> None:
    """What a consumer does: upsert per identity, delete on RETRACT (which must be known)."""
    for r in results:
        w = (r.key, r.window_start, r.window_end)
        if r.kind is Kind.RETRACT:
            assert w in view, f"RETRACT of {w}, which was never emitted (or already retracted)"
            assert r.values == {}
            del view[w]
        else:
            view[w] = r.values


def windows(view: dict[Window, dict[str, Any]]) -> dict[Window, int]:
    return {w: v["n"] for w, v in view.items()}


def assert_disjoint(view: dict[Window, Any]) -> None:
    """A consumer's windows of one key never overlap: each is (part of) a live session."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for k, s, e in view:
        by_key.setdefault(k, []).append((s, e))
    for spans in by_key.values():
        spans.sort()
        for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False):
            assert s2 > e1, spans


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


# --------------------------------------------------------------------------- emission


def test_on_time_when_the_watermark_reaches_the_end(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(watermark={"allowed_lateness": "5s"}))
    agg.add_batch([ev("a", 1), ev("a", 4), ev("b", 2)])
    agg.add_message(ev("x", 18))  # watermark 13: a ends at 14, b at 12
    assert [(r.key, r.window_end) for r in agg.get_result()] == [("b", 12 * S)]
    agg.add_message(ev("x", 19))  # watermark 14
    (r,) = agg.get_result()
    assert (r.kind, r.key, r.window_start, r.window_end, r.values["n"]) == (
        Kind.ON_TIME, "a", 1 * S, 14 * S, 2
    )  # fmt: skip


# A late event extends a session that was already emitted: its old identity is
# retracted before the new result.
#
#   a@1 a@4  -> [1, 14]     x@30 moves the watermark to 30: ON_TIME [1, 14]
#   a@12 (late)  -> [1, 22] RETRACT [1, 14], LATE [1, 22]
def test_late_extension_retracts_the_emitted_identity(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 1), ev("a", 4), ev("x", 30)])
    (on_time,) = [r for r in agg.get_result() if r.key == "a"]
    assert (on_time.kind, on_time.window_end, on_time.update_seq) == (Kind.ON_TIME, 14 * S, 0)
    stats = agg.add_message(ev("a", 12))
    assert stats.late == 1
    retract, late = agg.get_result()
    assert (retract.kind, retract.window_start, retract.window_end) == (Kind.RETRACT, S, 14 * S)
    assert retract.values == {} and retract.update_seq == 1
    assert (late.kind, late.window_start, late.window_end, late.update_seq) == (
        Kind.LATE, S, 22 * S, 1
    )  # fmt: skip
    assert late.values["n"] == 3 and late.values["vals"] == [1, 4, 12]


# Two emitted sessions merged by a late event: both identities are retracted, then the
# merged session is emitted once.
#
#   a@0 -> [0, 10]   a@15 -> [15, 25]   x@60: both fire
#   a@8 (late) bridges them (8 <= 10, 8 + 10 >= 15) -> [0, 25]
def test_late_merge_of_two_emitted_sessions(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 0), ev("a", 15), ev("x", 60)])
    view: dict[Window, dict[str, Any]] = {}
    apply(view, agg.get_result())
    assert windows(view) == {("a", 0, 10 * S): 1, ("a", 15 * S, 25 * S): 1}
    agg.add_message(ev("a", 8))
    results = agg.get_result()
    assert [r.kind for r in results] == [Kind.RETRACT, Kind.RETRACT, Kind.LATE]
    apply(view, results)
    assert windows(view) == {("a", 0, 25 * S): 3}
    assert view[("a", 0, 25 * S)]["median"] == 8.0
    assert results[-1].update_seq == 1


def test_late_updates_are_batched_per_period_and_survive_restore(tmp_path: Path) -> None:
    runtime = session_runtime(emit={"late": "10s"})
    agg = runtime.open_task(tmp_path)
    agg.add_batch([ev("a", 0), ev("a", 15), ev("x", 60)])
    agg.timeout(60 * S)
    view: dict[Window, dict[str, Any]] = {}
    apply(view, agg.get_result())
    agg.add_message(ev("a", 8), wall_ms=61 * S)
    agg.add_message(ev("a", 20), wall_ms=62 * S)  # extends the merged session
    agg.timeout(62 * S)
    assert agg.get_result() == []  # pending, waiting for the period
    agg.close()
    agg = runtime.open_task(tmp_path)  # the pending update survives a restore
    agg.timeout(65 * S)
    assert agg.get_result() == []
    agg.timeout(80 * S)
    results = agg.get_result()
    assert [r.kind for r in results] == [Kind.RETRACT, Kind.RETRACT, Kind.LATE]
    apply(view, results)
    assert windows(view) == {("a", 0, 30 * S): 4}
    agg.close()


def test_late_off_updates_state_but_emits_nothing(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(emit={"late": "off"}))
    agg.add_batch([ev("a", 0), ev("x", 60)])
    assert [r.key for r in agg.get_result()] == ["a"]
    agg.add_message(ev("a", 5))
    assert agg.get_result() == []
    (w,) = agg.get_windows("a", 0, 100 * S)
    assert (w.window_end, w.values["n"], w.fired) == (15 * S, 2, True)


# A session that fired can be extended past the watermark by a late event: it is open
# again and fires ON_TIME once more when the watermark reaches its new end.
#
#   a@0 -> [0, 10]; x@12: wm 12, ON_TIME [0, 10]
#   a@9 (9 < wm) -> [0, 19], open again (19 > 12); x@25: RETRACT [0, 10], ON_TIME [0, 19]
def test_a_reopened_session_fires_again_with_a_retraction(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 0), ev("x", 12)])
    assert [(r.key, r.kind) for r in agg.get_result()] == [("a", Kind.ON_TIME)]
    stats = agg.add_message(ev("a", 9))
    assert stats.late == 0 and agg.get_result() == []
    agg.flush()  # the reopened session is persisted, then fires from the cache
    agg.add_message(ev("x", 25))
    results = [r for r in agg.get_result() if r.key == "a"]
    assert [(r.kind, r.window_start, r.window_end, r.update_seq) for r in results] == [
        (Kind.RETRACT, 0, 10 * S, 1),
        (Kind.ON_TIME, 0, 19 * S, 1),
    ]


def test_early_results_retract_when_the_session_grows(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(emit={"early": "2s", "late": "per_arrival"}))
    agg.add_message(ev("a", 1), wall_ms=100 * S)
    agg.timeout(100 * S)  # starts the early clock
    agg.timeout(102 * S)
    (early,) = agg.get_result()
    assert (early.kind, early.window_end, early.update_seq) == (Kind.EARLY, 11 * S, 0)
    agg.timeout(104 * S)
    assert agg.get_result() == []  # nothing changed
    agg.add_message(ev("a", 3), wall_ms=105 * S)
    agg.timeout(106 * S)
    retract, early2 = agg.get_result()
    assert (retract.kind, retract.window_end) == (Kind.RETRACT, 11 * S)
    assert (early2.kind, early2.window_end, early2.update_seq, early2.values["n"]) == (
        Kind.EARLY, 13 * S, 1, 2
    )  # fmt: skip
    agg.add_message(ev("x", 40), wall_ms=107 * S)
    (on_time,) = [r for r in agg.get_result() if r.key == "a"]
    assert (on_time.kind, on_time.update_seq) == (Kind.ON_TIME, 2)


# --------------------------------------------------------------------------- retention


def test_out_of_retention_events_go_to_errors(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(retention={"time": "20s"}))
    agg.add_message(ev("a", 100))  # watermark 100
    agg.add_message(ev("b", 65))  # its session would end at 75: 25 s before the watermark
    agg.add_message(ev("b", 71))  # ends at 81, within 20 s: kept (LATE)
    (err,) = agg.get_errors()
    assert err.code is ErrorCode.OUT_OF_RETENTION and err.offset == 1
    assert "out of retention" in err.reason
    # c: one long session [150, 222] (events 8 s apart), open at watermark 230
    agg.add_batch([ev("c", t) for t in range(150, 223, 8)] + [ev("x", 230)])
    # far behind (own end 165 <= 230 - 20) but inside the retained session's span: kept
    assert agg.add_message(ev("c", 155)).applied == 1 and agg.get_errors() == []
    # far behind and outside every retained session: it would move a session's start
    # back over time whose sessions may be forgotten already
    assert agg.add_message(ev("c", 145)).rejected == 1
    assert [e.code for e in agg.get_errors()] == [ErrorCode.OUT_OF_RETENTION]
    (w,) = agg.get_windows("c", 0, 300 * S)
    assert (w.window_start, w.window_end, w.values["n"]) == (150 * S, 232 * S, 11)


def test_expired_sessions_and_messages_are_deleted(tmp_path: Path) -> None:
    runtime = session_runtime(gap="5s", retention={"time": "30s"})
    agg = runtime.open_task(tmp_path)
    times = range(0, 300, 7)  # one session per event (7 s apart, gap 5 s)
    for t in times:
        agg.add_message(ev(f"k{t % 3}", t))
        agg.flush()
    starts = sorted(
        w.window_start // S for k in ("k0", "k1", "k2") for w in agg.get_windows(k, 0, 10**9)
    )
    # watermark 294: sessions ending after 294 - 30 are retained; ones ending two index
    # buckets (of 5 s, the gap) before that are gone
    assert [t for t in times if t + 5 > 294 - 30] == [t for t in starts if t + 5 > 294 - 30]
    assert min(starts) + 5 > 294 - 30 - 2 * 5
    meta = list(agg.store.scan(ColumnFamily.WINDOW_META, b"S", b"T"))
    assert len(meta) == len(starts)
    messages = list(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    assert len(messages) == len(starts)  # median keeps one message per event
    agg.close()


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


def test_merges_never_move_messages_or_rewrite_the_earliest_record(tmp_path: Path) -> None:
    runtime = session_runtime()
    agg = runtime.open_task(tmp_path)
    agg.add_batch([ev("a", 0), ev("a", 15), ev("a", 30)])
    agg.flush()
    messages = list(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    agg.add_message(ev("a", 8))  # merges [0], [15] into [0, 25]
    agg.add_message(ev("a", 22))  # and [30] in: one session [0, 40]
    batch = agg.flush()
    after = [m for m in agg.store.scan(ColumnFamily.MESSAGES, b"", None) if m not in messages]
    assert sorted(messages + after) == sorted(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    assert len(after) == 2  # only the two new events were written
    puts = [m.key for m in batch if m.cf is ColumnFamily.WINDOW_META and m.value is not None]
    session_puts = [k for k in puts if k[:1] == b"S"]
    assert len(session_puts) == 1  # the survivor, under its unchanged key
    (w,) = agg.get_windows("a", 0, 10**6)
    assert (w.window_start, w.window_end, w.values["n"], w.values["median"]) == (0, 40 * S, 5, 15.0)
    agg.close()


# --------------------------------------------------------------------------- property test


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskStore]:
    """One real RocksDB for many examples: opening and closing one costs ~0.2 s."""
    with TaskStore(tmp_path_factory.mktemp("sessions")) as s:
        yield s


def fresh(store: TaskStore) -> TaskStore:
    """Empty the store (every column family) for the next example."""
    batch = StoreBatch()
    for cf in ColumnFamily:
        batch.delete_range(cf, b"", b"\xff" * 16)
    store.commit(batch)
    return store


def reopen(runtime: JobRuntime, agg: SessionAggregator) -> SessionAggregator:
    """Snapshot and restore: commit everything, then a new operator reads it back."""
    agg.flush()
    restored: SessionAggregator = runtime.operator(agg.store)
    return restored


@dataclass(frozen=True)
class Ev:
    key: str
    ts: int
    partition: int
    offset: int
    v: float | None

    def record(self) -> dict[str, Any]:
        return {"k": self.key, "ts": self.ts, "v": self.v}


def _nn(evs: Sequence[Ev]) -> list[float]:
    return [e.v for e in evs if e.v is not None]


ORACLE: dict[str, Callable[[Sequence[Ev]], Any]] = {
    "n": len,
    "sum": lambda evs: float(sum(_nn(evs))) if _nn(evs) else None,
    "mean": lambda evs: statistics.fmean(_nn(evs)) if _nn(evs) else None,
    "min": lambda evs: min(_nn(evs)) if _nn(evs) else None,
    "max": lambda evs: max(_nn(evs)) if _nn(evs) else None,
    "median": lambda evs: statistics.median(_nn(evs)) if _nn(evs) else None,
    "vals": lambda evs: [e.v for e in sorted(evs, key=lambda e: (e.ts, e.partition, e.offset))],
}


def oracle_sessions(events: Sequence[Ev], gap: int) -> dict[Window, dict[str, Any]]:
    """Sort each key's events and split where consecutive times differ by more than gap."""
    out: dict[Window, dict[str, Any]] = {}
    for key in {e.key for e in events}:
        evs = sorted((e for e in events if e.key == key), key=lambda e: e.ts)
        run = [evs[0]]
        for e in [*evs[1:], None]:
            if e is not None and e.ts - run[-1].ts <= gap:
                run.append(e)
                continue
            out[(key, run[0].ts, run[-1].ts + gap)] = {n: f(run) for n, f in ORACLE.items()}
            if e is not None:
                run = [e]
    return out


def close(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@st.composite
def streams(draw: st.DrawFn, max_ts: int = 150 * S) -> list[Ev]:
    n = draw(st.integers(1, 50))
    out: list[Ev] = []
    next_off = [0, 0, 0]
    for _ in range(n):
        p = draw(st.integers(0, 2))
        out.append(
            Ev(
                draw(st.sampled_from("abc")),
                draw(st.integers(0, max_ts)),
                p,
                next_off[p],
                draw(st.one_of(st.none(), st.integers(-20, 20).map(float))),
            )
        )
        next_off[p] += 1
    return out


def feed(
    agg: SessionAggregator,
    events: Sequence[Ev],
    cuts: Sequence[int],
    one_by_one: bool,
    view: dict[Window, dict[str, Any]],
    seqs: dict[Window, list[int]],
    flush_always: bool = False,
    disjoint: bool = True,
) -> None:
    """Feed events one by one or in chunks (cut at ``cuts``), draining results each time.

    With ``flush_always`` every step is committed, so closed sessions are evicted and
    read back from RocksDB when late events touch them. ``disjoint``: check that the
    consumer's windows of a key never overlap (not so once sessions leave retention).
    """

    def drain() -> None:
        if flush_always:
            agg.flush()
        results = agg.get_result()
        for r in results:
            seqs.setdefault((r.key, r.window_start, r.window_end), []).append(r.update_seq)
        apply(view, results)
        if disjoint:
            assert_disjoint(view)

    if one_by_one:
        for e in events:
            agg.add_message(e.record(), partition=e.partition, offset=e.offset, wall_ms=e.ts)
            agg.timeout(e.ts)
            drain()
        return
    bounds = sorted({0, len(events), *[c % (len(events) + 1) for c in cuts]})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        chunk = events[lo:hi]
        agg.add_batch(
            EventBatch.from_columns(
                [e.key for e in chunk],
                [e.ts for e in chunk],
                numeric={"v": [math.nan if e.v is None else e.v for e in chunk]},
                partition=[e.partition for e in chunk],
                offset=[e.offset for e in chunk],
                wall_ms=[e.ts for e in chunk],
            )
        )
        agg.timeout(max(e.ts for e in chunk))
        drain()


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


# --------------------------------------------------------------------------- tuple sessions


def tuple_runtime(n: int, **overrides: Any) -> JobRuntime:
    return runtime_for(
        window={"type": "session", "max_idle_messages": n}, aggregations=AGGS, **overrides
    )


# max_idle_messages 2, one partition; offsets 0..7:
#
#   offset  0  1  2  3  4  5  6  7
#   key     a  b  b  a  x  x  a  x
#
# a: 0, then 3 (2 messages without a in between: 3 - 0 = 3 > 2) -> a new session;
# a@3 and a@6: 6 - 3 = 3 > 2 -> new sessions. b: 1, 2 -> one session [1, 3), ended
# once offset 4 (= 2 + 2) has been reached.
def test_tuple_sessions_end_after_n_messages_without_the_key(open_agg: OpenAgg) -> None:
    agg = open_agg(tuple_runtime(2))
    keys = "abbaxxax"
    emitted: list[tuple[int, str, int, int]] = []
    for off, k in enumerate(keys):
        agg.add_message({"k": k, "ts": 1000 - off, "v": off})  # event time is not used
        emitted += [(off, r.key, r.window_start, r.window_end) for r in agg.get_result()]
    assert all(r for r in emitted)
    assert emitted == [
        (2, "a", 0, 1),  # offset 2: a has been absent for 2 messages
        (4, "b", 1, 3),
        (5, "a", 3, 4),
    ]
    agg.timeout(END_OF_TIME)  # x: 4, 5, 7 (7 - 5 = 2) is still open, and so is a@6
    assert {(r.key, r.window_start, r.window_end) for r in agg.get_result()} == {
        ("a", 6, 7),
        ("x", 4, 8),
    }


def test_tuple_sessions_restore_and_rejected_records_count(tmp_path: Path) -> None:
    runtime = tuple_runtime(3)
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "ts": 0, "v": 1}, offset=10)
    agg.add_message({"k": "a", "ts": 0, "v": 2}, offset=12)
    agg.close()
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "v": 2}, offset=13)  # rejected (no timestamp): still a message
    assert [e.code for e in agg.get_errors()] == [ErrorCode.MISSING_TIMESTAMP]
    agg.add_message({"k": "b", "ts": 0, "v": 2}, offset=14)
    assert agg.get_result() == []
    agg.mark_consumed(0, 15)  # offset 15 = 12 + 3: a's session has ended
    (r,) = agg.get_result()
    assert (r.key, r.window_start, r.window_end, r.values["n"], r.values["median"]) == (
        "a", 10, 13, 2, 1.5
    )  # fmt: skip
    agg.flush()
    assert agg.get_windows("a", 0, 100) == []  # ended sessions are deleted
    assert [w.window_start for w in agg.get_windows("b", 0, 100)] == [14]
    agg.close()


@st.composite
def tuple_streams(draw: st.DrawFn) -> list[Ev]:
    n = draw(st.integers(1, 60))
    out: list[Ev] = []
    next_off = [0, 0]
    for _ in range(n):
        p = draw(st.integers(0, 1))
        next_off[p] += draw(st.sampled_from([1, 1, 1, 2]))  # some offsets are skipped
        key = draw(st.sampled_from("abc")) + str(p)
        out.append(Ev(key, draw(st.integers(0, 10**6)), p, next_off[p], float(len(out))))
    return out


def oracle_tuple_sessions(events: Sequence[Ev], n: int) -> dict[Window, dict[str, Any]]:
    runs: dict[tuple[str, int], list[list[Ev]]] = {}
    for e in events:  # arrival order = offset order within a partition
        sessions = runs.setdefault((e.key, e.partition), [])
        if sessions and e.offset - sessions[-1][-1].offset <= n:
            sessions[-1].append(e)
        else:
            sessions.append([e])
    return {
        (k, run[0].offset, run[-1].offset + 1): {name: f(run) for name, f in ORACLE.items()}
        for (k, _), sessions in runs.items()
        for run in sessions
    }


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

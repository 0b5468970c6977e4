"""Helpers of the session window tests: jobs, events, a consumer's view, naive oracles.

A consumer of session results keeps the latest record per ``(key, window_start,
window_end)`` and deletes on RETRACT (:func:`apply`); after the input ends its view must
equal the sessions of the sorted input (:func:`oracle_sessions`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from helpers import runtime_for
from hypothesis import strategies as st

from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.results import Kind, WindowResult
from window_operator.session import SessionAggregator

OpenAgg = Callable[..., SessionAggregator]
S = 1000
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


def tuple_runtime(n: int, **overrides: Any) -> JobRuntime:
    return runtime_for(
        window={"type": "session", "max_idle_messages": n}, aggregations=AGGS, **overrides
    )


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

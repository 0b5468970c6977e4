"""The session cache's memory budget: open sessions beyond it are spilled to the store
and read back to merge or fire; results are those of an unbounded cache (issue: churn).

Workload: 300 keys, 40 micro-batches of 2 s of event time, a tenth of the events up to
15 s late, gap 10 s, EARLY every 5 s, LATE per arrival; the bounded operator keeps about
40 open sessions in memory (of several hundred) and is restored halfway.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from churnkit import random_batches, side_by_side
from sessionkit import session_runtime

from stores.rocks import TaskStore
from window_operator.job import JobRuntime
from window_operator.session import SessionAggregator


def runtime() -> JobRuntime:
    return session_runtime(
        "10s",
        watermark={"allowed_lateness": "2s"},
        emit={"early": "5s", "late": "per_arrival"},
        retention={"time": "1m"},
    )


def open_agg(rt: JobRuntime, path: Path, budget_sessions: int | None) -> SessionAggregator:
    agg = rt.operator(TaskStore(path))
    assert isinstance(agg, SessionAggregator)
    if budget_sessions is not None:
        agg.sessions.max_bytes = budget_sessions * agg.sessions.slot_bytes
    return agg


def spilled_within_budget(agg: SessionAggregator) -> int:
    # sessions with an EARLY result due stay; the others keep to the budget
    open_now = agg.cache.open_slots()
    assert int((~agg.cache.slots.early[open_now]).sum()) <= 40
    return len(agg.sessions.spilled)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_small_budget_spills_and_changes_no_result(tmp_path: Path, seed: int) -> None:
    rt = runtime()
    spilled = side_by_side(
        open_agg(rt, tmp_path / "free", None),
        lambda: open_agg(rt, tmp_path / "tight", 40),
        random_batches(seed, keys=300, per_batch=150),
        spilled_within_budget,
    )
    assert spilled > 0


def test_live_state_counts_the_spilled_sessions_too(tmp_path: Path) -> None:
    """The live-state gauges of a bounded operator equal an unbounded one's after every
    flush (and after a restore), while open sessions live in the store only."""
    rt = runtime()
    free = open_agg(rt, tmp_path / "free", None)

    def same_live_state(tight: SessionAggregator) -> int:
        assert tight.live_state() == free.live_state()
        return int(len(tight.sessions.spilled) > 0)

    batches = random_batches(3, keys=300, per_batch=150)
    tight = lambda: open_agg(rt, tmp_path / "tight", 40)  # noqa: E731
    assert side_by_side(free, tight, batches, same_live_state) > 10

"""The session cache's memory budget: open sessions beyond it are spilled to the store
and read back to merge or fire; results are those of an unbounded cache (issue: churn).

Workload: 300 keys, 40 micro-batches of 2 s of event time, a tenth of the events up to
15 s late, gap 10 s, EARLY every 5 s, LATE per arrival; the bounded operator keeps about
40 open sessions in memory (of several hundred) and is restored halfway.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sessionkit import session_runtime

from stores.rocks import TaskStore
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.policies import END_OF_TIME
from window_operator.results import WindowResult
from window_operator.session import SessionAggregator

S = 1000
Row = tuple[str, str, int, int, int, str]


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


def batches(seed: int) -> list[EventBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(40):
        n = 150
        keys = [f"k{int(i)}" for i in rng.integers(0, 300, n)]
        ts = b * 2 * S + rng.integers(0, 2 * S, n)
        late = rng.random(n) < 0.1
        ts = np.where(late, ts - rng.integers(0, 15 * S, n), ts)
        out.append(
            EventBatch.from_columns(keys, ts, numeric={"v": rng.random(n)}, wall_ms=ts)
        )
    return out


def rows(results: list[WindowResult]) -> list[Row]:
    return [
        (r.kind.value, r.key, r.window_start, r.window_end, r.update_seq, repr(r.values))
        for r in results
    ]


def step(agg: SessionAggregator, batch: EventBatch) -> list[Row]:
    agg.add_batch(batch)
    agg.timeout(int(batch.ts.max()))
    out = rows(agg.get_result())
    agg.flush()
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_a_small_budget_spills_and_changes_no_result(tmp_path: Path, seed: int) -> None:
    rt = runtime()
    free = open_agg(rt, tmp_path / "free", None)
    tight = open_agg(rt, tmp_path / "tight", 40)
    spilled = 0
    try:
        for b, batch in enumerate(batches(seed)):
            assert step(tight, batch) == step(free, batch), f"batch {b}"
            spilled += len(tight.sessions.spilled)
            # sessions with an EARLY result due stay; the others keep to the budget
            open_now = tight.cache.open_slots()
            assert int((~tight.cache.slots.early[open_now]).sum()) <= 40
            if b == 20:
                tight.close()
                tight = open_agg(rt, tmp_path / "tight", 40)
        free.timeout(END_OF_TIME)
        tight.timeout(END_OF_TIME)
        assert rows(tight.get_result()) == rows(free.get_result())
        assert spilled > 0
    finally:
        free.close()
        tight.close()

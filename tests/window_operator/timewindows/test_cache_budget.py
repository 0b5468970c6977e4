"""The frame store's memory budget: open frames beyond it are spilled to the store and
read back to merge, fire or emit EARLY; results are those of an unbounded cache (issue:
churn).

Workload: 400 keys, 40 micro-batches of 2 s of event time, a tenth of the events up to
15 s late, hopping 30 s / 10 s windows with a full-state median, EARLY every 5 s, LATE
per arrival; the bounded operator keeps about 50 open frames in memory (of over a
thousand) and is restored halfway.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import runtime_for

from stores.rocks import TaskStore
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.policies import END_OF_TIME
from window_operator.results import WindowResult
from window_operator.timewindows import WindowedAggregator

S = 1000
Row = tuple[str, str, int, int, int, str]


def runtime() -> JobRuntime:
    return runtime_for(
        window={"type": "hopping", "size": "30s", "step": "10s"},
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "mean", "op": "mean", "field": "v"},
            {"name": "median", "op": "median", "field": "v"},
        ],
        watermark={"allowed_lateness": "2s"},
        emit={"early": "5s", "late": "per_arrival"},
        retention={"time": "1m"},
    )


def open_agg(rt: JobRuntime, path: Path, budget_frames: int | None) -> WindowedAggregator:
    agg = rt.operator(TaskStore(path))
    assert isinstance(agg, WindowedAggregator)
    if budget_frames is not None:
        agg.frames.max_bytes = budget_frames * agg.frames.slot_bytes
    return agg


def batches(seed: int) -> list[EventBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(40):
        n = 200
        keys = [f"k{int(i)}" for i in rng.integers(0, 400, n)]
        ts = b * 2 * S + rng.integers(0, 2 * S, n)
        late = rng.random(n) < 0.1
        ts = np.where(late, ts - rng.integers(0, 15 * S, n), ts)
        out.append(
            EventBatch.from_columns(keys, ts, numeric={"v": rng.random(n)}, wall_ms=ts)
        )
    return out


def rows(results: list[WindowResult]) -> list[Row]:
    return sorted(
        (r.kind.value, r.key, r.window_start, r.window_end, r.update_seq, repr(r.values))
        for r in results
    )


def step(agg: WindowedAggregator, batch: EventBatch) -> list[Row]:
    agg.add_batch(batch)
    agg.timeout(int(batch.ts.max()))
    out = rows(agg.get_result())
    agg.flush()
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_a_small_budget_spills_and_changes_no_result(tmp_path: Path, seed: int) -> None:
    rt = runtime()
    free = open_agg(rt, tmp_path / "free", None)
    tight = open_agg(rt, tmp_path / "tight", 50)
    spills = 0
    try:
        for b, batch in enumerate(batches(seed)):
            # within a step, results are in key id order, which a spill may change
            assert step(tight, batch) == step(free, batch), f"batch {b}"
            frames = tight.frames
            open_from = tight.trigger.evictable_before(tight.watermark)
            assert frames.open_bytes(open_from) <= frames.max_bytes  # type: ignore[operator]
            spills += frames.spilled_upto is not None
            if b == 20:
                tight.close()
                tight = open_agg(rt, tmp_path / "tight", 50)
        free.timeout(END_OF_TIME)
        tight.timeout(END_OF_TIME)
        assert rows(tight.get_result()) == rows(free.get_result())
        assert spills > 10
    finally:
        free.close()
        tight.close()

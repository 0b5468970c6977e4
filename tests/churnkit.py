"""Helpers of the churn tests (keys that come and go, memory budgets): event batches and
a comparable form of results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME
from window_operator.results import WindowResult

S = 1000
#: A result as compared between two runs: kind, key, bounds, update_seq, values (repr).
Row = tuple[str, str, int, int, int, str]


def three_each(keys: list[str], t0: int) -> EventBatch:
    """Three events per key at ``t0``, ``t0 + 1 s``, ``t0 + 2 s`` (value 1, wall clock =
    event time; offsets: the next ones of partition 0)."""
    ks = [k for k in keys for _ in range(3)]
    ts = np.array([t0 + (i % 3) * S for i in range(len(ks))], dtype=np.int64)
    return EventBatch.from_columns(ks, ts, numeric={"v": np.ones(len(ks))}, wall_ms=ts)


def random_batches(seed: int, keys: int, per_batch: int, count: int = 40) -> list[EventBatch]:
    """``count`` batches of 2 s of event time each over ``keys`` keys, a tenth of the
    events up to 15 s late (wall clock = event time)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        names = [f"k{int(i)}" for i in rng.integers(0, keys, per_batch)]
        ts = b * 2 * S + rng.integers(0, 2 * S, per_batch)
        late = rng.random(per_batch) < 0.1
        ts = np.where(late, ts - rng.integers(0, 15 * S, per_batch), ts)
        v = rng.random(per_batch)
        out.append(EventBatch.from_columns(names, ts, numeric={"v": v}, wall_ms=ts))
    return out


def rows(results: Sequence[WindowResult]) -> list[Row]:
    """Results in a comparable form, in emission order."""
    return [
        (r.kind.value, r.key, r.window_start, r.window_end, r.update_seq, repr(r.values))
        for r in results
    ]


def side_by_side(
    free: Any,
    reopen_tight: Callable[[], Any],
    batches: Sequence[EventBatch],
    check: Callable[[Any], int],
    *,
    restore_at: int = 20,
) -> int:
    """Feed an operator with an unbounded cache and one with a small budget (restored
    from its store after batch ``restore_at``) the same batches, as a task runs them
    (add, timers, results, flush), then end the input: every step's results must be the
    same (in key order: within a step, results follow key ids, which a spill changes).
    ``check`` runs on the bounded one after every flush; returns the sum of its answers.
    """
    tight = reopen_tight()
    total = 0
    try:
        for b, batch in enumerate(batches):
            assert _step(tight, batch) == _step(free, batch), f"batch {b}"
            total += check(tight)
            if b == restore_at:
                tight.close()
                tight = reopen_tight()
        free.timeout(END_OF_TIME)
        tight.timeout(END_OF_TIME)
        assert sorted(rows(tight.get_result())) == sorted(rows(free.get_result()))
    finally:
        free.close()
        tight.close()
    return total


def _step(op: Any, batch: EventBatch) -> list[Row]:
    op.add_batch(batch)
    op.timeout(int(batch.ts.max()))
    out = sorted(rows(op.get_result()))
    op.flush()
    return out

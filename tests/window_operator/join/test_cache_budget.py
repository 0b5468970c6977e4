"""The join's message caches keep to ``state.cache_mb``: beyond it the oldest cached
messages are dropped (they are in the store) and probes read them back; results are
those of unbounded caches (issue: churn).

Workload: 20 join keys, 6 micro-batches of 300 orders and 300 shipments with 2 KiB
records, 20 s of event time each, RANGE 5 minutes, so shipments join orders of earlier
batches; a 1 MiB budget holds about 250 messages per input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
from joinkit import join_runtime

from window_operator.join import LEFT, RIGHT, JoinKind, JoinOperator, JoinRows

S = 1000


def batch(rng: np.random.Generator, b: int, side: int) -> JoinRows:
    keys = [f"k{int(i)}" for i in rng.integers(0, 20, 300)]
    ts = np.sort(b * 20 * S + rng.integers(0, 20 * S, 300))
    recs = [orjson.dumps({"k": k, "pad": "x" * 2048}) for k in keys]
    return JoinRows.from_columns(keys, ts, recs, source=side)


def run(op: JoinOperator, check: Callable[[JoinOperator], None]) -> list[tuple[int, int, str]]:
    rng = np.random.default_rng(3)
    out: list[tuple[int, int, str]] = []
    for b in range(6):
        for side in (LEFT, RIGHT):
            op.add_batch(batch(rng, b, side))
        out += [
            (int(r.left_ts or 0), int(r.right_ts or 0), str(r.key))
            for r in op.get_result()
            if r.kind is JoinKind.MATCH
        ]
        op.flush()
        check(op)
    return sorted(out)


def test_the_caches_keep_to_the_budget_and_results_do_not_change(
    open_join: Callable[..., JoinOperator],
) -> None:
    rt = join_runtime({"range": "5m"}, retention="1h")
    sizes: list[int] = []

    def within_budget(op: JoinOperator) -> None:
        for cache in op.matcher.caches:
            sizes.append(len(cache))
            assert len(cache) * (2048 + 88) <= 1 << 20

    expected = run(open_join(rt, "free", cache_mb=1024), lambda op: None)
    got = run(open_join(rt, "tight", cache_mb=1), within_budget)
    assert got == expected
    assert len(expected) > 20_000 and max(sizes) > 100

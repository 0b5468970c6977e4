"""Helpers of the count / offsets window tests: jobs, the operator, result summaries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import runtime_for

from stores.rocks import TaskStore
from window_operator.config import CountWindow
from window_operator.count_windows import CountWindowAggregator
from window_operator.job import JobRuntime
from window_operator.results import WindowResult

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

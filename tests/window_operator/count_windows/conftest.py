"""The ``op`` fixture: count / offsets window operators on temp dirs, closed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from countkit import open_op

from window_operator.count_windows import CountWindowAggregator
from window_operator.job import JobRuntime

OpenOp = Callable[..., CountWindowAggregator]


@pytest.fixture
def op(tmp_path: Path) -> Iterator[OpenOp]:
    """Open operators under tmp_path (same name = same state dir)."""
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

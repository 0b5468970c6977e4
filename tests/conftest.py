"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from window_operator.aggregator import WindowedAggregator
from window_operator.job import JobRuntime


@pytest.fixture
def open_agg(tmp_path: Path) -> Iterator[Callable[..., WindowedAggregator]]:
    """Open aggregators under tmp_path (closed at teardown); same name = same state dir."""
    opened: list[WindowedAggregator] = []

    def _open(
        runtime: JobRuntime, name: str = "a", use_deduct: bool | None = None
    ) -> WindowedAggregator:
        agg = runtime.open_task(tmp_path / name, use_deduct=use_deduct)
        opened.append(agg)
        return agg

    yield _open
    for agg in opened:
        agg.close()

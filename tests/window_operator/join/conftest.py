"""Fixtures of the join tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from window_operator.join import JoinOperator, JoinRuntime


@pytest.fixture
def open_join(tmp_path: Path) -> Iterator[Callable[..., JoinOperator]]:
    """Open join operators under tmp_path (closed at teardown); same name = same state."""
    opened: list[JoinOperator] = []

    def _open(runtime: JoinRuntime, name: str = "a", **options: int) -> JoinOperator:
        op = runtime.open_task(tmp_path / name, **options)
        opened.append(op)
        return op

    yield _open
    for op in opened:
        op.close()

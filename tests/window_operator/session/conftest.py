"""Fixtures of the session window tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stores.rocks import TaskStore


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskStore]:
    """One real RocksDB for many examples: opening and closing one costs ~0.2 s."""
    with TaskStore(tmp_path_factory.mktemp("sessions")) as s:
        yield s

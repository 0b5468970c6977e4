"""Queries of a task's local store (the seed's query API, for ``inspect``)."""

from __future__ import annotations

from typing import Any

from stores.rocks import ColumnFamily, TaskStore
from window_operator.kernel import CHECKPOINT_KEY
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = ["stored_windows"]


def stored_windows(settings: TaskSettings, task: int, key: str, start: int, end: int) -> list[Any]:
    """The stored windows of ``key`` overlapping ``[start, end)`` in a task's local store."""
    path = settings.task_path(task)
    if not path.exists():
        return []
    store = TaskStore(path)
    try:
        if store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None:
            return []
        windows: list[Any] = plan_for(settings).operator(store).get_windows(key, start, end)
        return windows
    finally:
        store.close()

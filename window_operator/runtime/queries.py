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


def parse_join_key(text: str, fields: int) -> Any:
    """A join key given on the command line: JSON (``3``, ``"a"``, ``[1, "x"]``) or text."""
    import orjson

    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text
    if fields > 1 and isinstance(value, list):
        return tuple(value)
    if isinstance(value, bool | float | dict | list | type(None)):
        return text
    return value


def stored_messages(settings: TaskSettings, task: int, key: str, start: int, end: int) -> list[Any]:
    """The stored messages of join key ``key`` with event time in ``[start, end)``."""
    from window_operator.config import JoinJobConfig
    from window_operator.join import JoinOperator

    config = settings.config
    assert isinstance(config, JoinJobConfig)
    path = settings.task_path(task)
    if not path.exists():
        return []
    store = TaskStore(path)
    try:
        if store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None:
            return []
        op = plan_for(settings).operator(store)
        assert isinstance(op, JoinOperator)
        join_key = parse_join_key(key, len(config.join.on))
        out: list[Any] = []
        for side in (config.join.left.name, config.join.right.name):
            out += op.get_messages(side, start, -(2**63), end - 1, 2**63 - 1, [join_key])
        return out
    finally:
        store.close()

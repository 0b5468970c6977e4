"""Queries of a task's local store (the seed's query API, for ``inspect``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stores.rocks import ColumnFamily, TaskStore
from window_operator.kernel import CHECKPOINT_KEY, WindowOperator
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = ["parse_join_key", "stored_messages", "stored_windows"]


@contextmanager
def _stored_operator(
    settings: TaskSettings, task: int
) -> Iterator[WindowOperator[Any, Any, Any] | None]:
    """The task's operator over its local store, or ``None`` when it holds no state yet."""
    path = settings.task_path(task)
    if not path.exists():
        yield None
        return
    store = TaskStore(path)
    try:
        if store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None:
            yield None
        else:
            yield plan_for(settings).operator(store)
    finally:
        store.close()


def stored_windows(settings: TaskSettings, task: int, key: str, start: int, end: int) -> list[Any]:
    """The stored windows of ``key`` overlapping ``[start, end)`` in a task's local store."""
    with _stored_operator(settings, task) as op:
        return [] if op is None else list(op.get_windows(key, start, end))


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
    with _stored_operator(settings, task) as op:
        if op is None:
            return []
        assert isinstance(op, JoinOperator)
        join_key = parse_join_key(key, len(config.join.on))
        out: list[Any] = []
        for side in (config.join.left.name, config.join.right.name):
            out += op.get_messages(side, start, -(2**63), end - 1, 2**63 - 1, [join_key])
        return out

"""Queries of a task's local store (the seed's query API, for ``inspect``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from stores.rocks import ColumnFamily, TaskStore
from window_operator.join.common import JoinKey
from window_operator.join.results import JoinMessage
from window_operator.kernel import CHECKPOINT_KEY, StoredWindow
from window_operator.runtime.plans import AggregationPlan, plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = ["parse_join_key", "stored_messages", "stored_windows"]

P = TypeVar("P")


@contextmanager
def _stored_state(settings: TaskSettings, task: int) -> Iterator[TaskStore | None]:
    """The task's local store, or ``None`` when it holds no state yet.

    Read only, so that a running job's task (which keeps its store open) is no obstacle:
    the answer is the state of the last batch that task committed.
    """
    try:
        store = TaskStore(settings.task_path(task), read_only=True)
    except FileNotFoundError:
        yield None
        return
    try:
        yield None if store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None else store
    finally:
        store.close()


def _plan(settings: TaskSettings, kind: type[P], what: str) -> P:
    """The job's plan, which must be of ``kind`` (the kind of job that stores ``what``)."""
    plan = plan_for(settings)
    if not isinstance(plan, kind):
        raise TypeError(f"job {settings.job!r} stores no {what}")
    return plan


def stored_windows(
    settings: TaskSettings, task: int, key: str, start: int, end: int
) -> list[StoredWindow]:
    """The stored windows of ``key`` overlapping ``[start, end)`` in a task's local store."""
    plan = _plan(settings, AggregationPlan, "windows")
    with _stored_state(settings, task) as store:
        return [] if store is None else list(plan.operator(store).get_windows(key, start, end))


def parse_join_key(text: str, on: Sequence[str]) -> JoinKey:
    """A join key given on the command line: JSON (``3``, ``"a"``, ``[1, "x"]``) or text.

    A key of the fields ``on`` may also be written as ``inspect`` prints it (a list of
    its values, ``[3]``) or as ``read`` prints a result's key (an object of them,
    ``{"id": 3}``).
    """
    import orjson

    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if isinstance(value, dict) and set(value) == set(on):
        value = [value[f] for f in on]
    if isinstance(value, list) and len(value) == len(on):
        if len(on) != 1:  # several fields, or none (a cross join's one key, [])
            return tuple(value)
        value = value[0]
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return text  # a number with a fraction, true/false, null, an object or array: as text


def stored_messages(
    settings: TaskSettings, task: int, key: str, start: int, end: int
) -> list[JoinMessage]:
    """The stored messages of join key ``key`` with event time in ``[start, end)``."""
    from window_operator.runtime.join_plan import JoinPlan

    plan = _plan(settings, JoinPlan, "messages")
    with _stored_state(settings, task) as store:
        if store is None:
            return []
        op = plan.runtime.operator(store)
        on = plan.runtime.config.join.on
        join_key = parse_join_key(key, on)
        if isinstance(join_key, tuple) != (len(on) != 1):  # another number of fields
            return []
        out: list[JoinMessage] = []
        for side in (plan.runtime.config.join.left.name, plan.runtime.config.join.right.name):
            out += op.get_messages(side, start, -(2**63), end - 1, 2**63 - 1, [join_key])
        return out

"""Step 2 of a task's batch, against Kafka: what the state applied is still there, and
what it lacks is read back (the rules are :mod:`~window_operator.runtime.gaps`'s)."""

from __future__ import annotations

import logging
from typing import TypeVar

import numpy as np

from window_operator.kafka_range import KafkaSourceError, log_ends
from window_operator.kernel import ClockState, InputPosition, WindowOperator
from window_operator.results import ErrorRecord
from window_operator.runtime.exchange import Rows, TaskInput, to_ipc
from window_operator.runtime.gaps import (
    InputGapError,
    LostBatch,
    applied_past,
    between,
    check_kept,
    find_gaps,
    lost_batches,
)
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.lookup import read_input
from window_operator.runtime.plan import JobPlan
from window_operator.runtime.routing import error_lane
from window_operator.runtime.settings import TaskSettings

__all__ = ["check_still_kept", "lost_inputs"]

log = logging.getLogger(__name__)

B = TypeVar("B")
R = TypeVar("R")


def check_still_kept(
    settings: TaskSettings, task: int, offsets: dict[InputPosition, int], inp: TaskInput
) -> None:
    """A partition whose range the state applied whole (a replay) must still hold the
    offsets it applied (see :func:`~window_operator.runtime.gaps.check_kept`)."""
    if ahead := applied_past(offsets, inp):
        partitions = sorted({(r.topic, r.partition) for r in ahead})
        ends = log_ends(settings.consumer_config(), partitions, settings.broker_timeout_s)
        check_kept(task, offsets, ahead, ends)


def lost_inputs(
    settings: TaskSettings,
    plan: JobPlan[B, R],
    task: int,
    op: WindowOperator[B, R, object],
    inp: TaskInput,
) -> list[TaskInput]:
    """The batches the state of ``task`` lacks before ``inp`` starts, read back from
    Kafka (see :mod:`~window_operator.runtime.gaps`), oldest first."""
    gaps = find_gaps(task, settings.changelog_topic, op.offsets, inp)
    if not gaps:
        return []
    text = ", ".join(f"{g.topic}[{g.partition}] {g.start}..{g.end - 1}" for g in gaps)
    lost = lost_batches(gaps, inp)
    log.warning(
        "task %d: state behind %s, re-reading %s (%d lost batch(es), each run again "
        "with its clock)",
        task,
        inp.label,
        text,
        len(lost),
    )
    read: dict[InputPosition, InputRecords] = {}
    for g in gaps:
        try:
            read[g.position] = read_input(
                settings.consumer_config(),
                g.topic,
                g.partition,
                g.start,
                g.end,
                timeout_s=settings.broker_timeout_s,
            )
        except KafkaSourceError as exc:
            raise InputGapError(
                f"task {task}: its state ends before {inp.label} starts and "
                f"the input it lacks is gone from Kafka ({text}: {exc}); restart from a "
                "Spark checkpoint that matches the changelog, or accept the loss by "
                "restoring the state from scratch"
            ) from exc
    before = op.clock_state()
    return [_rerun(settings, plan, task, inp, b, read, before) for b in lost]


def _rerun(
    settings: TaskSettings,
    plan: JobPlan[B, R],
    task: int,
    inp: TaskInput,
    lost: LostBatch,
    read: dict[InputPosition, InputRecords],
    left_with: ClockState,
) -> TaskInput:
    """A lost batch's input: its rows of ``task`` and, in its error lane, errors."""
    rows: list[Rows] = []
    errors: list[ErrorRecord] = []
    for r in lost.ranges:
        decoded = plan.decode(r.source, between(read[r.position], r.start, r.end))
        tasks = plan.route(decoded.batch, settings.tasks)
        mine = np.flatnonzero(tasks == task)
        if len(mine):
            rows.append(Rows(r.source, to_ipc(plan.to_arrow(decoded.batch, mine))))
        if error_lane(r.partition, settings.tasks) == task:
            errors += decoded.errors
    errors.sort(key=lambda e: (e.topic or "", e.partition or 0, e.offset or 0))
    before = left_with if lost.clock_before is None else lost.clock_before
    ranges = list(lost.ranges)
    after = lost.clock_after
    return TaskInput(task, lost.batch_id, before, after, rows, errors, ranges, inp.origin)

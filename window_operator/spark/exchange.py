"""The keyed exchange of a micro-batch: map side, Spark's shuffle, state tasks.

One Spark job per micro-batch, never through the driver:

* **map side** (one Spark task per input partition range): read the range from Kafka,
  decode it, route every row to its state task (a stable hash of the operator's key),
  send each task its rows as Arrow, the range's rejected records to the task of its
  error lane, and a report of the range to every task and to the driver;
* **exchange**: Spark's shuffle, partitioned exactly by state task id (plus one partition
  that hands the map reports back to the driver);
* **reduce side** (one Spark task per state task): fold the job clock after the batch
  from the reports, then run the state task (:class:`TaskRunner`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.kernel import ClockState
from window_operator.kernel.clock import fold_clock
from window_operator.results import ErrorRecord
from window_operator.runtime.exchange import (
    InputRange,
    MapReport,
    Rejected,
    Rows,
    TaskInput,
    to_ipc,
)
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plan import JobPlan
from window_operator.runtime.plans import plan_for
from window_operator.runtime.routing import task_of_partitions
from window_operator.runtime.runner import TaskReport, TaskRunner
from window_operator.runtime.settings import TaskSettings

__all__ = ["BatchContext", "error_lane", "map_side", "reduce_side", "timer_pass"]

Shuffled = tuple[int, Rows | Rejected | MapReport]


@dataclass(frozen=True)
class BatchContext:
    """What every Spark task of a micro-batch gets from the driver (small, picklable)."""

    settings: TaskSettings
    batch_id: int
    clock: ClockState

    @property
    def tasks(self) -> int:
        """The number of state tasks."""
        return self.settings.tasks

    def clock_after(self, reports: Iterable[MapReport]) -> ClockState:
        """The job clock after the batch (the same in every task and on the driver)."""
        cfg = self.settings.config
        return fold_clock(
            self.clock,
            [r.activity() for r in reports],
            self.clock.now,
            sources=len(plan_for(self.settings).sources),
            allowed_lateness=cfg.watermark.allowed_lateness,
            idle_timeout=cfg.watermark.idle_timeout,
        )


def error_lane(partition: int, tasks: int) -> int:
    """The state task that sends the rejected records of an input partition."""
    return int(task_of_partitions(np.array([partition]), tasks)[0])


def _records(settings: TaskSettings, row: Any) -> tuple[InputRange | None, InputRecords]:
    from window_operator.spark.kafka_source import read_range

    topic, partition = str(row["topic"]), int(row["partition"])
    start, until = int(row["start_offset"]), int(row["until_offset"])
    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    for msgs in read_range(
        topic,
        partition,
        start,
        until,
        settings.consumer_config(),
        poll_timeout_ms=int(settings.broker_timeout_s * 1000),
    ):
        for m in msgs:
            offsets.append(m.offset())
            keys.append(m.key())
            values.append(m.value())
            kind, ts = m.timestamp()
            stamps.append(ts if kind else -1)
    records = InputRecords(topic, partition, offsets, keys, values, stamps)
    first = offsets[0] if start < 0 and offsets else start
    if first < 0:
        return None, records  # an empty range read from "earliest": nothing to mark
    return InputRange(0, topic, partition, first, until), records


def _source_index(plan: JobPlan[Any, Any], topic: str) -> int:
    for s in plan.sources:
        if s.topic == topic:
            return s.index
    raise ValueError(f"topic {topic!r} is not an input of job {plan.job!r}")


def map_side(ctx: BatchContext, rows: Iterable[Any]) -> Iterator[Shuffled]:
    """The map side of a batch (``mapPartitions`` over offset-range rows)."""
    plan = plan_for(ctx.settings)
    n = ctx.tasks
    for row in rows:
        t0 = time.perf_counter()
        rng, records = _records(ctx.settings, row)
        if rng is None:
            continue
        source = _source_index(plan, rng.topic)
        rng = InputRange(source, rng.topic, rng.partition, rng.start, rng.end)
        decoded = plan.decode(source, records)
        yield from _routed_rows(plan, source, decoded.batch, n)
        if decoded.errors:
            yield error_lane(rng.partition, n), Rejected(tuple(decoded.errors))
        codes = Counter(e.code.value for e in decoded.errors)
        report = MapReport(rng, len(records), decoded.max_ts, dict(codes), time.perf_counter() - t0)
        for t in range(n + 1):
            yield t, report


def _routed_rows(plan: JobPlan[Any, Any], source: int, batch: Any, n: int) -> Iterator[Shuffled]:
    tasks = plan.route(batch, n)
    if not len(tasks):
        return
    order = np.argsort(tasks, kind="stable")
    sorted_tasks = tasks[order]
    bounds = np.flatnonzero(np.diff(sorted_tasks)) + 1
    for idx in np.split(order, bounds):
        t = int(tasks[idx[0]])
        yield t, Rows(source, to_ipc(plan.to_arrow(batch, idx)))


def reduce_side(ctx: BatchContext, index: int, pairs: Iterable[Shuffled]) -> Iterator[Any]:
    """The state task ``index`` of a batch (``mapPartitionsWithIndex`` after the shuffle)."""
    rows: list[Rows] = []
    errors: list[ErrorRecord] = []
    reports: list[MapReport] = []
    for _, item in pairs:
        if isinstance(item, Rows):
            rows.append(item)
        elif isinstance(item, Rejected):
            errors.extend(item.errors)
        else:
            reports.append(item)
    if index == ctx.tasks:
        yield from reports  # the driver's copy of the map reports
        return
    reports.sort(key=lambda r: (r.range.source, r.range.partition))
    inp = TaskInput(
        task=index,
        batch_id=ctx.batch_id,
        clock_before=ctx.clock,
        clock_after=ctx.clock_after(reports),
        rows=rows,
        errors=sorted(errors, key=lambda e: (e.partition or 0, e.offset or 0)),
        ranges=[r.range for r in reports],
    )
    yield _run(ctx.settings, index, inp)


def timer_pass(ctx: BatchContext, index: int, _rows: Iterable[Any]) -> Iterator[TaskReport]:
    """A timer-only pass of state task ``index`` (no input; the clock at the driver's now)."""
    inp = TaskInput(
        task=index, batch_id=ctx.batch_id, clock_before=ctx.clock, clock_after=ctx.clock
    )
    yield _run(ctx.settings, index, inp)


def _run(settings: TaskSettings, task: int, inp: TaskInput) -> TaskReport:
    return TaskRunner(settings, plan_for(settings), task).run(inp)

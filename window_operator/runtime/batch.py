"""A micro-batch through the keyed exchange, independent of how it is executed.

* :func:`map_range`: one input partition range, decoded and routed: every state task
  gets its rows (Arrow), the range's rejected records go to the task of its error lane,
  and every task and the driver get the range's :class:`MapReport`;
* :func:`reduce_task`: a state task's share (its rows, errors and every report), run by
  :class:`TaskRunner` with the job clock of the batch and the one folded from the reports.

The Spark job runs them as the two stages of one Spark job with Spark's shuffle in
between (:mod:`window_operator.spark.exchange`); :class:`LocalJob` runs them in one
process (tests, tools).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from window_operator.kernel import ClockState, InputPosition
from window_operator.kernel.clock import fold_clock
from window_operator.results import ErrorRecord
from window_operator.runtime.exchange import (
    BatchStart,
    InputRange,
    MapReport,
    Rejected,
    Rows,
    TaskInput,
    to_ipc,
)
from window_operator.runtime.faults import trace
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plan import JobPlan
from window_operator.runtime.plans import AggregationPlan, Plan, plan_for
from window_operator.runtime.report import TaskReport
from window_operator.runtime.routing import error_lane
from window_operator.runtime.runner import TaskRunner
from window_operator.runtime.settings import TaskSettings

__all__ = [
    "HISTORY",
    "BatchContext",
    "LocalBatch",
    "LocalJob",
    "RangeSplit",
    "Shuffled",
    "map_range",
    "note_ends",
    "note_origin",
    "reduce_task",
    "run_task",
    "split_range",
    "starts_after",
    "timer_input",
]

B = TypeVar("B")
R = TypeVar("R")

Shuffled = tuple[int, Rows | Rejected | MapReport]
"""A map-side output: the state task it goes to, and what (``tasks``: the driver)."""

#: How many earlier batches a batch tells its tasks of (:attr:`BatchContext.history`).
#: A broker loses about its last second of writes, a batch or two.
HISTORY = 16


@dataclass(frozen=True)
class BatchContext:
    """What every task of a micro-batch gets from the driver (small, picklable)."""

    settings: TaskSettings
    batch_id: int
    clock: ClockState
    #: the job's first offset of every input partition read before this batch (None:
    #: not known, see :func:`note_origin`)
    origin: Mapping[InputPosition, int] | None = field(default_factory=dict)
    #: every input partition's last range read before (a timer pass checks the state
    #: against their ends: the broker may have lost the last batch)
    ends: tuple[InputRange, ...] = ()
    #: how the most recent batches before this one began, oldest first (a task whose
    #: state lost some runs each one again with its own clock)
    history: tuple[BatchStart, ...] = ()
    #: the run ends after this pass: batched LATE updates go out (see TaskInput.final)
    final: bool = False

    @property
    def tasks(self) -> int:
        """The number of state tasks."""
        return self.settings.tasks

    def clock_after(self, reports: Iterable[MapReport]) -> ClockState:
        """The job clock after the batch (the same in every task and on the driver)."""
        return advance_clock(self.settings, self.clock, reports, self.clock.now)


def advance_clock(
    settings: TaskSettings,
    clock: ClockState,
    reports: Iterable[MapReport],
    now: int,
    *,
    active: Iterable[InputPosition] = (),
    unread: Collection[InputPosition] | None = None,
) -> ClockState:
    """``clock`` plus the reports' activity, at wall clock ``now``; ``active``: partitions
    active at ``now`` too, bringing no event time (records waiting, or about to be read);
    ``unread``: partitions with no event time and records waiting (see :func:`fold_clock`)."""
    cfg = settings.config
    return fold_clock(
        clock,
        [r.activity() for r in reports],
        now,
        sources=len(plan_for(settings).sources),
        allowed_lateness=cfg.watermark.allowed_lateness,
        idle_timeout=cfg.watermark.idle_timeout,
        active=active,
        unread=unread,
    )


def note_origin(
    origin: Mapping[InputPosition, int] | None, reports: Iterable[MapReport], batch_id: int
) -> dict[InputPosition, int] | None:
    """``origin`` with the start of every range of an input partition it did not name.

    Kept from a job's first batch on (empty until a batch reads something: Spark may run
    an empty first batch). ``None``: not known, for a job that reached later batches
    without an origin (its checkpoint predates the origin): where it began is not
    known, so a task of it that lost its state whole stops with ``InputGapError``
    instead of reading back from a wrong place.
    """
    if origin is None and batch_id > 0:
        return None
    out = dict(origin or {})
    for r in sorted(reports, key=lambda r: r.range.start):
        out.setdefault(r.range.position, r.range.start)
    return out


def _copy(origin: Mapping[InputPosition, int] | None) -> dict[InputPosition, int] | None:
    return None if origin is None else dict(origin)


def note_ends(
    ends: Mapping[InputPosition, InputRange], reports: Iterable[MapReport]
) -> dict[InputPosition, InputRange]:
    """``ends`` with the last range of every input partition in ``reports``."""
    out = dict(ends)
    for r in reports:
        held = out.get(r.range.position)
        if held is None or r.range.end > held.end:
            out[r.range.position] = r.range
    return out


def starts_after(ends: Mapping[InputPosition, InputRange]) -> dict[InputPosition, int]:
    """Where the next batch begins reading every partition read so far (``ends``: their
    last ranges): the :attr:`BatchStart.starts` of that batch."""
    return {p: r.end for p, r in ends.items()}


def source_indexes(plan: Plan, topic: str) -> list[int]:
    """The inputs a topic feeds (both inputs of a self-join)."""
    found = [s.index for s in plan.sources if s.topic == topic]
    if not found:
        raise ValueError(f"topic {topic!r} is not an input of job {plan.job!r}")
    return found


@dataclass(frozen=True, slots=True)
class RangeSplit:
    """One input range decoded and split by state task (see :func:`split_range`).

    ``rows``: every state task's rows (tasks without rows are left out); ``errors``: the
    range's rejected records, for the task ``lane`` (the range's error lane); ``report``:
    what every task and the driver get.
    """

    rows: dict[int, Rows]
    errors: tuple[ErrorRecord, ...]
    lane: int
    report: MapReport


def split_range(
    settings: TaskSettings, rng: InputRange, records: InputRecords, read_seconds: float = 0.0
) -> RangeSplit:
    """Decode a range and split it by state task.

    ``read_seconds`` (how long reading ``records`` took) goes into the report.
    """
    t0 = time.perf_counter()
    plan = plan_for(settings)
    # one call per kind of plan: each is generic in its own row type
    if isinstance(plan, AggregationPlan):
        rows, errors, max_ts = _split(plan, settings.tasks, rng, records)
    else:
        rows, errors, max_ts = _split(plan, settings.tasks, rng, records)
    codes = Counter(e.code.value for e in errors)
    report = MapReport(
        rng, len(records), max_ts, dict(codes), time.perf_counter() - t0, read_seconds
    )
    return RangeSplit(rows, tuple(errors), error_lane(rng.partition, settings.tasks), report)


def map_range(
    ctx: BatchContext, rng: InputRange, records: InputRecords, read_seconds: float = 0.0
) -> Iterator[Shuffled]:
    """The map side of one range (see module doc); ``ctx.tasks`` gets the driver's report."""
    trace("map", -1, ctx.batch_id, f"{rng.topic}[{rng.partition}]")
    split = split_range(ctx.settings, rng, records, read_seconds)
    yield from split.rows.items()
    if split.errors:
        yield split.lane, Rejected(split.errors)
    for t in range(ctx.tasks + 1):
        yield t, split.report


def _split(
    plan: JobPlan[B, R], n: int, rng: InputRange, records: InputRecords
) -> tuple[dict[int, Rows], list[ErrorRecord], int | None]:
    """Decode a range; every task's rows, the rejected records and the largest event time."""
    decoded = plan.decode(rng.source, records)
    tasks = plan.route(decoded.batch, n)
    rows: dict[int, Rows] = {}
    if len(tasks):
        order = np.argsort(tasks, kind="stable")
        for idx in np.split(order, np.flatnonzero(np.diff(tasks[order])) + 1):
            data = to_ipc(plan.to_arrow(decoded.batch, idx))
            rows[int(tasks[idx[0]])] = Rows(rng.source, data)
    return rows, decoded.errors, decoded.max_ts


def reduce_task(ctx: BatchContext, index: int, items: Iterable[Shuffled]) -> TaskReport:
    """State task ``index`` of a batch, from everything the map side sent it."""
    rows: list[Rows] = []
    errors: list[ErrorRecord] = []
    reports: list[MapReport] = []
    for _, item in items:
        if isinstance(item, Rows):
            rows.append(item)
        elif isinstance(item, Rejected):
            errors.extend(item.errors)
        else:
            reports.append(item)
    reports.sort(key=lambda r: (r.range.source, r.range.partition, r.range.start))
    inp = TaskInput(
        task=index,
        batch_id=ctx.batch_id,
        clock_before=ctx.clock,
        clock_after=ctx.clock_after(reports),
        rows=rows,
        errors=sorted(errors, key=lambda e: (e.topic or "", e.partition or 0, e.offset or 0)),
        ranges=[r.range for r in reports],
        origin=_copy(ctx.origin),
        history=ctx.history,
    )
    return run_task(ctx.settings, index, inp)


def run_task(settings: TaskSettings, task: int, inp: TaskInput) -> TaskReport:
    """Run state task ``task`` on ``inp`` with the job's plan (:class:`TaskRunner`)."""
    plan = plan_for(settings)
    # one call per kind of plan: the runner is generic in the plan's row and result types
    if isinstance(plan, AggregationPlan):
        return TaskRunner(settings, plan, task).run(inp)
    return TaskRunner(settings, plan, task).run(inp)


def timer_input(ctx: BatchContext, index: int) -> TaskInput:
    """A timer-only pass of a state task: no input, the clock at the driver's now.

    Its ranges are empty ones at the end of every partition's last range: a state that
    lost the last batch (the broker lost its transaction) reads it back here, even when
    no batch follows.
    """
    return TaskInput(
        task=index,
        batch_id=ctx.batch_id,
        clock_before=ctx.clock,
        clock_after=ctx.clock,
        ranges=[r.span(r.end, r.end) for r in ctx.ends],
        origin=_copy(ctx.origin),
        history=ctx.history,
        final=ctx.final,
    )


@dataclass
class LocalBatch:
    """What :meth:`LocalJob.run_batch` did."""

    tasks: list[TaskReport]
    ranges: list[MapReport]
    clock: ClockState


class LocalJob:
    """The streaming job's batch path in one process: map side, exchange, every task.

    Batches are given as input records (as a Kafka range read gives them); the clock
    and the input's origin are kept the way the Spark driver keeps them (without the log).
    """

    def __init__(self, settings: TaskSettings) -> None:
        self.settings = settings
        self.clock = ClockState()
        self.batch_id = 0
        self.origin: dict[InputPosition, int] | None = None
        self.ends: dict[InputPosition, InputRange] = {}
        self.history: tuple[BatchStart, ...] = ()

    def run_batch(self, inputs: Sequence[InputRecords], now_ms: int) -> LocalBatch:
        """One micro-batch of ``inputs`` (each one input partition's range) at ``now_ms``."""
        plan = plan_for(self.settings)
        read = [  # partitions with records are not idle now, whatever they brought before
            InputPosition(source, r.partition)
            for r in inputs
            if len(r)
            for source in source_indexes(plan, r.topic)
        ]
        before = advance_clock(self.settings, self.clock, [], now_ms, active=read)
        ctx = BatchContext(self.settings, self.batch_id, before, self.origin, history=self.history)
        shuffled: dict[int, list[Shuffled]] = {t: [] for t in range(ctx.tasks + 1)}
        for records in inputs:
            if not len(records):
                continue
            for source in source_indexes(plan, records.topic):
                start, end = records.offsets[0], records.offsets[-1] + 1
                rng = InputRange(source, records.topic, records.partition, start, end)
                for task, item in map_range(ctx, rng, records):
                    shuffled[task].append((task, item))
        reports = [r for _, r in shuffled[ctx.tasks] if isinstance(r, MapReport)]
        tasks = [reduce_task(ctx, t, shuffled[t]) for t in range(ctx.tasks)]
        self.note_batch(before, reports)
        return LocalBatch(tasks, reports, self.clock)

    def note_batch(self, clock: ClockState, reports: Sequence[MapReport]) -> None:
        """Keep what the driver keeps of a batch that ran with ``clock``."""
        start = BatchStart(self.batch_id, clock, starts_after(self.ends))
        self.history = (*self.history, start)[-HISTORY:]
        self.clock = advance_clock(self.settings, clock, reports, clock.now)
        self.origin = note_origin(self.origin, reports, self.batch_id)
        self.ends = note_ends(self.ends, reports)
        self.batch_id += 1

    def tick(self, now_ms: int) -> list[TaskReport]:
        """A timer-only pass over every task at ``now_ms``."""
        self.clock = advance_clock(self.settings, self.clock, [], now_ms)
        ends = tuple(self.ends.values())
        ctx = BatchContext(self.settings, -1, self.clock, self.origin, ends, self.history)
        return [run_task(self.settings, t, timer_input(ctx, t)) for t in range(ctx.tasks)]

"""The keyed exchange of a micro-batch on Spark: map side, Spark's shuffle, state tasks.

One Spark job per micro-batch, never through the driver (see
:mod:`window_operator.runtime.batch` for what each side does):

* **map side**: one Spark task per offset range row of the source; it reads exactly
  ``[start, until)`` of its Kafka partition here, on the executor;
* **exchange**: Spark's shuffle, partitioned exactly by state task id, plus one more
  partition that hands the map reports back to the driver;
* **reduce side**: one Spark task per state task.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from window_operator.runtime import lookup
from window_operator.runtime.batch import (
    BatchContext,
    Shuffled,
    map_range,
    reduce_task,
    run_task,
    source_index,
    timer_input,
)
from window_operator.runtime.exchange import InputRange, MapReport
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plans import plan_for
from window_operator.runtime.report import TaskReport
from window_operator.runtime.settings import TaskSettings

if TYPE_CHECKING:
    from pyspark.sql import Row

__all__ = ["map_side", "read_input", "reduce_side", "timer_pass"]


def read_input(settings: TaskSettings, row: Row) -> tuple[InputRange | None, InputRecords]:
    """The records of one offset range row (``None`` range: nothing was read)."""
    topic, partition = str(row["topic"]), int(row["partition"])
    start, until = int(row["start_offset"]), int(row["until_offset"])
    records = lookup.read_input(
        settings.consumer_config(), topic, partition, start, until,
        timeout_s=settings.broker_timeout_s,
    )  # fmt: skip
    first = records.offsets[0] if start < 0 and len(records) else start
    if first < 0:
        return None, records  # an empty range read from "earliest": nothing to mark
    source = source_index(plan_for(settings), topic)
    return InputRange(source, topic, partition, first, until), records


def map_side(ctx: BatchContext, rows: Iterable[Row]) -> Iterator[Shuffled]:
    """``mapPartitions`` body over the source's offset-range rows."""
    for row in rows:
        t0 = time.perf_counter()
        rng, records = read_input(ctx.settings, row)
        if rng is not None:
            yield from map_range(ctx, rng, records, time.perf_counter() - t0)


def reduce_side(
    ctx: BatchContext, index: int, items: Iterable[Shuffled]
) -> Iterator[TaskReport | MapReport]:
    """``mapPartitionsWithIndex`` body after the shuffle: a state task, or the reports."""
    if index == ctx.tasks:
        yield from (item for _, item in items if isinstance(item, MapReport))
        return
    yield reduce_task(ctx, index, items)


def timer_pass(ctx: BatchContext, index: int, _rows: Iterable[object]) -> Iterator[TaskReport]:
    """A timer-only pass of state task ``index`` (``mapPartitionsWithIndex`` body)."""
    yield run_task(ctx.settings, index, timer_input(ctx, index))

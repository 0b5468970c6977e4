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

from window_operator.observe.logs import worker_logging
from window_operator.runtime import lookup
from window_operator.runtime.batch import (
    BatchContext,
    Shuffled,
    map_range,
    reduce_task,
    run_task,
    source_indexes,
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


def read_input(settings: TaskSettings, row: Row) -> tuple[list[InputRange], InputRecords]:
    """The records of one offset range row, and the range as each input it feeds reads
    it (both inputs of a self-join; none: nothing was read)."""
    topic, partition = str(row["topic"]), int(row["partition"])
    start, until = int(row["start_offset"]), int(row["until_offset"])
    records = lookup.read_input(
        settings.consumer_config(), topic, partition, start, until,
        timeout_s=settings.broker_timeout_s,
    )  # fmt: skip
    first = records.offsets[0] if start < 0 and len(records) else start
    if first < 0:
        return [], records  # an empty range read from "earliest": nothing to mark
    sources = source_indexes(plan_for(settings), topic)
    return [InputRange(s, topic, partition, first, until) for s in sources], records


def map_side(ctx: BatchContext, rows: Iterable[Row]) -> Iterator[Shuffled]:
    """``mapPartitions`` body over the source's offset-range rows."""
    worker_logging()
    for row in rows:
        t0 = time.perf_counter()
        ranges, records = read_input(ctx.settings, row)
        read_seconds = time.perf_counter() - t0
        for rng in ranges:
            yield from map_range(ctx, rng, records, read_seconds)
            read_seconds = 0.0  # read once


def reduce_side(
    ctx: BatchContext, index: int, items: Iterable[Shuffled]
) -> Iterator[TaskReport | MapReport]:
    """``mapPartitionsWithIndex`` body after the shuffle: a state task, or the reports."""
    worker_logging()
    if index == ctx.tasks:
        yield from (item for _, item in items if isinstance(item, MapReport))
        return
    yield reduce_task(ctx, index, items)


def timer_pass(ctx: BatchContext, index: int, _rows: Iterable[object]) -> Iterator[TaskReport]:
    """A timer-only pass of state task ``index`` (``mapPartitionsWithIndex`` body)."""
    worker_logging()
    yield run_task(ctx.settings, index, timer_input(ctx, index))

"""``type: offsets``: the time-window aggregator on the offset axis of one partition.

The window key is the start offset (a multiple of ``step``) and a window covers offsets
``[start, start + size)`` of one input partition. Offsets act as event time with zero
lateness: a window fires ON_TIME once the partition delivered an offset ``>= start +
size`` (an event, or a record handled outside: rejected), or at the end of input.
Offsets of one partition only grow, so nothing is late and a window is never needed
after it fired. Windows start at offset 0 or later (a hopping window reaching below 0
would only repeat part of the window at 0). Results name the partition.

One operator covers **one** partition: the partition's offsets are the engine's
event-time axis, with one watermark, which a second partition's offsets would mean
nothing to; a record of a second partition raises :class:`OffsetsPartitionError` (the
Spark job runs one state task per partition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import VectorOp
from window_operator.aggset import AggregationSet
from window_operator.arrays import distinct
from window_operator.config import OffsetsWindow
from window_operator.errors import IncompatibleStateError, JobSetupError
from window_operator.events import EventBatch
from window_operator.kernel import (
    LiveState,
    OperatorKernel,
    StepStats,
    StoredWindow,
)
from window_operator.policies import EmitPolicy, LateMode
from window_operator.results import ResultBatch
from window_operator.timewindows import WindowedAggregator
from window_operator.windows import TimeWindowing

__all__ = ["OffsetWindows", "OffsetsPartitionError"]

#: Numeric column that carries the event time into the time-window engine (its ``ts``
#: is the offset there); the NUL keeps it apart from any input field.
EVENT_TIME = "\x00event_time"


class OffsetsPartitionError(JobSetupError, ValueError):
    """An offsets-window operator received records of a second input partition."""


class OffsetWindows:
    """A task's offsets windows: a :class:`WindowedAggregator` over offsets (see module doc)."""

    def __init__(
        self,
        window: OffsetsWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        use_deduct: bool | None,
        inputs: Sequence[str] = (),
    ) -> None:
        # Offsets of one partition only grow: no lateness, nothing late, and a window
        # is never needed after it fired.
        inner_policy = EmitPolicy(
            early_period=policy.early_period,
            late_mode=LateMode.OFF,
            retention=0,
            max_future=policy.max_future,
        )
        try:
            self.inner = WindowedAggregator(
                windowing=TimeWindowing(window.size, window.step),
                aggregations=event_time_as_x(aggregations),
                policy=inner_policy,
                store=store,
                use_deduct=use_deduct,
                inputs=inputs,
            )
        except IncompatibleStateError as exc:
            raise IncompatibleStateError(
                f"offsets windows (kept as time windows of size {window.size} and step "
                f"{window.step} over offsets) cannot continue this state: {exc}"
            ) from exc
        parts = sorted(pos.partition for pos in self.inner.offsets)
        if len(parts) > 1:
            raise IncompatibleStateError(
                f"the state in {store.path} holds partitions {parts}; offsets windows "
                "hold exactly one (was it written by another window type?)"
            )
        self._partition: int | None = parts[0] if parts else None

    @property
    def kernel(self) -> OperatorKernel[ResultBatch]:
        """The kernel of the time-window engine (positions, outputs, checkpoint)."""
        return self.inner.kernel

    def check_partition(self, partition: int) -> None:
        """Take the partition of the first record; refuse any other."""
        self._claim([partition])

    def _claim(self, partitions: Sequence[int]) -> None:
        """Take the partition of the first record; refuse any other (before any change)."""
        held = self._partition if self._partition is not None else partitions[0]
        other = [p for p in partitions if p != held]
        if other:
            raise OffsetsPartitionError(
                f"offsets windows cover one input partition: this operator holds partition "
                f"{held} and got records of partition {other[0]}. A job runs one state task "
                "per partition (state.tasks at least the input's partition count, fixed "
                "when the job first starts)"
            )
        self._partition = held

    def add_batch(self, batch: EventBatch) -> StepStats:
        """Re-time the batch by offset and hand it to the window engine."""
        if not len(batch):
            return StepStats()
        self._claim(distinct(batch.partition))
        off = self.kernel.positions.assign(0, batch.partition, batch.offset)
        numeric = dict(batch.numeric)
        numeric[EVENT_TIME] = batch.ts.astype(np.float64)
        return self.inner.add_batch(
            EventBatch(
                keys=batch.keys,
                ts=off,
                partition=batch.partition,
                offset=off,
                numeric=numeric,
                objects=batch.objects,
                wall_ms=batch.wall_ms,
            )
        )

    def note_handled(self) -> None:
        """A record of the partition was handled outside (rejected): it is an offset the
        partition delivered, so the windows ending at or before it fire."""
        if self._partition is not None:
            self.inner.observe(self._partition, self.kernel.positions.get(0, self._partition))

    def timeout(self, now_ms: int) -> None:
        """EARLY timers; ``END_OF_TIME`` fires the remaining windows."""
        self.inner.timeout(now_ms)

    def end_batch(self) -> None:
        """The windows the batch's offsets passed fire (held back while it ran)."""
        self.inner.end_batch()

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results (windows starting at offset >= 0), each naming
        the partition whose offsets bound it."""
        out = []
        for batch in map(from_offset_zero, self.inner.take_result_batches()):
            if len(batch):
                assert self._partition is not None  # a result needs a record
                batch.partition = np.full(len(batch), self._partition, dtype=np.int64)
                out.append(batch)
        return out

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Frames and checkpoint in one batch; fired windows expire."""
        return self.inner.flush(commit=commit)

    def live_state(self) -> LiveState:
        """Keys with a window that has not fired yet, and those windows (from offset 0:
        the windows before it are never emitted)."""
        return self.inner.live_state(first_start=0)

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` overlapping offsets ``[start, end)`` (of the partition
        this operator holds)."""
        return [
            replace(w, partition=self._partition)
            for w in self.inner.get_windows(key, start, end)
            if w.window_start >= 0
        ]


def event_time_as_x(aggs: AggregationSet) -> AggregationSet:
    """The same aggregations reading the event time from :data:`EVENT_TIME` as ``x``.

    The offsets engine puts the offset in the ``ts`` column; two-input operations
    without an ``x`` field must still see the event time.
    """
    return AggregationSet(
        [
            replace(a, x_field=EVENT_TIME)
            if isinstance(a.op, VectorOp) and a.x_field is None
            else a
            for a in aggs.aggregations
        ]
    )


def from_offset_zero(batch: ResultBatch) -> ResultBatch:
    """Drop hopping windows that start before offset 0.

    Offsets start at 0, so such a window only repeats part of the window at 0, and an
    offset window's key (its start offset) should be an offset.
    """
    keep = batch.window_start >= 0
    if keep.all():
        return batch
    return batch.take(np.flatnonzero(keep).tolist())

"""The count / offsets window operator of a task, over one of two engines.

``window.type: count`` runs :class:`KeyCountWindows` (windows over each key's message
sequence), ``offsets`` runs :class:`OffsetWindows` (windows over one partition's
offsets). The engines take decoded :class:`EventBatch` es and hold only what differs
between the shapes; :class:`CountWindowAggregator` is the
:class:`~window_operator.kernel.WindowOperator` the runners talk to: the job's decoder
(records in, rejected records to the error output), the seed's single-record API, and
progress, outputs and the store through the engine's kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggset import AggregationSet
from window_operator.config import CountWindow, OffsetsWindow
from window_operator.count_windows.offsets import OffsetWindows
from window_operator.count_windows.per_key import KeyCountWindows
from window_operator.events import DecodedEvent, EventBatch, RecordDecoder
from window_operator.kernel import (
    ClockState,
    LiveState,
    OperatorKernel,
    StepStats,
    StoredWindow,
    WindowOperator,
)
from window_operator.kernel.kernel import Decoded
from window_operator.kernel.shell import EventOperator, changes, queries, query_bounds, timer
from window_operator.policies import EmitPolicy
from window_operator.results import ResultBatch

__all__ = ["CountWindowAggregator"]

Records = Sequence[Mapping[str, object]]
"""Input records in the job's input schema (decoded with the job's decoder)."""


class _Engine(Protocol):
    """What differs between the two window shapes; the operator does the rest via the kernel."""

    @property
    def kernel(self) -> OperatorKernel[ResultBatch]:
        """Store, positions, clock, outputs and checkpoint of the engine."""
        ...

    def check_partition(self, partition: int) -> None:
        """Raise before any change if the engine cannot take records of ``partition``."""
        ...

    def add_batch(self, batch: EventBatch) -> StepStats:
        """Add decoded events; replays are no-ops."""
        ...

    def note_handled(self) -> None:
        """A record was handled without reaching a key (rejected, or marked consumed)."""
        ...

    def timeout(self, now_ms: int) -> None:
        """EARLY results; ``END_OF_TIME`` emits what is still open."""
        ...

    def end_batch(self) -> None:
        """End a micro-batch of several ``add_batch`` calls (see ``begin_batch``)."""
        ...

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results."""
        ...

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """State and checkpoint in one batch (committed unless ``commit=False``)."""
        ...

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` overlapping ``[start, end)``."""
        ...

    def live_state(self) -> LiveState:
        """Keys with an open window holding messages, and those windows."""
        ...


class CountWindowAggregator(EventOperator):
    """A task's ``count`` or ``offsets`` window aggregation over RocksDB.

    ``use_deduct``: ``True`` slides hopping windows by deduct (Jet), ``False`` combines
    every frame, ``None`` picks per call whichever is cheaper (deductible operations
    only).
    """

    def __init__(
        self,
        *,
        window: CountWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
        use_deduct: bool | None = None,
        inputs: Sequence[str] = (),
    ) -> None:
        aggregations.check_deduct(use_deduct)
        self.window = window
        self.aggs = aggregations
        self.decoder = decoder
        self.engine: _Engine
        if isinstance(window, OffsetsWindow):
            self.engine = OffsetWindows(window, aggregations, policy, store, use_deduct, inputs)
        else:
            self.engine = KeyCountWindows(window, aggregations, policy, store, use_deduct, inputs)
        self.kernel = self.engine.kernel

    def live_state(self) -> LiveState:
        """Keys with an open window holding messages, and those windows (read-only; all
        open windows are in memory)."""
        return self.engine.live_state()

    # ------------------------------------------------------------------ input

    @changes
    def add_batch(self, batch: EventBatch | Records) -> StepStats:
        """Add many messages (columns, or records decoded with the job's decoder).

        Records take the next offsets of partition 0; rejected records take none.
        """
        if isinstance(batch, EventBatch):
            self.aggs.check_batch(batch)
            return self.engine.add_batch(batch)
        records = list(batch)
        decoded = self._records_decoder(records).decode_records(records)
        self.engine.kernel.outputs.errors.extend(decoded.errors)
        return self.engine.add_batch(decoded.batch) + StepStats(rejected=len(decoded.errors))

    def _add_decoded(self, got: Decoded[DecodedEvent], wall_ms: int | None) -> StepStats:
        """One record: a batch of one."""
        return self.engine.add_batch(
            _one_event(got.value, got.position.partition, got.offset, wall_ms)
        )

    def _claim_partition(self, partition: int) -> None:
        """Offsets windows take the records of one partition only."""
        self.engine.check_partition(partition)

    def _counted_without_key(self) -> None:
        """A rejected record is an offset its partition delivered: offsets windows it
        passes fire (count windows count a key's messages only)."""
        self.engine.note_handled()

    @changes
    def end_batch(self) -> None:
        """End a micro-batch: offsets windows fire those its offsets passed (nothing
        fires on event time here: see :meth:`adopt_clock`)."""
        self.engine.end_batch()

    def clock_state(self) -> ClockState:
        """The job's clock as these windows keep it: the wall clock alone. Count windows
        keep no event time, and offsets windows keep their partition's offsets on the
        kernel's event-time axis, which is not the job's (long-running workers seeded
        with it reported offsets as times, 1970, after a switch from micro-batches)."""
        return ClockState(now=self.engine.kernel.clock.now)

    @changes
    def adopt_clock(self, state: ClockState) -> None:
        """Take the job's wall clock (EARLY timers) and nothing else.

        Count windows fire on message counts and offsets windows on their partition's
        offsets, never on event time: the watermark stays on the operator's own axis
        and nothing fires here.
        """
        self.engine.kernel.clock.note_now(state.now)

    @timer
    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies; ``END_OF_TIME`` ends the input."""
        self.engine.timeout(now_ms)

    # ------------------------------------------------------------------ output

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results in columnar form."""
        return self.engine.take_result_batches()

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; return the writes.

        With ``commit=False`` the writes are returned but not applied (the caller logs
        and commits them); if it cannot, it must discard this operator and reopen.
        """
        return self.engine.flush(commit=commit)

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        self.engine.kernel.close(self.flush)

    @queries
    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` overlapping ``[start, end)`` (message indices or offsets)."""
        self._check_key(key)
        start, end = query_bounds(start=start, end=end)
        return self.engine.get_windows(key, start, end)


def _one_event(event: DecodedEvent, partition: int, offset: int, wall_ms: int | None) -> EventBatch:
    """A batch holding one decoded record."""
    return EventBatch(
        keys=[event.key],
        ts=np.array([event.ts], dtype=np.int64),
        partition=np.array([partition], dtype=np.int64),
        offset=np.array([offset], dtype=np.int64),
        numeric={f: np.array([v], dtype=np.float64) for f, v in event.numeric.items()},
        objects={f: [v] for f, v in event.objects.items()},
        wall_ms=None if wall_ms is None else np.array([wall_ms], dtype=np.int64),
    )


if TYPE_CHECKING:
    # mypy proves that the operator satisfies the protocol every runner talks to
    def _satisfies(
        op: CountWindowAggregator,
    ) -> WindowOperator[EventBatch | Records, ResultBatch, StoredWindow]:
        return op

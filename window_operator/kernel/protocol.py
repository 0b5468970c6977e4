"""The contract of every operator of a task, typed by what goes in and comes out.

The task runner, ``simulate`` and the Spark driver talk to operators only through
:class:`WindowOperator`, so every kind (time windows, sessions, count / offset windows,
the join with its two inputs) runs through one interface. ``B`` is the decoded input
batch type, ``R`` the result batch type and ``W`` what the query API returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from stores.rocks import StoreBatch, TaskStore
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.clock import ClockState
from window_operator.kernel.positions import InputPosition
from window_operator.kernel.records import StepStats
from window_operator.results import ErrorRecord

__all__ = ["StoredWindow", "WindowOperator"]

B_contra = TypeVar("B_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)
W_co = TypeVar("W_co", covariant=True)


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A window as currently stored (the query API's answer); ``partition`` names the
    input partition of a window bounded by offsets (``None`` for every other window)."""

    key: str
    window_start: int
    window_end: int
    values: dict[str, object]
    fired: bool
    partition: int | None = None


class WindowOperator(Protocol[B_contra, R_co, W_co]):
    """A task's stateful operator over one RocksDB store."""

    @property
    def store(self) -> TaskStore:
        """The task's store."""
        ...

    @property
    def state_shape(self) -> Mapping[str, JsonValue]:
        """The layout of the state it keeps: a store written with another is refused."""
        ...

    @property
    def watermark(self) -> int:
        """The operator's watermark (never decreasing)."""
        ...

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per input partition (the replay boundary)."""
        ...

    @property
    def batches(self) -> int:
        """How many flushes the store has seen (the changelog batch number)."""
        ...

    def add_batch(self, batch: B_contra) -> StepStats:
        """Add decoded records; replays are no-ops."""
        ...

    def begin_batch(self) -> None:
        """Start a micro-batch of several ``add_batch`` calls, all decided with the
        watermark as it stands now."""
        ...

    def end_batch(self) -> None:
        """End the micro-batch: the watermark moves with its rows."""
        ...

    def mark_consumed(self, partition: int, offset: int, *, source: int = 0) -> None:
        """Record that ``offset`` was handled outside the operator (e.g. rejected)."""
        ...

    def clock_state(self) -> ClockState:
        """The event-time clock as it stands (restored: as the last flush left it)."""
        ...

    def adopt_clock(self, state: ClockState) -> None:
        """Take the event-time clock of the whole job; fire what its watermark passed."""
        ...

    def timeout(self, now_ms: int) -> None:
        """Run wall-clock policies; ``END_OF_TIME`` ends the input."""
        ...

    @property
    def late_pending(self) -> bool:
        """Whether LATE updates wait for the end of a running ``emit.late`` period."""
        ...

    def end_late_period(self) -> None:
        """The next :meth:`timeout` sends the batched LATE updates (the run stops)."""
        ...

    def take_result_batches(self) -> Sequence[R_co]:
        """Hand over pending results (columnar)."""
        ...

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over rejected records."""
        ...

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint in one batch (committed unless ``commit=False``)."""
        ...

    def close(self) -> None:
        """Flush and close the store."""
        ...

    def get_windows(self, key: str, start: int, end: int) -> Sequence[W_co]:
        """The stored windows of ``key`` overlapping ``[start, end)`` (the seed's query API)."""
        ...

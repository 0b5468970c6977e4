"""The contract every window operator of a task fulfils (aggregators of every window shape).

The task runner, ``simulate`` and the Spark driver talk to operators only through
this protocol, so a new window shape is a new operator class and a line in
:mod:`window_operator.job`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from stores.rocks import StoreBatch, TaskStore
from window_operator.events import EventBatch
from window_operator.results import ErrorRecord, ResultBatch, WindowResult

__all__ = ["WindowOperator"]


class WindowOperator(Protocol):
    """A task's stateful operator over one RocksDB store (see ``WindowedAggregator``)."""

    store: TaskStore

    @property
    def watermark(self) -> int:
        """The operator's watermark (never decreasing)."""
        ...

    @property
    def offsets(self) -> dict[int, int]:
        """Last applied offset per input partition (the replay boundary)."""
        ...

    @property
    def batches(self) -> int:
        """How many flushes the store has seen (the changelog batch number)."""
        ...

    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> Any:
        """Add many messages; replays are no-ops; returns step statistics."""
        ...

    def add_message(
        self,
        message: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> Any:
        """Add one record (a batch of one)."""
        ...

    def mark_consumed(self, partition: int, offset: int) -> None:
        """Record that ``offset`` was handled outside the operator (e.g. rejected)."""
        ...

    def timeout(self, now_ms: int) -> None:
        """Run wall-clock policies; ``END_OF_TIME`` ends the input."""
        ...

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over pending results (columnar)."""
        ...

    def get_result(self) -> list[WindowResult]:
        """Hand over pending results."""
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

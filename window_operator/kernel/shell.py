"""What every operator forwards to its kernel: its store, clock, positions and outputs.

The operators (time windows, sessions, count windows, the join) subclass
:class:`KernelForwarding` for these and keep only their own logic.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from stores.rocks import TaskStore
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.clock import ClockState
from window_operator.kernel.kernel import OperatorKernel
from window_operator.kernel.positions import InputPosition
from window_operator.results import ErrorRecord

__all__ = ["KernelForwarding", "ResultColumns"]

T = TypeVar("T")


class ResultColumns(Protocol[T]):
    """A batch of results in columnar form."""

    def to_results(self) -> list[T]:
        """The batch as one result object per row."""
        ...


B = TypeVar("B", bound=ResultColumns[Any])


class KernelForwarding(Generic[B, T]):
    """The operator API that is the kernel's: a subclass sets :attr:`kernel`.

    ``B`` is the operator's result batch, ``T`` one result.
    """

    kernel: OperatorKernel[B]

    @property
    def store(self) -> TaskStore:
        """The task's RocksDB store."""
        return self.kernel.store

    @property
    def watermark(self) -> int:
        """The operator's watermark (never decreasing; see the operator for its axis)."""
        return self.kernel.watermark

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per ``(source index, partition)``."""
        return self.kernel.offsets

    @property
    def batches(self) -> int:
        """How many flushes the store has seen (the changelog batch number)."""
        return self.kernel.batches

    @property
    def now(self) -> int:
        """The latest wall clock seen (messages and ``timeout``)."""
        return self.kernel.clock.now

    def clock_state(self) -> ClockState:
        """The event-time clock as it stands (restored: as the last flush left it)."""
        return self.kernel.clock.state()

    def adopt_clock(self, state: ClockState) -> None:
        """Take the clock of the whole job (Spark driver) and fire what it passed."""
        self._advance_watermark(self.kernel.clock.adopt(state))

    def _advance_watermark(self, candidate: int) -> None:
        """Move the watermark to ``candidate`` if that is further; fire what it passed."""
        raise NotImplementedError

    def _restore(self) -> None:
        """Restore the kernel from the store's checkpoint; the operator's own fields
        go to :meth:`_restore_fields` (nothing to restore: a fresh operator)."""
        fields = self.kernel.restore()
        if fields is not None:
            self._restore_fields(fields)

    def _restore_fields(self, fields: dict[str, JsonValue]) -> None:
        """Take the operator's own checkpoint fields (see :meth:`_restore`)."""
        raise NotImplementedError

    def take_result_batches(self) -> list[B]:
        """Hand over the pending results in columnar form, in emission order."""
        return self.kernel.outputs.take_results()

    def get_result(self) -> list[T]:
        """Hand over (and forget) every result produced so far."""
        return [r for b in self.take_result_batches() for r in b.to_results()]

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        return self.kernel.outputs.take_errors()

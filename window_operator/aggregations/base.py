"""The aggregate-operation contract: create / accumulate / combine / deduct / finish.

Two families share one contract so that frames can be pre-aggregated and then
combined into windows (the Jet frame technique):

* :class:`VectorOp` keeps a fixed-width ``float64`` accumulator row. Every primitive
  works on a 2-D array of rows at once, so a batch of events is pre-aggregated per
  (key, frame) with NumPy and whole windows are combined column-wise. The empty
  accumulator is :meth:`VectorOp.identity`. A scalar ``accumulate_one`` serves the
  one-by-one path.
* :class:`ObjectOp` keeps an arbitrary Python accumulator (a set, a list, a tuple)
  with a byte serialization. Full-state operations (median, percentile) are object
  operations whose accumulator is the list of the values themselves; the aggregator
  persists those values in the Message Store instead of inside the frame record.

Values reaching an operation are already decoded: numeric operations receive
``float`` (``NaN`` stands for JSON ``null`` and is ignored, as SQL aggregates ignore
nulls); object operations receive the JSON value as decoded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.errors import WindowOperatorError

__all__ = [
    "AggregateOp",
    "ColumnInputs",
    "NotDeductibleError",
    "ObjectOp",
    "Ordering",
    "VectorOp",
]


class NotDeductibleError(WindowOperatorError, TypeError):
    """Raised when ``deduct`` is called on an operation that has no inverse of combine."""


@dataclass(frozen=True, slots=True)
class Ordering:
    """Where an event sits in the stream: used by order-sensitive operations.

    ``first``/``last``/``collect`` order by (event time, partition, offset) so that
    their result does not depend on the order in which frames are combined.
    """

    ts: int
    partition: int
    offset: int

    def as_tuple(self) -> tuple[int, int, int]:
        """Return ``(ts, partition, offset)``, the sort key."""
        return (self.ts, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class ColumnInputs:
    """Decoded columns of a batch for the vectorized path (all arrays have one length).

    ``value`` holds the operation's ``field`` as float64 (``NaN`` for null), or is
    ``None`` when the operation reads no field (``count``). ``x`` holds the second
    input of two-input operations (linear regression's x; the event time in
    milliseconds when no x field is configured).
    """

    value: FloatArray | None
    x: FloatArray | None
    ts: IntArray


class AggregateOp(ABC):
    """Common metadata of every aggregate operation."""

    #: The name used in YAML (``op: mean``).
    op_name: ClassVar[str] = ""
    #: Whether ``field`` must be numeric (the decoder routes non-numeric values to errors).
    numeric: ClassVar[bool] = True
    #: Whether the operation reads ``field`` at all (``count`` without a field does not).
    needs_field: ClassVar[bool] = True

    @property
    @abstractmethod
    def deductible(self) -> bool:
        """Whether :meth:`deduct` is an exact inverse of combine for this operation."""


class VectorOp(AggregateOp):
    """An operation whose accumulator is a fixed-width float64 row."""

    #: Number of float64 columns of the accumulator.
    width: ClassVar[int] = 1

    @property
    def deductible(self) -> bool:
        """Vector operations are deductible exactly when they override :meth:`deduct`."""
        return type(self).deduct is not VectorOp.deduct

    def identity(self) -> FloatArray:
        """The accumulator of no events, shape ``(width,)``: zeros unless overridden."""
        return np.zeros(self.width, dtype=np.float64)

    @abstractmethod
    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Pre-aggregate a batch: one accumulator per group, shape ``(n_groups, width)``.

        ``groups[i]`` in ``[0, n_groups)`` is the group of event ``i``. Groups that get no
        (non-null) event hold the identity.
        """

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Fold one event into ``acc`` (shape ``(width,)``) in place: the per-event path."""
        row = self.accumulate(
            ColumnInputs(
                value=np.array([value], dtype=np.float64),
                x=np.array([x], dtype=np.float64),
                ts=np.array([ts], dtype=np.int64),
            ),
            np.zeros(1, dtype=np.int64),
            1,
        )
        acc[:] = self.combine(acc.reshape(1, -1), row)[0]

    @abstractmethod
    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Row-wise combine of two ``(n, width)`` arrays; associative and commutative."""

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Row-wise inverse of combine: ``deduct(combine(x, y), x) == y``."""
        raise NotDeductibleError(f"{self.op_name} has no deduct (it is not invertible)")

    def cancelled(self, total: FloatArray, rest: FloatArray) -> BoolArray | None:
        """Rows where ``rest = deduct(total, part)`` lost too many bits to cancellation to
        be trusted (``None``: the op's deduct never does); their windows are then
        combined from their frames afresh."""
        return None

    @abstractmethod
    def finish(self, acc: FloatArray) -> list[Any]:
        """Turn ``(n, width)`` accumulators into ``n`` JSON-ready results (``None`` if empty)."""


class ObjectOp(AggregateOp):
    """An operation with an arbitrary Python accumulator."""

    #: True for operations that need every value of the window (median, percentile):
    #: their accumulator is a list of ``(ordering tuple, value)`` pairs, persisted one
    #: message at a time in the Message Store rather than inside the frame record.
    full_state: ClassVar[bool] = False

    @property
    def deductible(self) -> bool:
        """Object operations are deductible exactly when they override :meth:`deduct`."""
        return type(self).deduct is not ObjectOp.deduct

    @abstractmethod
    def create(self) -> Any:
        """A fresh, empty accumulator."""

    @abstractmethod
    def accumulate(self, acc: Any, value: Any, order: Ordering) -> Any:
        """Fold one value into ``acc`` and return the accumulator (mutating is allowed)."""

    @abstractmethod
    def combine(self, a: Any, b: Any) -> Any:
        """Combine two accumulators into a *new* one, never mutating or returning an argument.

        ``accumulate`` may mutate its accumulator in place, so a combine that returned
        one of its inputs would let a later accumulate change a frame it came from.
        """

    def deduct(self, a: Any, b: Any) -> Any:
        """Inverse of combine, when the operation has one."""
        raise NotDeductibleError(f"{self.op_name} has no deduct")

    @abstractmethod
    def finish(self, acc: Any) -> Any:
        """The JSON-ready result of an accumulator."""

    @abstractmethod
    def dumps(self, acc: Any) -> bytes:
        """Serialize an accumulator (stable across processes and restarts)."""

    @abstractmethod
    def loads(self, data: bytes) -> Any:
        """Inverse of :meth:`dumps`."""

"""The aggregations of one job, bound to their input fields and laid out side by side.

All vector operations share one float64 matrix (each owns a column slice), so a frame
is one row and a batch of frames one 2-D array; object operations keep one Python
accumulator each per frame. :class:`AggregationSet` combines, deducts and finishes
whole rows at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.aggregations.base import (
    AggregateOp,
    ColumnInputs,
    ObjectOp,
    VectorOp,
)
from window_operator.aggregations.registry import BUILTIN_OPS
from window_operator.columns import check_column_values
from window_operator.errors import (
    USER_CODE_ERRORS,
    InvalidArgumentError,
    UserOpError,
    exception_text,
)
from window_operator.events import EventBatch
from window_operator.results import FailedValue

__all__ = ["AggregationSet", "BoundAggregation", "PendingMessage"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NO_ROWS: IntArray = np.empty(0, dtype=np.int64)


def _overflow_is_null() -> np.errstate:
    """No warnings for floating overflow: an accumulator beyond the double range gives a
    null result (a fresh context per call: the state it saves is per thread)."""
    return np.errstate(over="ignore", invalid="ignore")


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """One event's values of the full-state aggregations (:attr:`AggregationSet.full_state`),
    with its key id and order, waiting to be written to the Message Store."""

    kid: int
    ts: int
    partition: int
    offset: int
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class BoundAggregation:
    """One configured aggregation: output name, operation and the fields it reads.

    ``x_field`` is the second input of two-input operations (linear regression); when
    it is ``None`` such operations use the event time.
    """

    name: str
    op: AggregateOp
    field: str | None = None
    x_field: str | None = None
    #: the operation as configured (its ``op``, and a user-defined one's ``params``),
    #: which the stored accumulators depend on (None: the operation's class names it)
    configured: Any = None


def _stable(value: Any) -> Any:
    """``value`` (a user-defined operation's params, as YAML gave them) as JSON that is
    the same in every process: a set's items sorted, a mapping with keys that are not
    strings as its sorted pairs, an integer past 64 bits and anything else JSON has no
    form for as text."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, list | tuple):
        return [_stable(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _stable(v) for k, v in value.items()}
    if isinstance(value, dict):
        pairs = [[_stable(k), _stable(v)] for k, v in value.items()]
        return {"mapping": sorted(pairs, key=orjson.dumps)}
    if isinstance(value, set | frozenset):
        return {"set": sorted((_stable(v) for v in value), key=orjson.dumps)}
    return str(value)


class AggregationSet:
    """The aggregations of a job with their column layout."""

    def __init__(self, aggregations: Sequence[BoundAggregation]) -> None:
        if not aggregations:
            raise ValueError("at least one aggregation is required")
        self.aggregations = tuple(aggregations)
        self.vector: list[tuple[BoundAggregation, VectorOp, slice]] = []
        self.objects: list[tuple[BoundAggregation, ObjectOp]] = []
        col = 0
        for agg in self.aggregations:
            if isinstance(agg.op, VectorOp):
                sl = slice(col, col + agg.op.width)
                self.vector.append((agg, agg.op, sl))
                col += agg.op.width
            elif isinstance(agg.op, ObjectOp):
                self.objects.append((agg, agg.op))
            else:
                raise TypeError(f"{agg.name}: {type(agg.op).__name__} is neither vector nor object")
        self.width = col
        self.identity = np.zeros(col, dtype=np.float64)
        for _, op, sl in self.vector:
            self.identity[sl] = op.identity()
        self.full_state = [i for i, (_, op) in enumerate(self.objects) if op.full_state]
        self.deductible = all(a.op.deductible for a in self.aggregations)
        #: vector ops whose deduct can cancel (they say where: ``cancelled``)
        self.cancelling = [
            (op, sl) for _, op, sl in self.vector if type(op).cancelled is not VectorOp.cancelled
        ]

    @property
    def names(self) -> list[str]:
        """Output names in declaration order."""
        return [a.name for a in self.aggregations]

    def signature(self) -> list[Any]:
        """What the stored state of these aggregations depends on, in order: each one's
        operation, field and ``x`` field, not its name (the state layout is by position).
        A store written under another signature holds other accumulators: an operator
        continues only a store of its own (see :func:`read_checkpoint`). JSON-native, so
        that it compares equal to itself read back from a checkpoint."""
        rows = [
            [
                _stable(a.configured or f"{type(a.op).__module__}:{type(a.op).__qualname__}"),
                a.field,
                a.x_field,
            ]
            for a in self.aggregations
        ]
        out: list[Any] = orjson.loads(orjson.dumps(rows))
        return out

    def state_shape(self, window: dict[str, Any]) -> dict[str, Any]:
        """The shape of a window operator's state: its ``window`` settings and these
        aggregations' :meth:`signature` (see :func:`read_checkpoint`)."""
        return {**window, "aggregations": self.signature()}

    def check_deduct(self, use_deduct: bool | None) -> None:
        """Raise ``ValueError`` when ``use_deduct=True`` but an operation has no deduct."""
        if use_deduct and not self.deductible:
            raise ValueError("use_deduct=True but not every aggregation has deduct")

    # -- vector part --------------------------------------------------------------------

    def identity_rows(self, n: int) -> FloatArray:
        """``n`` empty accumulator rows."""
        return np.tile(self.identity, (n, 1))

    def check_batch(self, batch: EventBatch) -> None:
        """Raise :class:`InvalidArgumentError` before any change unless ``batch`` has
        columns of one length, every column the aggregations read, and positions and
        times a decoder would give (a batch built by hand: the job's decoders make whole
        ones)."""
        batch.check()
        check_column_values(batch.ts, batch.partition, batch.offset)
        for agg in self.aggregations:
            kinds = "numeric" if isinstance(agg.op, VectorOp) else "numeric or objects"
            for name in (agg.field, agg.x_field):
                if name is None or name in batch.numeric:
                    continue
                if isinstance(agg.op, ObjectOp) and name in batch.objects:
                    continue
                raise InvalidArgumentError(
                    f"the batch has no column {name!r} in {kinds}, which aggregation "
                    f"{agg.name!r} reads"
                )

    def accumulate(
        self,
        numeric: Mapping[str, FloatArray],
        ts: IntArray,
        groups: IntArray,
        n_groups: int,
    ) -> FloatArray:
        """Pre-aggregate a batch into ``(n_groups, width)`` partial accumulators."""
        out = np.empty((n_groups, self.width), dtype=np.float64)
        with _overflow_is_null():
            for agg, op, sl in self.vector:
                value = numeric[agg.field] if agg.field is not None else None
                x = numeric[agg.x_field] if agg.x_field is not None else ts.astype(np.float64)
                inputs = ColumnInputs(value=value, x=x, ts=ts)
                out[:, sl] = op.accumulate(inputs, groups, n_groups)
        return out

    def accumulate_one(self, row: FloatArray, numeric: Mapping[str, float], ts: int) -> None:
        """Fold one event into one accumulator row in place."""
        for agg, op, sl in self.vector:
            value = numeric[agg.field] if agg.field is not None else 1.0
            x = numeric[agg.x_field] if agg.x_field is not None else float(ts)
            op.accumulate_one(row[sl], value, x, ts)

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Row-wise combine of two ``(n, width)`` arrays."""
        return self._rowwise(a, b, "combine", lambda op, x, y: op.combine(x, y))

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Row-wise inverse of :meth:`combine`."""
        return self._rowwise(a, b, "deduct", lambda op, x, y: op.deduct(x, y))

    def _rowwise(
        self,
        a: FloatArray,
        b: FloatArray,
        method: str,
        step: Callable[[VectorOp, FloatArray, FloatArray], Any],
    ) -> FloatArray:
        """``step`` (``method``) of each vector operation over its columns of ``a`` and
        ``b``; a user-defined one that raises is a :class:`UserOpError`."""
        out = np.empty_like(a)
        with _overflow_is_null():
            for agg, op, sl in self.vector:
                try:
                    out[:, sl] = step(op, a[:, sl], b[:, sl])
                except Exception as exc:
                    raise UserOpError.of(agg.name, method, exc) from exc
        return out

    def deduct_checked(self, a: FloatArray, b: FloatArray) -> tuple[FloatArray, IntArray]:
        """:meth:`deduct`, and the rows whose result cancelled too much to be trusted
        (:meth:`~window_operator.aggregations.base.VectorOp.cancelled`): a sliding window
        recombines those from its frames instead."""
        out = self.deduct(a, b)
        lost: npt.NDArray[np.bool_] | None = None
        for op, sl in self.cancelling:
            rows = op.cancelled(a[:, sl], out[:, sl])
            if rows is not None:
                lost = rows if lost is None else lost | rows
        return out, (_NO_ROWS if lost is None else np.flatnonzero(lost))

    def combine_all(self, parts: Sequence[FloatArray]) -> FloatArray:
        """Row-wise combine of several ``(n, width)`` arrays, in order."""
        out = parts[0]
        for part in parts[1:]:
            out = self.combine(out, part)
        return out

    # -- object part --------------------------------------------------------------------

    def create_objects(self) -> list[Any]:
        """Fresh object accumulators, one per object operation."""
        return [op.create() for _, op in self.objects]

    def combine_objects(self, a: list[Any], b: list[Any]) -> list[Any]:
        """Combine two lists of object accumulators (a user-defined operation that
        raises is a :class:`UserOpError`)."""
        out = []
        for (agg, op), x, y in zip(self.objects, a, b, strict=True):
            try:
                out.append(op.combine(x, y))
            except Exception as exc:
                raise UserOpError.of(agg.name, "combine", exc) from exc
        return out

    # -- results ------------------------------------------------------------------------

    def finish(self, acc: FloatArray, objs: Sequence[list[Any]] | None) -> dict[str, list[Any]]:
        """Finished values per aggregation name for ``n`` windows (declaration order).

        Where an operation's ``finish`` raises (a user-defined one), that window's value
        is a :class:`~window_operator.results.FailedValue`; the other windows' values
        are what they would be.
        """
        out: dict[str, list[Any]] = {}
        with _overflow_is_null():
            vec = {agg.name: _finish_rows(agg.name, op, acc[:, sl]) for agg, op, sl in self.vector}
        obj: dict[str, list[Any]] = {}
        if self.objects:
            assert objs is not None
            for j, (agg, op) in enumerate(self.objects):
                obj[agg.name] = _finish_each(agg.name, op.finish, (o[j] for o in objs))
        for agg in self.aggregations:
            out[agg.name] = vec[agg.name] if agg.name in vec else obj[agg.name]
        return out


def _finish_rows(name: str, op: VectorOp, acc: FloatArray) -> list[Any]:
    """``op.finish`` of every row; row by row, to find the failing ones, if it raises."""
    try:
        return op.finish(acc)
    except USER_CODE_ERRORS:  # user code: find the windows it fails on
        return [
            _finish_one(name, lambda row: op.finish(row)[0], acc[i : i + 1])
            for i in range(len(acc))
        ]


def _finish_each(name: str, finish: Callable[[Any], Any], accs: Iterable[Any]) -> list[Any]:
    """``finish`` of each accumulator, once each: where it raises, a FailedValue, and
    the loop goes on with the next one."""
    out: list[Any] = []
    append = out.append
    rest = iter(accs)
    while True:
        try:
            for acc in rest:
                append(finish(acc))
        except USER_CODE_ERRORS as exc:  # user code: the window's result is an error
            append(_failed(name, exc))
        else:
            return out


def _failed(name: str, exc: BaseException) -> FailedValue:
    return FailedValue(f"aggregation {name!r}: finish raised {exception_text(exc)}", exc)


def _finish_one(name: str, finish: Callable[[Any], Any], acc: Any) -> Any:
    """``finish(acc)``, or the :class:`FailedValue` of what it raised."""
    try:
        return finish(acc)
    except USER_CODE_ERRORS as exc:  # user code: the window's result is an error
        return _failed(name, exc)


def load_object(op: ObjectOp, data: bytes) -> Any:
    """``op.loads(data)``: a user-defined operation that raises is a
    :class:`UserOpError` naming it (before, a StateCorruptError that blamed the store);
    a built-in one's ``ValueError`` stays, for the caller to call the record corrupt."""
    try:
        return op.loads(data)
    except Exception as exc:
        if op.op_name in BUILTIN_OPS:
            raise
        raise UserOpError.of(op.op_name, "loads", exc, what="operation") from exc

"""Numeric vector operations: count, sum, mean, min, max (the second moments are in
:mod:`.moments`).

Every operation keeps a fixed-width ``float64`` row and implements the
:class:`~window_operator.aggregations.base.VectorOp` contract with NumPy on
``(n, width)`` arrays. ``NaN`` inputs are JSON nulls and are ignored everywhere.

Layouts (column order of the accumulator row):

* ``count`` (width 1): ``n``; deductible.
* ``sum``, ``mean`` (width 2): ``n, sum``; deductible.
* ``min`` / ``max`` (width 2): ``n, extreme``, identity ``0, +inf`` / ``0, -inf``;
  not deductible.
* ``variance``, ``stddev`` (width 4): ``n, mean, mean_lo, M2``; deductible.
* ``linreg`` (width 7): ``n, mean_x, mean_x_lo, mean_y, mean_y_lo, Cxx, Cxy``;
  deductible.

The second-moment operations use the centred (Welford/Chan) representation rather
than raw power sums: with epoch-millisecond inputs (~1.7e12) a raw ``sum(x**2)``
would carry an absolute rounding error larger than the variance being measured. For
the same reason their means are double-float (``mean + mean_lo``), see below.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from window_operator.aggregations.base import ColumnInputs, VectorOp
from window_operator.arrays import BoolArray, FloatArray, IntArray

__all__ = [
    "CountNonNullOp",
    "CountOp",
    "MaxOp",
    "MeanOp",
    "MinOp",
    "SumOp",
]

# A cancellation residue below this many ulps of the operands is indistinguishable from
# zero: deduct sets such second moments to exactly 0 so that a window whose remaining
# values are all equal reports variance 0 (and linreg "no slope") instead of noise.
_EPS = float(np.finfo(np.float64).eps)
_NOISE_ULPS = 64.0 * _EPS


# --------------------------------------------------------------------------- helpers


def _require_values(inputs: ColumnInputs, op_name: str) -> FloatArray:
    if inputs.value is None:
        raise ValueError(f"{op_name} needs a field: ColumnInputs.value is None")
    return np.asarray(inputs.value, dtype=np.float64)


def _null_mask(values: FloatArray) -> BoolArray | None:
    """The NaN mask, or ``None`` when there is no null (the common, fast case)."""
    nulls = np.isnan(values)
    return nulls if bool(nulls.any()) else None


def _bincount(groups: IntArray, n_groups: int, weights: FloatArray | None = None) -> FloatArray:
    out = np.bincount(groups, weights=weights, minlength=n_groups)
    if out.shape[0] != n_groups:
        # bincount silently grows the output instead of failing on an out-of-range group.
        raise ValueError(f"group index {int(groups.max())} out of range [0, {n_groups})")
    # bincount returns int64 for an empty input even with weights.
    return out.astype(np.float64, copy=False)


def _counts(groups: IntArray, n_groups: int, nulls: BoolArray | None) -> FloatArray:
    # Counting through float weights avoids a boolean gather of ``groups`` (5x slower).
    weights = None if nulls is None else (~nulls).astype(np.float64)
    return _bincount(groups, n_groups, weights)


def _safe_div(num: FloatArray, den: FloatArray) -> FloatArray:
    """``num / den`` with 0 where ``den == 0`` (empty accumulators)."""
    out = np.zeros(np.broadcast_shapes(num.shape, den.shape), dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


def _rows(acc: FloatArray) -> FloatArray:
    arr = np.asarray(acc, dtype=np.float64)
    return arr.reshape(1, -1) if arr.ndim == 1 else arr


def _results(valid: BoolArray, values: FloatArray) -> list[float | None]:
    return [v if ok else None for v, ok in zip(values.tolist(), valid.tolist(), strict=True)]


def _validate_ddof(ddof: Any) -> int:
    if isinstance(ddof, bool) or not isinstance(ddof, int | np.integer):
        raise ValueError(f"param 'ddof' must be a non-negative integer, got {ddof!r}")
    if ddof < 0:
        raise ValueError(f"param 'ddof' must be a non-negative integer, got {ddof!r}")
    return int(ddof)


# --------------------------------------------------------------------------- count


class CountOp(VectorOp):
    """Count events; with ``has_field=True`` count non-null values of the field.

    ``CountOp(has_field=True)`` returns a :class:`CountNonNullOp` (a subclass) because
    ``needs_field`` is class-level metadata in the base contract and the decoder must
    know whether to decode the field.
    """

    op_name: ClassVar[str] = "count"
    needs_field: ClassVar[bool] = False
    width: ClassVar[int] = 1

    def __new__(cls, *, has_field: bool = False) -> CountOp:
        """Dispatch to :class:`CountNonNullOp` when a field is configured."""
        target = CountNonNullOp if has_field and cls is CountOp else cls
        return super().__new__(target)

    def __init__(self, *, has_field: bool = False) -> None:
        self.has_field = type(self).needs_field

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Number of events per group."""
        return _bincount(groups, n_groups).reshape(n_groups, 1)

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Count the event."""
        acc[0] += 1.0

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Add the counts."""
        return np.add(a, b, dtype=np.float64)

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Subtract the counts (never below zero)."""
        return np.maximum(np.subtract(a, b, dtype=np.float64), 0.0)

    def finish(self, acc: FloatArray) -> list[Any]:
        """The counts as ints (0 for an empty window, as SQL ``COUNT``)."""
        return list(_rows(acc)[:, 0].astype(np.int64).tolist())


class CountNonNullOp(CountOp):
    """``count`` with a field: counts the events whose field is not null."""

    needs_field: ClassVar[bool] = True

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Number of non-null values per group."""
        values = _require_values(inputs, self.op_name)
        return _counts(groups, n_groups, _null_mask(values)).reshape(n_groups, 1)

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Count the value unless it is null."""
        if value == value:
            acc[0] += 1.0


# --------------------------------------------------------------------------- sum / mean


class SumOp(VectorOp):
    """Sum of the non-null values; ``None`` when the window has none."""

    op_name: ClassVar[str] = "sum"
    width: ClassVar[int] = 2

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """``(n, sum)`` per group."""
        values = _require_values(inputs, self.op_name)
        nulls = _null_mask(values)
        out = np.empty((n_groups, 2), dtype=np.float64)
        out[:, 0] = _counts(groups, n_groups, nulls)
        weights = values if nulls is None else np.where(nulls, 0.0, values)
        out[:, 1] = _bincount(groups, n_groups, weights)
        return out

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Add one value."""
        if value == value:
            acc[0] += 1.0
            acc[1] += value

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Add both columns."""
        return np.add(a, b, dtype=np.float64)

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Subtract both columns; an emptied row is reset to the exact identity."""
        out = np.subtract(a, b, dtype=np.float64)
        # Without the reset, rounding residue of the running sum would survive forever
        # in a sliding window that empties and refills.
        empty = out[..., 0] <= 0.0
        if bool(empty.any()):
            out[empty] = 0.0
        return out

    def finish(self, acc: FloatArray) -> list[Any]:
        """The sums, ``None`` for empty rows."""
        rows = _rows(acc)
        return _results(rows[:, 0] > 0, rows[:, 1])


class MeanOp(SumOp):
    """Arithmetic mean of the non-null values (accumulator ``(n, sum)``)."""

    op_name: ClassVar[str] = "mean"

    def finish(self, acc: FloatArray) -> list[Any]:
        """``sum / n``, ``None`` for empty rows."""
        rows = _rows(acc)
        n = rows[:, 0]
        return _results(n > 0, _safe_div(rows[:, 1], n))


# --------------------------------------------------------------------------- min / max


class MinOp(VectorOp):
    """Minimum of the non-null values (accumulator ``(n, min)``; not deductible)."""

    op_name: ClassVar[str] = "min"
    width: ClassVar[int] = 2
    #: The value column of the identity; also replaces nulls so that they never win.
    _neutral: ClassVar[float] = math.inf

    def identity(self) -> FloatArray:
        """``[0, +inf]`` (``-inf`` for max)."""
        return np.array([0.0, self._neutral], dtype=np.float64)

    def _reduce_at(self, out: FloatArray, groups: IntArray, values: FloatArray) -> None:
        # ufunc.at measured 1.3-13 ms for 1e6 values into 1 to 1e6 groups, against
        # ~100 ms for argsort + reduceat (ufunc.at is fast since numpy 1.25).
        np.minimum.at(out, groups, values)

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """``(n, extreme)`` per group."""
        values = _require_values(inputs, self.op_name)
        nulls = _null_mask(values)
        out = np.empty((n_groups, 2), dtype=np.float64)
        out[:, 0] = _counts(groups, n_groups, nulls)
        extreme = np.full(n_groups, self._neutral, dtype=np.float64)
        self._reduce_at(
            extreme, groups, values if nulls is None else np.where(nulls, self._neutral, values)
        )
        out[:, 1] = extreme
        return out

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Fold one value."""
        if value == value:
            acc[0] += 1.0
            if value < acc[1]:
                acc[1] = value

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Add counts, take the extreme of the values."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        return np.stack([a[..., 0] + b[..., 0], np.minimum(a[..., 1], b[..., 1])], axis=-1)

    def finish(self, acc: FloatArray) -> list[Any]:
        """The extremes, ``None`` for empty rows."""
        rows = _rows(acc)
        return _results(rows[:, 0] > 0, rows[:, 1])


class MaxOp(MinOp):
    """Maximum of the non-null values (accumulator ``(n, max)``; not deductible)."""

    op_name: ClassVar[str] = "max"
    _neutral: ClassVar[float] = -math.inf

    def _reduce_at(self, out: FloatArray, groups: IntArray, values: FloatArray) -> None:
        np.maximum.at(out, groups, values)

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Fold one value."""
        if value == value:
            acc[0] += 1.0
            if value > acc[1]:
                acc[1] = value

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Add counts, take the larger value."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        return np.stack([a[..., 0] + b[..., 0], np.maximum(a[..., 1], b[..., 1])], axis=-1)


# --------------------------------------------------------------------------- variance
#
# Means are kept as an unevaluated sum ``hi + lo`` (``hi`` = the mean rounded to
# float64, ``lo`` = the rounding remainder). With epoch-millisecond inputs (~1.7e12)
# a plain float64 mean is quantised to 2.4e-4, and Chan's combine/deduct multiply that
# quantisation error by the spread: measured with a single mean column, deducting
# frames with a 1-10 ms spread gave variance errors of ~2e-2 relative (3e-4 for
# 1-10 s spreads). With ``hi + lo`` every difference of means is accurate to a few
# ulps of the difference itself.

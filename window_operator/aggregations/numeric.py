"""Numeric vector operations: count, sum, mean, min, max, variance, stddev, linreg.

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
import numpy.typing as npt

from window_operator.aggregations.base import ColumnInputs, VectorOp

__all__ = [
    "CountNonNullOp",
    "CountOp",
    "LinregOp",
    "MaxOp",
    "MeanOp",
    "MinOp",
    "StddevOp",
    "SumOp",
    "VarianceOp",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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

    @property
    def deductible(self) -> bool:
        """Counts subtract exactly."""
        return True

    def identity(self) -> FloatArray:
        """``[0]``."""
        return np.zeros(1, dtype=np.float64)

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

    @property
    def deductible(self) -> bool:
        """Sums subtract (up to floating-point rounding)."""
        return True

    def identity(self) -> FloatArray:
        """``[0, 0]``."""
        return np.zeros(2, dtype=np.float64)

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

    @property
    def deductible(self) -> bool:
        """A minimum cannot be un-combined."""
        return False

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


def _two_sum(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Knuth's TwoSum: ``s + err == a + b`` exactly, ``s = fl(a + b)``."""
    s = a + b
    b_virtual = s - a
    err = (a - (s - b_virtual)) + (b - b_virtual)
    # inf + finite leaves NaN in err; the sum itself is already exact then.
    return s, np.where(np.isfinite(s), err, 0.0)


def _centre(
    values: FloatArray, groups: IntArray, n_groups: int, n: FloatArray, nulls: BoolArray | None
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per-group mean as ``hi + lo`` and the deviations ``d`` from a provisional centre.

    Returns ``(hi, lo, d, sum_d)``. The provisional centre is the naive per-group mean;
    deviations from it are exact for clustered values (Sterbenz), and ``sum_d`` is the
    error of that naive mean (the corrected two-pass algorithm of Chan, Golub &
    LeVeque), used both to refine the mean and to correct the second moments.
    """
    v = values if nulls is None else np.where(nulls, 0.0, values)
    centre = _safe_div(_bincount(groups, n_groups, v), n)
    centre = np.where(np.isfinite(centre), centre, 0.0)
    # In-place ops on one buffer: fresh 8 MB temporaries per step cost more in page
    # faults than the arithmetic itself at 1e6 values.
    d = np.take(centre, groups)
    np.subtract(v, d, out=d)
    if nulls is not None:
        d[nulls] = 0.0
    sum_d = _bincount(groups, n_groups, d)
    hi, lo = _two_sum(centre, _safe_div(sum_d, n))
    return hi, lo, d, sum_d


def _clamp_noise(total: FloatArray, correction: FloatArray) -> FloatArray:
    """``total - correction`` for second moments, with rounding residue set to 0."""
    moment = total - correction
    return np.where(moment <= _NOISE_ULPS * total, 0.0, moment)


def _mean_diff(h1: FloatArray, l1: FloatArray, h2: FloatArray, l2: FloatArray) -> FloatArray:
    """``(h1 + l1) - (h2 + l2)``; ``h1 - h2`` is exact when the means are close."""
    return (h1 - h2) + (l1 - l2)


def _identity_where(out: FloatArray, empty: BoolArray) -> FloatArray:
    if bool(np.any(empty)):
        out[empty] = 0.0
    return out


def _neutral_combine(a: FloatArray, b: FloatArray, out: FloatArray) -> FloatArray:
    """Return ``a`` / ``b`` bit for bit where the other side is empty."""
    out = np.where((b[..., 0] == 0)[..., None], a, out)
    return np.where((a[..., 0] == 0)[..., None], b, out)


class VarianceOp(VectorOp):
    """Variance of the non-null values; ``ddof=1`` (default) is the sample variance.

    Accumulator ``(n, mean, mean_lo, M2)``: the mean is ``mean + mean_lo`` (``mean`` is
    the mean rounded to float64) and ``M2`` the sum of squared deviations from it.
    Frames combine with Chan et al.'s parallel formula and ``deduct`` is its algebraic
    inverse. ``finish`` is ``None`` when ``n <= ddof``.
    """

    op_name: ClassVar[str] = "variance"
    width: ClassVar[int] = 4

    def __init__(self, *, ddof: int = 1) -> None:
        self.ddof = _validate_ddof(ddof)

    @property
    def deductible(self) -> bool:
        """Chan's combine has an algebraic inverse."""
        return True

    def identity(self) -> FloatArray:
        """``[0, 0, 0, 0]``."""
        return np.zeros(4, dtype=np.float64)

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Per-group ``(n, mean, mean_lo, M2)`` by a corrected two-pass over ``bincount``."""
        values = _require_values(inputs, self.op_name)
        nulls = _null_mask(values)
        n = _counts(groups, n_groups, nulls)
        hi, lo, d, sum_d = _centre(values, groups, n_groups, n, nulls)
        sum_d2 = _bincount(groups, n_groups, np.square(d, out=d))
        m2 = _clamp_noise(sum_d2, _safe_div(sum_d * sum_d, n))
        out = np.empty((n_groups, 4), dtype=np.float64)
        out[:, 0] = n
        out[:, 1] = hi
        out[:, 2] = lo
        out[:, 3] = m2
        return out

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Welford's update on the deviation from the ``hi + lo`` mean."""
        if value != value:
            return
        n, hi, lo, m2 = acc.tolist()
        if n == 0.0:
            acc[:] = (1.0, value, 0.0, 0.0)
            return
        n += 1.0
        d = (value - hi) - lo
        step = d / n
        # TwoSum(hi, lo + step) inlined: a helper call costs ~0.15 us on this hot path.
        t = lo + step
        s = hi + t
        t_virtual = s - hi
        lo = (hi - (s - t_virtual)) + (t - t_virtual)
        # value - new_mean == d - step
        acc[:] = (n, s, lo, m2 + d * (d - step))

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Chan et al.: ``M2 = M2a + M2b + d^2 na nb / n`` with ``d = mean_b - mean_a``."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        na, nb = a[..., 0], b[..., 0]
        n = na + nb
        frac_b = _safe_div(nb, n)
        delta = _mean_diff(b[..., 1], b[..., 2], a[..., 1], a[..., 2])
        hi, lo = _two_sum(a[..., 1], a[..., 2] + delta * frac_b)
        m2 = a[..., 3] + b[..., 3] + delta * delta * na * frac_b
        return _neutral_combine(a, b, np.stack([n, hi, lo, m2], axis=-1))

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Inverse of :meth:`combine`: the accumulator ``y`` with ``combine(b, y) == a``."""
        c = np.asarray(a, dtype=np.float64)
        a_ = np.asarray(b, dtype=np.float64)
        nc, na = c[..., 0], a_[..., 0]
        nb = nc - na
        # mean_c = mean_a + (mean_b - mean_a) nb / nc, solved for mean_b as a correction
        # of mean_c so that removing a small frame barely moves it.
        diff_ca = _mean_diff(c[..., 1], c[..., 2], a_[..., 1], a_[..., 2])
        ratio = _safe_div(na, nb)
        hi, lo = _two_sum(c[..., 1], c[..., 2] + diff_ca * ratio)
        correction = diff_ca * diff_ca * na * _safe_div(nc, nb)
        m2 = c[..., 3] - a_[..., 3] - correction
        noise = _NOISE_ULPS * (np.abs(c[..., 3]) + np.abs(a_[..., 3]) + correction)
        m2 = np.where((m2 <= noise) | (nb <= 1.0), 0.0, m2)
        out = np.stack([nb, hi, lo, m2], axis=-1)
        out = np.where((na == 0)[..., None], c, out)
        return _identity_where(out, nb <= 0)

    def _finish_values(self, n: FloatArray, m2: FloatArray) -> FloatArray:
        return _safe_div(m2, n - self.ddof)

    def finish(self, acc: FloatArray) -> list[Any]:
        """``M2 / (n - ddof)``; ``None`` when ``n <= ddof``."""
        rows = _rows(acc)
        n = rows[:, 0]
        return _results((n > self.ddof) & (n > 0), self._finish_values(n, rows[:, 3]))


class StddevOp(VarianceOp):
    """Standard deviation: the square root of :class:`VarianceOp`."""

    op_name: ClassVar[str] = "stddev"

    def _finish_values(self, n: FloatArray, m2: FloatArray) -> FloatArray:
        return np.sqrt(np.maximum(super()._finish_values(n, m2), 0.0))


# --------------------------------------------------------------------------- linreg


class LinregOp(VectorOp):
    """Least-squares line ``value = slope * x + intercept``.

    ``x`` is ``ColumnInputs.x`` (the event time in milliseconds when no x field is
    configured; ``ts`` is used if ``x`` is ``None``). Accumulator
    ``(n, mean_x, mean_x_lo, mean_y, mean_y_lo, Cxx, Cxy)``: means as ``hi + lo`` as
    in :class:`VarianceOp`, co-moments about the means, combined with the bivariate
    Chan formula. Events where either input is null are ignored. ``finish`` gives
    ``{"slope", "intercept"}``, or ``None`` when ``n < 2`` or ``Cxx == 0`` (all x equal).
    """

    op_name: ClassVar[str] = "linreg"
    width: ClassVar[int] = 7

    @property
    def deductible(self) -> bool:
        """The bivariate Chan combine has an algebraic inverse."""
        return True

    def identity(self) -> FloatArray:
        """Seven zeros."""
        return np.zeros(7, dtype=np.float64)

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Per-group accumulators by a corrected two-pass over ``bincount``."""
        y = _require_values(inputs, self.op_name)
        if inputs.x is not None:
            x = np.asarray(inputs.x, dtype=np.float64)
        else:
            x = np.asarray(inputs.ts, dtype=np.float64)
        nulls = _null_mask(x + y)  # NaN in either input propagates to the sum
        n = _counts(groups, n_groups, nulls)
        # One null mask for both inputs so that x and y moments cover the same events.
        hx, lx, dx, sdx = _centre(x, groups, n_groups, n, nulls)
        hy, ly, dy, sdy = _centre(y, groups, n_groups, n, nulls)
        cxy = _bincount(groups, n_groups, np.multiply(dx, dy, out=dy)) - _safe_div(sdx * sdy, n)
        cxx = _clamp_noise(
            _bincount(groups, n_groups, np.square(dx, out=dx)), _safe_div(sdx * sdx, n)
        )
        out = np.empty((n_groups, 7), dtype=np.float64)
        out[:, 0] = n
        out[:, 1] = hx
        out[:, 2] = lx
        out[:, 3] = hy
        out[:, 4] = ly
        out[:, 5] = cxx
        out[:, 6] = cxy
        return out

    def accumulate_one(self, acc: FloatArray, value: float, x: float, ts: int) -> None:
        """Bivariate Welford update on deviations from the ``hi + lo`` means."""
        if value != value or x != x:
            return
        n, hx, lx, hy, ly, cxx, cxy = acc.tolist()
        if n == 0.0:
            acc[:] = (1.0, x, 0.0, value, 0.0, 0.0, 0.0)
            return
        n += 1.0
        dx = (x - hx) - lx
        dy = (value - hy) - ly
        step_x = dx / n
        step_y = dy / n
        # Two inlined TwoSums (see VarianceOp.accumulate_one).
        t = lx + step_x
        s = hx + t
        t_virtual = s - hx
        lx = (hx - (s - t_virtual)) + (t - t_virtual)
        hx = s
        t = ly + step_y
        s = hy + t
        t_virtual = s - hy
        ly = (hy - (s - t_virtual)) + (t - t_virtual)
        hy = s
        # Old-mean deviation times new-mean deviation (Welford's co-moment form).
        acc[:] = (n, hx, lx, hy, ly, cxx + dx * (dx - step_x), cxy + dx * (dy - step_y))

    def combine(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Bivariate Chan: ``C = Ca + Cb + dx dy na nb / n``."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        na, nb = a[..., 0], b[..., 0]
        n = na + nb
        frac_b = _safe_div(nb, n)
        dx = _mean_diff(b[..., 1], b[..., 2], a[..., 1], a[..., 2])
        dy = _mean_diff(b[..., 3], b[..., 4], a[..., 3], a[..., 4])
        hx, lx = _two_sum(a[..., 1], a[..., 2] + dx * frac_b)
        hy, ly = _two_sum(a[..., 3], a[..., 4] + dy * frac_b)
        weight = na * frac_b
        cxx = a[..., 5] + b[..., 5] + dx * dx * weight
        cxy = a[..., 6] + b[..., 6] + dx * dy * weight
        return _neutral_combine(a, b, np.stack([n, hx, lx, hy, ly, cxx, cxy], axis=-1))

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Inverse of :meth:`combine`: the accumulator ``y`` with ``combine(b, y) == a``."""
        c = np.asarray(a, dtype=np.float64)
        a_ = np.asarray(b, dtype=np.float64)
        nc, na = c[..., 0], a_[..., 0]
        nb = nc - na
        ratio = _safe_div(na, nb)
        diff_x = _mean_diff(c[..., 1], c[..., 2], a_[..., 1], a_[..., 2])
        diff_y = _mean_diff(c[..., 3], c[..., 4], a_[..., 3], a_[..., 4])
        hx, lx = _two_sum(c[..., 1], c[..., 2] + diff_x * ratio)
        hy, ly = _two_sum(c[..., 3], c[..., 4] + diff_y * ratio)
        # (mean_b - mean_a) = (mean_c - mean_a) nc / nb, times na nb / nc.
        weight = na * _safe_div(nc, nb)
        corr_xx = diff_x * diff_x * weight
        corr_xy = diff_x * diff_y * weight
        cxx = c[..., 5] - a_[..., 5] - corr_xx
        cxy = c[..., 6] - a_[..., 6] - corr_xy
        noise_xx = _NOISE_ULPS * (np.abs(c[..., 5]) + np.abs(a_[..., 5]) + corr_xx)
        noise_xy = _NOISE_ULPS * (np.abs(c[..., 6]) + np.abs(a_[..., 6]) + np.abs(corr_xy))
        degenerate = (cxx <= noise_xx) | (nb <= 1.0)
        cxx = np.where(degenerate, 0.0, cxx)
        cxy = np.where(degenerate | (np.abs(cxy) <= noise_xy), 0.0, cxy)
        out = np.stack([nb, hx, lx, hy, ly, cxx, cxy], axis=-1)
        out = np.where((na == 0)[..., None], c, out)
        return _identity_where(out, nb <= 0)

    def finish(self, acc: FloatArray) -> list[Any]:
        """``{"slope": Cxy/Cxx, "intercept": mean_y - slope mean_x}`` or ``None``."""
        rows = _rows(acc)
        # Distinct float x values differ by at least ulp(x) >= eps |x| / 2, so any
        # genuine Cxx is >= (eps |mean_x| / 2)^2 / 2; smaller values are residue of the
        # double-float means (e.g. all x equal but mean_lo rounded differently).
        floor = (_EPS * rows[:, 1]) ** 2 / 32.0
        valid = (rows[:, 0] >= 2.0) & (rows[:, 5] > floor)
        slope = _safe_div(rows[:, 6], np.where(valid, rows[:, 5], 0.0))
        intercept = (rows[:, 3] - slope * rows[:, 1]) + (rows[:, 4] - slope * rows[:, 2])
        return [
            {"slope": s, "intercept": i} if ok else None
            for s, i, ok in zip(slope.tolist(), intercept.tolist(), valid.tolist(), strict=True)
        ]

"""Second-moment vector operations: variance, stddev and linear regression.

They use the centred (Welford/Chan) representation rather than raw power sums: with
epoch-millisecond inputs (~1.7e12) a raw ``sum(x**2)`` would carry an absolute rounding
error larger than the variance being measured. For the same reason their means are
double-float (``mean + mean_lo``).

Layouts (column order of the accumulator row):

* ``variance``, ``stddev`` (width 4): ``n, mean, mean_lo, M2``; deductible.
* ``linreg`` (width 7): ``n, mean_x, mean_x_lo, mean_y, mean_y_lo, Cxx, Cxy``;
  deductible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from window_operator.aggregations.base import ColumnInputs, VectorOp
from window_operator.aggregations.numeric import (
    _EPS,
    _NOISE_ULPS,
    _bincount,
    _counts,
    _null_mask,
    _require_values,
    _results,
    _rows,
    _safe_div,
    _validate_ddof,
)
from window_operator.arrays import BoolArray, FloatArray, IntArray

__all__ = ["LinregOp", "StddevOp", "VarianceOp"]

#: A deduct whose result keeps less than this fraction of the total's second moment has
#: cancelled about 20 of float64's 52 bits; with the rounding error of the subtraction
#: (a few ulps of the total) it could be off by more than 1e-8 relative, so the window
#: is combined from its frames instead.
_TRUSTED_FRACTION = 2.0**-20


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
    """``total - correction`` for second moments, with rounding residue set to 0 (an
    overflowed moment stays infinite: the result is null, not a variance of 0)."""
    moment = total - correction
    return np.where((moment <= _NOISE_ULPS * total) & np.isfinite(moment), 0.0, moment)


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


def _columns(n_groups: int, columns: list[FloatArray]) -> FloatArray:
    """Accumulator rows of ``n_groups`` groups from their columns."""
    out = np.empty((n_groups, len(columns)), dtype=np.float64)
    for i, col in enumerate(columns):
        out[:, i] = col
    return out


@dataclass(frozen=True, slots=True)
class _Means:
    """The count and means of a combined (or deducted) accumulator, and what moves them.

    ``means`` holds ``hi, lo`` of each mean; ``diffs``, per mean, the difference of the
    two inputs' means (first minus second); a second moment moves by ``d_x d_y na``
    (``na``: the count of ``a``) times ``weight``.
    """

    n: FloatArray
    means: list[FloatArray]
    diffs: list[FloatArray]
    na: FloatArray
    weight: FloatArray


def _moved_means(
    base: FloatArray, diffs: list[FloatArray], fraction: FloatArray
) -> list[FloatArray]:
    """``hi, lo`` of each mean of ``base`` moved by its difference times ``fraction``."""
    columns: list[FloatArray] = []
    for m, d in enumerate(diffs):
        hi = 1 + 2 * m
        columns.extend(_two_sum(base[..., hi], base[..., hi + 1] + d * fraction))
    return columns


def _mean_diffs(x: FloatArray, y: FloatArray, means: int) -> list[FloatArray]:
    """Per mean, ``mean_x - mean_y`` of two accumulators (means as ``hi + lo`` pairs)."""
    cols = range(1, 1 + 2 * means, 2)
    return [_mean_diff(x[..., h], x[..., h + 1], y[..., h], y[..., h + 1]) for h in cols]


def _combined_means(a: FloatArray, b: FloatArray, means: int) -> _Means:
    """Chan et al.'s combination of the counts and means of ``a`` and ``b``."""
    na, nb = a[..., 0], b[..., 0]
    n = na + nb
    frac_b = _safe_div(nb, n)
    diffs = _mean_diffs(b, a, means)
    return _Means(n, _moved_means(a, diffs, frac_b), diffs, na, frac_b)


def _deducted_means(c: FloatArray, a: FloatArray, means: int) -> _Means:
    """The inverse of :func:`_combined_means`: counts and means of ``c`` without ``a``.

    ``mean_c = mean_a + (mean_b - mean_a) nb / nc`` is solved for ``mean_b`` as a
    correction of ``mean_c``, so that removing a small frame barely moves it.
    """
    nc, na = c[..., 0], a[..., 0]
    nb = nc - na
    diffs = _mean_diffs(c, a, means)
    moved = _moved_means(c, diffs, _safe_div(na, nb))
    # (mean_b - mean_a) = (mean_c - mean_a) nc / nb, times na nb / nc
    return _Means(nb, moved, diffs, na, _safe_div(nc, nb))


def _deducted(c: FloatArray, means: _Means, moments: list[FloatArray]) -> FloatArray:
    """The deducted accumulator rows; ``c`` itself where nothing was deducted."""
    out = np.stack([means.n, *means.means, *moments], axis=-1)
    out = np.where((means.na == 0)[..., None], c, out)
    return _identity_where(out, means.n <= 0)


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

    def accumulate(self, inputs: ColumnInputs, groups: IntArray, n_groups: int) -> FloatArray:
        """Per-group ``(n, mean, mean_lo, M2)`` by a corrected two-pass over ``bincount``."""
        values = _require_values(inputs, self.op_name)
        nulls = _null_mask(values)
        n = _counts(groups, n_groups, nulls)
        hi, lo, d, sum_d = _centre(values, groups, n_groups, n, nulls)
        sum_d2 = _bincount(groups, n_groups, np.square(d, out=d))
        m2 = _clamp_noise(sum_d2, _safe_div(sum_d * sum_d, n))
        return _columns(n_groups, [n, hi, lo, m2])

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
        means = _combined_means(a, b, 1)
        (delta,) = means.diffs
        m2 = a[..., 3] + b[..., 3] + delta * delta * means.na * means.weight
        return _neutral_combine(a, b, np.stack([means.n, *means.means, m2], axis=-1))

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Inverse of :meth:`combine`: the accumulator ``y`` with ``combine(b, y) == a``."""
        c = np.asarray(a, dtype=np.float64)
        a_ = np.asarray(b, dtype=np.float64)
        means = _deducted_means(c, a_, 1)
        (diff_ca,) = means.diffs
        correction = diff_ca * diff_ca * means.na * means.weight
        m2 = c[..., 3] - a_[..., 3] - correction
        noise = _NOISE_ULPS * (np.abs(c[..., 3]) + np.abs(a_[..., 3]) + correction)
        m2 = np.where(((m2 <= noise) & np.isfinite(m2)) | (means.n <= 1.0), 0.0, m2)
        return _deducted(c, means, [m2])

    def cancelled(self, total: FloatArray, rest: FloatArray) -> BoolArray | None:
        """``M2`` of the rest is a tiny fraction of the total's (see ``_TRUSTED_FRACTION``)."""
        return rest[..., 3] < total[..., 3] * _TRUSTED_FRACTION

    def _finish_values(self, n: FloatArray, m2: FloatArray) -> FloatArray:
        return _safe_div(m2, n - self.ddof)

    def finish(self, acc: FloatArray) -> list[Any]:
        """``M2 / (n - ddof)``; ``None`` when ``n <= ddof`` or ``M2`` overflowed (values of
        magnitude beyond about 1e154)."""
        rows = _rows(acc)
        n = rows[:, 0]
        values = self._finish_values(n, rows[:, 3])
        return _results((n > self.ddof) & (n > 0) & np.isfinite(values), values)


class StddevOp(VarianceOp):
    """Standard deviation: the square root of :class:`VarianceOp`."""

    op_name: ClassVar[str] = "stddev"

    def _finish_values(self, n: FloatArray, m2: FloatArray) -> FloatArray:
        return np.sqrt(np.maximum(super()._finish_values(n, m2), 0.0))


# --------------------------------------------------------------------------- linreg


def _comoment_moves(means: _Means) -> tuple[FloatArray, FloatArray]:
    """How ``Cxx`` and ``Cxy`` move when two bivariate accumulators are combined (or one
    is deducted): ``dx dx na weight`` and ``dx dy na weight`` (see :class:`_Means`)."""
    dx, dy = means.diffs
    weight = means.na * means.weight
    return dx * dx * weight, dx * dy * weight


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
        return _columns(n_groups, [n, hx, lx, hy, ly, cxx, cxy])

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
        means = _combined_means(a, b, 2)
        move_xx, move_xy = _comoment_moves(means)
        cxx = a[..., 5] + b[..., 5] + move_xx
        cxy = a[..., 6] + b[..., 6] + move_xy
        rows = np.stack([means.n, *means.means, cxx, cxy], axis=-1)
        return _neutral_combine(a, b, rows)

    def deduct(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Inverse of :meth:`combine`: the accumulator ``y`` with ``combine(b, y) == a``."""
        c = np.asarray(a, dtype=np.float64)
        a_ = np.asarray(b, dtype=np.float64)
        means = _deducted_means(c, a_, 2)
        corr_xx, corr_xy = _comoment_moves(means)
        cxx = c[..., 5] - a_[..., 5] - corr_xx
        cxy = c[..., 6] - a_[..., 6] - corr_xy
        noise_xx = _NOISE_ULPS * (np.abs(c[..., 5]) + np.abs(a_[..., 5]) + corr_xx)
        noise_xy = _NOISE_ULPS * (np.abs(c[..., 6]) + np.abs(a_[..., 6]) + np.abs(corr_xy))
        degenerate = ((cxx <= noise_xx) & np.isfinite(cxx)) | (means.n <= 1.0)
        cxx = np.where(degenerate, 0.0, cxx)
        cxy = np.where(degenerate | ((np.abs(cxy) <= noise_xy) & np.isfinite(cxy)), 0.0, cxy)
        return _deducted(c, means, [cxx, cxy])

    def cancelled(self, total: FloatArray, rest: FloatArray) -> BoolArray | None:
        """``Cxx`` or ``|Cxy|`` of the rest is a tiny fraction of the total's."""
        lost_xx = rest[..., 5] < total[..., 5] * _TRUSTED_FRACTION
        lost_xy = np.abs(rest[..., 6]) < np.abs(total[..., 6]) * _TRUSTED_FRACTION
        return lost_xx | lost_xy

    def finish(self, acc: FloatArray) -> list[Any]:
        """``{"slope": Cxy/Cxx, "intercept": mean_y - slope mean_x}`` or ``None``."""
        rows = _rows(acc)
        # Distinct float x values differ by at least ulp(x) >= eps |x| / 2, so any
        # genuine Cxx is >= (eps |mean_x| / 2)^2 / 2; smaller values are residue of the
        # double-float means (e.g. all x equal but mean_lo rounded differently).
        floor = (_EPS * rows[:, 1]) ** 2 / 32.0
        valid = (rows[:, 0] >= 2.0) & (rows[:, 5] > floor) & np.isfinite(rows[:, 5:7]).all(axis=1)
        slope = _safe_div(rows[:, 6], np.where(valid, rows[:, 5], 0.0))
        intercept = (rows[:, 3] - slope * rows[:, 1]) + (rows[:, 4] - slope * rows[:, 2])
        return [
            {"slope": s, "intercept": i} if ok else None
            for s, i, ok in zip(slope.tolist(), intercept.tolist(), valid.tolist(), strict=True)
        ]

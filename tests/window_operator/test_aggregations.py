"""Tests of the aggregate operations: vector ops, object ops and the registry.

Floating-point comparisons use ``|got - expected| <= 1e-9 * max(|expected|, scale) +
1e-9`` where ``scale`` is the magnitude the rounding error of the computation is
proportional to (for a sum, ``sum(|v|)``: a cancelling sum cannot be more accurate
than that, whichever algorithm computes it). Exact references use ``Fraction``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from window_operator.aggregations import (
    BUILTIN_OPS,
    AggregateOp,
    ColumnInputs,
    NotDeductibleError,
    ObjectOp,
    OpParamError,
    Ordering,
    UnknownOpError,
    VectorOp,
    resolve_op,
)
from window_operator.aggregations.numeric import CountNonNullOp, CountOp
from window_operator.aggregations.objects import canonical_json

# The registry imports the helper module of user-defined ops by dotted path
# ("udf_example:ProductOp"); pytest's rootdir-relative import modes may not put this
settings.register_profile(
    "aggregations",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SETTINGS = settings.get_profile("aggregations")

REL = 1e-9
ABS = 1e-9
NAN = math.nan
OFFSET = 1.7e12  # epoch milliseconds, November 2023

# --------------------------------------------------------------------------- helpers


def close(got: float | None, expected: float | None, scale: float = 0.0) -> bool:
    if got is None or expected is None:
        return got is None and expected is None
    return abs(got - expected) <= REL * max(abs(expected), scale) + ABS


Floats = Sequence[float] | npt.NDArray[np.float64]


def inputs(values: Floats, xs: Floats | None = None) -> ColumnInputs:
    n = len(values)
    return ColumnInputs(
        value=np.asarray(values, dtype=np.float64).reshape(n),
        x=None if xs is None else np.asarray(xs, dtype=np.float64).reshape(n),
        ts=np.arange(n, dtype=np.int64) * 1000 + 1_700_000_000_000,
    )


def one_group(op: VectorOp, values: Floats, xs: Floats | None = None) -> Any:
    return op.accumulate(inputs(values, xs), np.zeros(len(values), dtype=np.int64), 1)


class Spec:
    """A vector op under test and its exact reference."""

    def __init__(self, name: str, params: dict[str, Any] | None = None, **kw: Any) -> None:
        self.name = name
        self.params = params or {}
        self.has_field = kw.get("has_field", True)
        self.uses_x = kw.get("uses_x", False)
        self.id = kw.get("id", name)

    def op(self) -> VectorOp:
        op = resolve_op(self.name, self.params, has_field=self.has_field)
        assert isinstance(op, VectorOp)
        return op


VECTOR_SPECS = [
    Spec("count", has_field=False, id="count_events"),
    Spec("count", id="count_field"),
    Spec("sum"),
    Spec("mean"),
    Spec("min"),
    Spec("max"),
    Spec("variance"),
    Spec("variance", {"ddof": 0}, id="variance_pop"),
    Spec("stddev"),
    Spec("linreg", uses_x=True),
]
DEDUCTIBLE_SPECS = [s for s in VECTOR_SPECS if s.op().deductible]


def _clean(values: Sequence[float], xs: Sequence[float] | None) -> tuple[list[float], list[float]]:
    if xs is None:
        return [v for v in values if not math.isnan(v)], []
    pairs = [
        (v, x) for v, x in zip(values, xs, strict=True) if not (math.isnan(v) or math.isnan(x))
    ]
    return [v for v, _ in pairs], [x for _, x in pairs]


def _moments(vals: Sequence[float]) -> tuple[Fraction, Fraction, float]:
    """Exact mean and M2, and ``sum |d|^2`` as float."""
    fr = [Fraction(v) for v in vals]
    mean = sum(fr, Fraction(0)) / len(fr)
    m2 = sum(((v - mean) ** 2 for v in fr), Fraction(0))
    return mean, m2, float(m2)


def reference(
    spec: Spec,
    values: Sequence[float],
    xs: Sequence[float] | None = None,
    scale_from: tuple[Sequence[float], Sequence[float] | None] | None = None,
) -> tuple[Any, Any]:
    """Exact result of ``spec`` over one group and the scale of its rounding error.

    ``scale_from`` gives the values an accumulator was derived from by deduct (the
    combined window): the error is then proportional to that window, amplified by
    ``n_window / n_result``.
    """
    name = spec.name
    if name == "count":
        if not spec.has_field:
            return len(values), 0.0
        return sum(1 for v in values if not math.isnan(v)), 0.0
    vals, xvals = _clean(values, xs if spec.uses_x else None)
    big_vals, big_x = vals, xvals
    if scale_from is not None:
        big_vals, big_x = _clean(scale_from[0], scale_from[1] if spec.uses_x else None)
    amp = len(big_vals) / max(len(vals), 1)
    if not vals:
        return None, 0.0
    if name in ("min", "max"):
        return (min(vals) if name == "min" else max(vals)), 0.0
    if name == "sum":
        return float(sum(map(Fraction, vals), Fraction(0))), sum(abs(v) for v in big_vals)
    if name == "mean":
        exact = sum(map(Fraction, vals), Fraction(0)) / len(vals)
        return float(exact), sum(abs(v) for v in big_vals) / len(vals)
    if name in ("variance", "stddev"):
        ddof = spec.params.get("ddof", 1)
        if len(vals) <= ddof:
            return None, 0.0
        _, m2, _ = _moments(vals)
        _, _, big_m2 = _moments(big_vals)
        var = m2 / (len(vals) - ddof)
        var_scale = 2.0 * max(float(m2), big_m2) / (len(vals) - ddof)
        if name == "variance":
            return float(var), var_scale
        # Compare stddev through its square: d(var) = 2 s d(s).
        return math.sqrt(float(var)), var_scale
    assert name == "linreg"
    if len(vals) < 2:
        return None, None
    fx, fy = [Fraction(x) for x in xvals], [Fraction(v) for v in vals]
    mx, my = sum(fx, Fraction(0)) / len(fx), sum(fy, Fraction(0)) / len(fy)
    cxx = sum(((x - mx) ** 2 for x in fx), Fraction(0))
    if cxx == 0:
        return None, None
    slope = sum(((x - mx) * (y - my) for x, y in zip(fx, fy, strict=True)), Fraction(0)) / cxx
    intercept = my - slope * mx
    bmx = sum(map(Fraction, big_x), Fraction(0)) / len(big_x)
    bmy = sum(map(Fraction, big_vals), Fraction(0)) / len(big_vals)
    abs_dxdy = sum(abs(float((x - bmx) * (y - bmy))) for x, y in zip(big_x, big_vals, strict=True))
    sum_dx2 = sum(float((x - bmx) ** 2) for x in big_x)
    slope_scale = (abs_dxdy + abs(float(slope)) * sum_dx2) / float(cxx)
    mean_scale = amp * (max(abs(y) for y in big_vals) + abs(float(slope)) * max(map(abs, big_x)))
    intercept_scale = abs(float(my)) + abs(float(mx)) * slope_scale + mean_scale
    return (
        {"slope": float(slope), "intercept": float(intercept)},
        {"slope": slope_scale, "intercept": intercept_scale},
    )


def result_close(spec: Spec, got: Any, expected: Any, scale: Any) -> bool:
    if got is None or expected is None:
        return got is None and expected is None
    if spec.name == "linreg":
        return all(close(got[k], expected[k], scale[k]) for k in ("slope", "intercept"))
    if spec.name == "stddev":
        return close(got * got, expected * expected, scale)
    if spec.name == "count":
        return bool(got == expected and isinstance(got, int))
    return close(got, expected, scale)


def assert_matches_reference(
    spec: Spec,
    got: Any,
    values: Sequence[float],
    xs: Sequence[float] | None,
    scale_from: tuple[Sequence[float], Sequence[float] | None] | None = None,
) -> None:
    expected, scale = reference(spec, values, xs, scale_from)
    assert result_close(spec, got, expected, scale), (spec.id, got, expected, scale)


# --------------------------------------------------------------------------- strategies

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_subnormal=False)
Column = tuple[list[float], list[float]]

# Columns are generated by NumPy from a Hypothesis-drawn seed and shape: drawing long
# float lists element by element costs ~20 ms per example, which would blow the time
# budget of this file. Hypothesis still explores (and shrinks) size, null rate and
# the shape of the values; the "drawn" shape keeps its adversarial floats for short
# columns.
SHAPES = ("wide", "small_integers", "clustered", "mixed_magnitudes", "drawn")


@st.composite
def column(draw: st.DrawFn, min_size: int = 0, max_size: int = 40) -> Column:
    n = draw(st.integers(min_size, max_size))
    shape = draw(st.sampled_from(SHAPES))
    null_rate = draw(st.sampled_from([0.0, 0.0, 0.2, 0.6, 1.0]))
    x_range = draw(st.sampled_from([5, 1000]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if shape == "wide":
        values = rng.uniform(-1e6, 1e6, n)
    elif shape == "small_integers":
        values = rng.integers(-5, 6, n).astype(np.float64)
    elif shape == "clustered":  # large offset, tiny spread
        values = 1e6 + rng.uniform(0.0, 1e-3, n)
    elif shape == "mixed_magnitudes":
        values = rng.normal(size=n) * 10.0 ** rng.integers(-3, 6, n)
    else:
        n = min(n, 8)
        values = np.array(draw(st.lists(finite, min_size=n, max_size=n)), dtype=np.float64)
    xs = rng.integers(-x_range, x_range + 1, n).astype(np.float64)
    values[rng.random(n) < null_rate] = NAN
    xs[rng.random(n) < null_rate / 2] = NAN
    return values.tolist(), xs.tolist()


@st.composite
def nonempty_column(draw: st.DrawFn) -> Column:
    """At least two non-null (value, x) pairs with at least two distinct x."""
    values, xs = draw(column(max_size=30))
    extra_v = draw(st.lists(finite, min_size=2, max_size=2))
    x0 = draw(st.integers(-1000, 1000))
    return values + extra_v, xs + [float(x0), float(x0 + draw(st.integers(1, 50)))]


@st.composite
def grouped(draw: st.DrawFn) -> tuple[list[float], list[float], list[int], int]:
    values, xs = draw(column(max_size=60))
    n_groups = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return values, xs, rng.integers(0, n_groups, len(values)).tolist(), n_groups


def x_of(spec: Spec, col: Column) -> list[float] | None:
    return col[1] if spec.uses_x else None


# --------------------------------------------------------------------------- vector ops
#
# Each property runs every vector op on the same generated data (one Hypothesis test
# per property rather than per op keeps the file within its time budget).


@SETTINGS
@given(data=grouped())
def test_vectorized_accumulate_matches_naive(
    data: tuple[list[float], list[float], list[int], int],
) -> None:
    values, xs, groups, n_groups = data
    for spec in VECTOR_SPECS:
        op = spec.op()
        acc = op.accumulate(
            inputs(values, x_of(spec, data[:2])), np.asarray(groups, dtype=np.int64), n_groups
        )
        assert acc.shape == (n_groups, op.width)
        assert acc.dtype == np.float64
        results = op.finish(acc)
        assert len(results) == n_groups
        orjson.dumps(results)  # JSON-ready
        for g in range(n_groups):
            members = [i for i, gi in enumerate(groups) if gi == g]
            assert_matches_reference(
                spec, results[g], [values[i] for i in members], [xs[i] for i in members]
            )
            if not members:
                np.testing.assert_array_equal(acc[g], op.identity(), err_msg=spec.id)


@SETTINGS
@given(data=grouped())
def test_accumulate_one_matches_accumulate(
    data: tuple[list[float], list[float], list[int], int],
) -> None:
    values, xs, groups, n_groups = data
    for spec in VECTOR_SPECS:
        op = spec.op()
        batch = inputs(values, x_of(spec, data[:2]))
        vectorized = op.accumulate(batch, np.asarray(groups, dtype=np.int64), n_groups)
        folded = np.tile(op.identity(), (n_groups, 1))
        for i, g in enumerate(groups):
            op.accumulate_one(folded[g], values[i], xs[i], int(batch.ts[i]))
        # counts are exact
        np.testing.assert_array_equal(folded[:, 0], vectorized[:, 0], err_msg=spec.id)
        pairs = zip(op.finish(folded), op.finish(vectorized), strict=True)
        for g, (got, want) in enumerate(pairs):
            members = [i for i, gi in enumerate(groups) if gi == g]
            _, scale = reference(spec, [values[i] for i in members], [xs[i] for i in members])
            assert result_close(spec, got, want, scale), (spec.id, got, want)


@SETTINGS
@given(a=column(), b=column(), c=column())
def test_combine_commutative_and_associative(a: Column, b: Column, c: Column) -> None:
    for spec in VECTOR_SPECS:
        op = spec.op()
        acc_a, acc_b, acc_c = (one_group(op, col[0], x_of(spec, col)) for col in (a, b, c))
        ab, ba = op.combine(acc_a, acc_b), op.combine(acc_b, acc_a)
        left = op.combine(ab, acc_c)
        right = op.combine(acc_a, op.combine(acc_b, acc_c))
        assert ab[0, 0] == ba[0, 0], spec.id
        assert left[0, 0] == right[0, 0], spec.id
        all_values, all_xs = a[0] + b[0] + c[0], a[1] + b[1] + c[1]
        for acc in (left, right):
            assert_matches_reference(spec, op.finish(acc)[0], all_values, all_xs)
        for acc in (ab, ba):
            assert_matches_reference(spec, op.finish(acc)[0], a[0] + b[0], a[1] + b[1])


@SETTINGS
@given(a=column())
def test_identity_is_neutral(a: Column) -> None:
    for spec in VECTOR_SPECS:
        op = spec.op()
        acc = one_group(op, a[0], x_of(spec, a))
        identity = op.identity().reshape(1, -1)
        np.testing.assert_array_equal(op.combine(acc, identity), acc, err_msg=spec.id)
        np.testing.assert_array_equal(op.combine(identity, acc), acc, err_msg=spec.id)
        np.testing.assert_array_equal(op.deduct(acc, identity) if op.deductible else acc, acc)
        assert op.finish(identity) == [0 if spec.name == "count" else None], spec.id


@SETTINGS
@given(a=column(), b=nonempty_column())
def test_deduct_inverts_combine(a: Column, b: Column) -> None:
    for spec in DEDUCTIBLE_SPECS:
        op = spec.op()
        acc_a, acc_b = one_group(op, a[0], x_of(spec, a)), one_group(op, b[0], x_of(spec, b))
        for combined in (op.combine(acc_a, acc_b), op.combine(acc_b, acc_a)):
            rest = op.deduct(combined, acc_a)
            assert rest[0, 0] == acc_b[0, 0], spec.id
            assert_matches_reference(
                spec, op.finish(rest)[0], b[0], b[1], scale_from=(a[0] + b[0], a[1] + b[1])
            )
        # Deducting everything leaves the exact identity.
        np.testing.assert_array_equal(op.deduct(acc_b, acc_b)[0], op.identity(), err_msg=spec.id)


def _epoch_ms(rng: np.random.Generator, base: float, n: int, spread: float) -> Any:
    return np.floor(base + rng.uniform(0.0, spread, n))


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n_a=st.integers(1, 60),
    n_b=st.integers(3, 60),
    log_spread=st.floats(0.5, 6.0),
)
def test_deduct_with_epoch_millisecond_offsets(
    seed: int, n_a: int, n_b: int, log_spread: float
) -> None:
    """Values ~1.7e12 with spreads from 3 ms to 1e6 ms stay accurate to ~1e-9 relative."""
    rng = np.random.default_rng(seed)
    spread = 10.0**log_spread
    base = OFFSET + float(rng.integers(0, 10**9))
    x_a, x_b = _epoch_ms(rng, base, n_a, spread), _epoch_ms(rng, base, n_b, spread)
    x_b[:2] = [x_b[0], x_b[0] + 1.0]  # at least two distinct x
    slope = rng.normal()
    y_a = OFFSET / 1e3 + slope * (x_a - base) + rng.normal(size=n_a) * spread
    y_b = OFFSET / 1e3 + slope * (x_b - base) + rng.normal(size=n_b) * spread
    for spec in (Spec("variance"), Spec("stddev"), Spec("linreg", uses_x=True)):
        op = spec.op()
        if spec.uses_x:
            acc_a, acc_b = one_group(op, y_a, x_a), one_group(op, y_b, x_b)
            values_b, all_v = list(y_b), [*y_a, *y_b]
        else:
            acc_a, acc_b = one_group(op, x_a), one_group(op, x_b)
            values_b, all_v = list(x_b), [*x_a, *x_b]
        rest = op.deduct(op.combine(acc_a, acc_b), acc_a)
        got = op.finish(rest)[0]
        expected, scale = reference(spec, values_b, list(x_b), scale_from=(all_v, [*x_a, *x_b]))
        assert result_close(spec, got, expected, scale), (spec.id, got, expected)
        if spec.uses_x:
            # The slope scale is made of deviations from the mean, not of the offset.
            assert abs(got["slope"] - expected["slope"]) <= 1e-9 * max(
                abs(expected["slope"]), scale["slope"]
            )
        else:
            assert abs(got - expected) <= 1e-9 * expected  # plain relative accuracy
        # The one-by-one path is as accurate.
        folded = op.identity()
        for v, x in zip(values_b, x_b, strict=True):
            op.accumulate_one(folded, v, x, 0)
        assert result_close(spec, op.finish(folded)[0], expected, scale), spec.id


@pytest.mark.parametrize("name", ["sum", "mean", "variance", "linreg"])
def test_sliding_window_by_deduct_does_not_drift(name: str) -> None:
    """previous - trailing frame + leading frame over 120 slides equals a direct window."""
    rng = np.random.default_rng(7)
    spec = Spec(name, uses_x=(name == "linreg"))
    op = spec.op()
    n_frames, width = 130, 8
    frame_x = [
        np.sort(np.floor(OFFSET + 1000.0 * f + rng.uniform(0, 1000, int(rng.integers(0, 30)))))
        for f in range(n_frames)
    ]
    frame_y = [3.0 + 0.002 * (x - OFFSET) + rng.normal(size=x.size) for x in frame_x]
    frames = [
        one_group(op, y, x) if spec.uses_x else one_group(op, x)
        for x, y in zip(frame_x, frame_y, strict=True)
    ]
    window = frames[0]
    for f in frames[1:width]:
        window = op.combine(window, f)
    for start in range(1, n_frames - width):
        window = op.combine(op.deduct(window, frames[start - 1]), frames[start + width - 1])
        xs = np.concatenate(frame_x[start : start + width])
        ys = np.concatenate(frame_y[start : start + width])
        assert window[0, 0] == xs.size
        if start % 20 == 0:  # the exact reference is slow; spot-check it
            values = list(ys) if spec.uses_x else list(xs)
            assert_matches_reference(spec, op.finish(window)[0], values, list(xs))
        direct = one_group(op, ys, xs) if spec.uses_x else one_group(op, xs)
        got, want = op.finish(window)[0], op.finish(direct)[0]
        if spec.uses_x:
            assert got["slope"] == pytest.approx(want["slope"], rel=1e-9)
            assert got["intercept"] == pytest.approx(want["intercept"], rel=1e-9)
        else:
            assert got == pytest.approx(want, rel=1e-9)


def test_all_equal_values_give_zero_spread() -> None:
    variance, linreg = resolve_op("variance"), resolve_op("linreg")
    assert isinstance(variance, VectorOp) and isinstance(linreg, VectorOp)
    values = [0.1] * 7
    acc = one_group(variance, values)
    assert acc[0, 3] == 0.0
    assert variance.finish(acc) == [0.0]
    # Remaining values all equal after a deduct: exactly 0, not rounding residue.
    big = one_group(variance, [1e6 + 0.37, -2e5])
    rest = variance.deduct(variance.combine(big, acc), big)
    assert variance.finish(rest) == [0.0]
    same_x = one_group(linreg, [1.0, 2.0, 3.0], [0.1, 0.1, 0.1])
    other = one_group(linreg, [5.0, 7.0], [0.1, 0.1])
    assert linreg.finish(linreg.combine(same_x, other)) == [None]
    assert linreg.finish(one_group(linreg, [1.0], [2.0])) == [None]


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
@pytest.mark.parametrize(
    "values", [[1e160, 2e160, 3e160], [1.0, 2.0, 1e308, 4.0], [-1e200, 1e200, 0.0, 5.0]]
)
def test_moments_that_overflow_are_null_on_every_path(values: list[float]) -> None:
    """A sum of squares beyond the double range is a null result, whether the values came
    in one batch, one by one or as combined parts (a batch once gave a variance of 0)."""
    for name in ("variance", "stddev", "linreg"):
        op = resolve_op(name)
        assert isinstance(op, VectorOp)
        xs = values if name == "linreg" else None
        batch = one_group(op, values, xs)
        folded = op.identity().copy()
        for i, v in enumerate(values):
            op.accumulate_one(folded, v, v, 1_700_000_000_000 + i)
        halves = op.combine(
            one_group(op, values[:2], xs and xs[:2]), one_group(op, values[2:], xs and xs[2:])
        )
        rest = op.deduct(batch, one_group(op, values[:1], xs and xs[:1]))
        for acc in (batch, folded.reshape(1, -1), halves, rest):
            assert op.finish(acc) == [None], (name, values, acc)


def test_linreg_uses_event_time_without_x() -> None:
    op = resolve_op("linreg")
    assert isinstance(op, VectorOp)
    ts = np.array([1_700_000_000_000, 1_700_000_001_000, 1_700_000_002_000], dtype=np.int64)
    batch = ColumnInputs(value=np.array([1.0, 3.0, 5.0]), x=None, ts=ts)
    (result,) = op.finish(op.accumulate(batch, np.zeros(3, dtype=np.int64), 1))
    assert result["slope"] == pytest.approx(0.002, rel=1e-12)
    assert result["intercept"] == pytest.approx(1.0 - 0.002 * 1_700_000_000_000, rel=1e-9)


def test_min_max_are_not_deductible() -> None:
    for name in ("min", "max"):
        op = resolve_op(name)
        assert isinstance(op, VectorOp)
        assert not op.deductible
        with pytest.raises(NotDeductibleError):
            op.deduct(op.identity().reshape(1, -1), op.identity().reshape(1, -1))
        assert op.identity().tolist() == [0.0, math.inf if name == "min" else -math.inf]


def test_count_field_dispatch() -> None:
    events, field = resolve_op("count"), resolve_op("count", has_field=True)
    assert type(events) is CountOp and not events.needs_field
    assert type(field) is CountNonNullOp and field.needs_field
    assert isinstance(field, CountOp) and field.op_name == "count"
    batch = inputs([1.0, NAN, 2.0])
    groups = np.zeros(3, dtype=np.int64)
    assert isinstance(events, VectorOp) and isinstance(field, VectorOp)
    assert events.finish(events.accumulate(batch, groups, 1)) == [3]
    assert field.finish(field.accumulate(batch, groups, 1)) == [2]
    no_field = ColumnInputs(value=None, x=None, ts=np.zeros(3, dtype=np.int64))
    assert events.finish(events.accumulate(no_field, groups, 1)) == [3]
    with pytest.raises(ValueError, match="needs a field"):
        field.accumulate(no_field, groups, 1)


def test_sum_finish_types_and_empty() -> None:
    op = resolve_op("sum")
    assert isinstance(op, VectorOp)
    acc = op.accumulate(inputs([1.0, 2.0, NAN]), np.array([0, 0, 1]), 3)
    assert op.finish(acc) == [3.0, None, None]
    assert all(type(v) is float for v in op.finish(acc)[:1])
    emptied = op.deduct(acc, acc)
    np.testing.assert_array_equal(emptied, np.zeros((3, 2)))


def test_out_of_range_group_is_rejected() -> None:
    op = resolve_op("mean")
    assert isinstance(op, VectorOp)
    with pytest.raises(ValueError, match="out of range"):
        op.accumulate(inputs([1.0, 2.0]), np.array([0, 3]), 2)


def test_empty_batch_gives_identities() -> None:
    for spec in VECTOR_SPECS:
        op = spec.op()
        acc = op.accumulate(inputs([], [] if spec.uses_x else None), np.zeros(0, dtype=np.int64), 3)
        np.testing.assert_array_equal(acc, np.tile(op.identity(), (3, 1)))
        all_null = op.accumulate(
            inputs([NAN, NAN], [NAN, NAN] if spec.uses_x else None), np.array([0, 2]), 3
        )
        if spec.has_field:
            np.testing.assert_array_equal(all_null, np.tile(op.identity(), (3, 1)))


# --------------------------------------------------------------------------- object ops

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=4,
)
orders = st.tuples(st.integers(0, 50), st.integers(0, 3), st.integers(0, 1000))
Event = tuple[tuple[int, int, int], Any]
OBJECT_NAMES = ["first", "last", "collect", "count_distinct", "median", "percentile"]


def object_op(name: str) -> ObjectOp:
    params = {"q": [0.25, 0.5, 0.999]} if name == "percentile" else {}
    op = resolve_op(name, params)
    assert isinstance(op, ObjectOp)
    return op


OBJECT_OPS = [object_op(name) for name in OBJECT_NAMES]

# Orders identify a record, so they are unique within a test case.
json_events = st.lists(st.tuples(orders, json_values), max_size=12, unique_by=lambda e: e[0])


def numeric_events(events: Sequence[Event], seed: int) -> list[Event]:
    """The same orders with float values (a few nulls) for the numeric object ops."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=len(events)) * 10.0 ** rng.integers(-3, 6, len(events))
    values[rng.random(len(events)) < 0.15] = NAN
    return [(order, float(v)) for (order, _), v in zip(events, values, strict=True)]


def fold(op: ObjectOp, events: Sequence[Event]) -> Any:
    acc = op.create()
    for order, value in events:
        acc = op.accumulate(acc, value, Ordering(*order))
    return acc


def canon(result: Any) -> str:
    return canonical_json(result)


def finish_canon(op: ObjectOp, acc: Any) -> str:
    return canon(op.finish(acc))


@SETTINGS
@given(
    events=json_events,
    cut_a=st.integers(0, 12),
    cut_b=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_object_combine_commutative_associative_and_codec(
    events: list[Event], cut_a: int, cut_b: int, seed: int
) -> None:
    lo, hi = sorted((min(cut_a, len(events)), min(cut_b, len(events))))
    for op in OBJECT_OPS:
        evs = numeric_events(events, seed) if op.numeric else events
        parts = [evs[:lo], evs[lo:hi], evs[hi:]]
        a, b, c = (fold(op, part) for part in parts)
        snapshot = [op.dumps(x) for x in (a, b, c)]
        ab, ba = op.combine(a, b), op.combine(b, a)
        assert finish_canon(op, ab) == finish_canon(op, ba), op.op_name
        assert op.dumps(ab) == op.dumps(ba), op.op_name  # deterministic bytes
        left, right = op.combine(ab, c), op.combine(a, op.combine(b, c))
        assert finish_canon(op, left) == finish_canon(op, right), op.op_name
        assert finish_canon(op, left) == finish_canon(op, fold(op, evs)), op.op_name
        assert [op.dumps(x) for x in (a, b, c)] == snapshot, op.op_name  # nothing mutated
        for acc in (a, left, op.create()):
            data_bytes = op.dumps(acc)
            assert isinstance(data_bytes, bytes)
            restored = op.loads(data_bytes)
            assert op.dumps(restored) == data_bytes, op.op_name
            assert finish_canon(op, restored) == finish_canon(op, acc), op.op_name
        orjson.dumps(op.finish(left))  # JSON-ready


@SETTINGS
@given(data=st.data())
def test_order_sensitive_results_ignore_arrival_and_combine_order(data: st.DataObject) -> None:
    events = data.draw(json_events.filter(bool))
    arrival = data.draw(st.permutations(events))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(arrival)), max_size=4)))
    chunks = [arrival[i:j] for i, j in zip([0, *cuts], [*cuts, len(arrival)], strict=True)]
    combine_order = data.draw(st.permutations(range(len(chunks))))
    by_order = [value for _, value in sorted(events, key=lambda e: e[0])]
    for name, expected in (("first", by_order[0]), ("last", by_order[-1]), ("collect", by_order)):
        op = object_op(name)
        accs = [fold(op, chunk) for chunk in chunks]
        acc = op.create()
        for i in combine_order:
            acc = op.combine(acc, accs[i])
        assert canon(op.finish(acc)) == canon(expected), name


def test_first_last_empty_and_null_values() -> None:
    first, last = object_op("first"), object_op("last")
    assert first.finish(first.create()) is None
    acc = first.accumulate(first.create(), None, Ordering(5, 0, 1))
    acc = first.accumulate(acc, {"b": 1, "a": [1, 2]}, Ordering(6, 0, 0))
    assert acc is not None and first.finish(acc) is None  # a null first value is kept
    lacc = last.accumulate(last.create(), {"b": 1, "a": [1, 2]}, Ordering(6, 0, 0))
    lacc = last.accumulate(lacc, "early", Ordering(5, 9, 9))
    assert last.finish(lacc) == {"b": 1, "a": [1, 2]}
    assert list(last.finish(last.loads(last.dumps(lacc)))) == ["b", "a"]  # key order kept


def test_object_codec_edge_values() -> None:
    first = object_op("first")
    huge = first.accumulate(first.create(), 2**70, Ordering(1, 0, 0))
    assert first.finish(first.loads(first.dumps(huge))) == 2**70
    median = object_op("median")
    acc = fold(median, [((1, 0, 0), math.inf), ((2, 0, 0), -1.5), ((3, 0, 0), 0.1)])
    assert median.loads(median.dumps(acc)) == sorted(acc)
    assert median.finish(acc) == 0.1
    assert median.dumps(median.create()) == b""


def test_count_distinct_canonical_values() -> None:
    op = object_op("count_distinct")
    values = [{"a": 1, "b": 2}, {"b": 2, "a": 1}, [1, 2], [2, 1], 1, 1.0, "1", None, None, True]
    acc = fold(op, [((i, 0, 0), v) for i, v in enumerate(values)])
    # dict key order does not matter; list order, int vs float, and str do; null is skipped
    assert op.finish(acc) == 7
    assert op.loads(op.dumps(acc)) == acc


@SETTINGS
@given(
    values=st.lists(finite, min_size=1, max_size=50),
    q=st.floats(0.0, 1.0),
)
def test_median_and_percentile_match_numpy(values: list[float], q: float) -> None:
    events = [((i, 0, i), v) for i, v in enumerate(values)]
    spread = max(map(abs, values))
    median = object_op("median")
    assert math.isclose(
        median.finish(fold(median, events)),
        float(np.median(values)),
        rel_tol=1e-12,
        abs_tol=1e-12 * spread,
    )
    single = resolve_op("percentile", {"q": q})
    assert isinstance(single, ObjectOp)
    got = single.finish(fold(single, events))
    assert isinstance(got, float)
    assert math.isclose(
        got, float(np.percentile(values, q * 100)), rel_tol=1e-12, abs_tol=1e-12 * spread
    )
    multi = resolve_op("percentile", {"q": list(dict.fromkeys([0.5, 0.95, q]))})
    assert isinstance(multi, ObjectOp)
    result = multi.finish(fold(multi, events))
    assert set(result) == {"p50", "p95", f"p{q * 100:g}"}
    assert math.isclose(
        result["p95"], float(np.percentile(values, 95)), rel_tol=1e-12, abs_tol=1e-12 * spread
    )


def test_median_percentile_ignore_nulls_and_empty() -> None:
    median = object_op("median")
    assert median.finish(median.create()) is None
    acc = fold(median, [((1, 0, 0), NAN), ((2, 0, 0), 4.0), ((3, 0, 0), 1.0), ((4, 0, 0), None)])
    assert median.finish(acc) == 2.5
    assert object_op("percentile").finish([]) is None
    assert median.full_state and median.numeric
    assert object_op("percentile").full_state


def test_median_and_percentile_of_values_past_half_the_largest_double_do_not_overflow(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """Before: the median of [1e308, 1e308] was null (their sum overflows), the
    percentiles of [1e308, -1e308] were all null (NumPy's interpolation subtracts them),
    and NumPy's overflow warning reached stderr."""
    median = object_op("median")
    both = fold(median, [((1, 0, 0), 1e308), ((2, 0, 0), 1e308)])
    assert median.finish(both) == 1e308
    apart = fold(median, [((1, 0, 0), 1e308), ((2, 0, 0), -1e308)])
    assert median.finish(apart) == 0.0
    multi = resolve_op("percentile", {"q": [0.0, 0.25, 0.5, 1.0]})
    assert isinstance(multi, ObjectOp)
    got = multi.finish(fold(multi, [((1, 0, 0), 1e308), ((2, 0, 0), -1e308)]))
    assert got == {"p0": -1e308, "p25": -5e307, "p50": 0.0, "p100": 1e308}
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# --------------------------------------------------------------------------- registry


def test_builtin_names() -> None:
    assert set(BUILTIN_OPS) == {
        "count", "sum", "mean", "min", "max", "variance", "stddev", "linreg",
        "first", "last", "collect", "count_distinct", "median", "percentile",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(BUILTIN_OPS))
def test_resolve_every_builtin(name: str) -> None:
    params = {"q": 0.9} if name == "percentile" else {}
    op = resolve_op(name, params)
    assert isinstance(op, BUILTIN_OPS[name])
    assert isinstance(op, AggregateOp)
    assert op.op_name == name
    assert isinstance(op, VectorOp | ObjectOp)
    if isinstance(op, VectorOp):
        assert op.identity().shape == (op.width,)


def test_unknown_op_message_lists_names() -> None:
    with pytest.raises(UnknownOpError) as info:
        resolve_op("avg")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    for name in BUILTIN_OPS:
        assert name in message
    assert "package.module:ClassName" in message


@pytest.mark.parametrize(
    ("op", "meant"),
    [
        ("avg", "mean"),
        ("Mean", "mean"),
        ("maxx", "max"),
        ("stdev", "stddev"),
        ("nunique", "count_distinct"),
    ],
)
def test_an_unknown_op_names_the_built_in_one_meant(op: str, meant: str) -> None:
    """Another system's name (SQL's avg, pandas' nunique), a case or a typo."""
    with pytest.raises(UnknownOpError) as info:
        resolve_op(op)
    assert str(info.value).startswith(f"unknown aggregate op {op!r} (did you mean {meant!r}?); ")


def test_an_unknown_op_unlike_any_built_in_one_gets_no_guess() -> None:
    with pytest.raises(UnknownOpError) as info:
        resolve_op("frobnicate")
    assert str(info.value).startswith("unknown aggregate op 'frobnicate'; built-in ops are: ")


def test_user_duck_typed_op_by_dotted_path() -> None:
    for path in ("udf_example:ProductOp", "udf_example.ProductOp"):
        op = resolve_op(path, {"scale": 2.0})
        assert isinstance(op, ObjectOp)
        assert op.op_name == path and op.numeric and not op.deductible
        acc = fold(op, [((1, 0, 0), 3.0), ((2, 0, 0), 4.0)])
        other = fold(op, [((3, 0, 0), 0.5), ((4, 0, 0), None)])  # numeric: a null skipped
        assert op.finish(op.combine(acc, other)) == 12.0
        assert op.loads(op.dumps(acc)) == 12.0
        with pytest.raises(NotDeductibleError):
            op.deduct(acc, other)


def test_a_user_op_that_is_not_numeric_gets_nulls() -> None:
    op = resolve_op("udf_example:SetResultOp")
    assert not op.numeric and fold(op, [((1, 0, 0), None)]) == [None]
    # numeric, but reading no field: each event is a None it must see
    counting = resolve_op("udf_example:EventCountOp")
    assert counting.numeric and fold(counting, [((i, 0, 0), None) for i in range(3)]) == 3


def test_user_op_with_deduct_and_codec() -> None:
    op = resolve_op("udf_example:DeductibleSumOp")
    assert isinstance(op, ObjectOp)
    assert op.deductible and not op.numeric
    a = fold(op, [((1, 0, 0), 3.0), ((2, 0, 0), 4.0)])
    b = fold(op, [((3, 0, 0), 0.5)])
    assert op.finish(op.deduct(op.combine(a, b), a)) == 0.5
    assert op.dumps(a) == np.array([2.0, 7.0]).astype("<f8").tobytes()
    assert op.loads(op.dumps(a)) == a


def test_user_vector_op_subclass() -> None:
    op = resolve_op("udf_example:PowerSumOp", {"power": 3})
    assert isinstance(op, VectorOp) and op.op_name == "power_sum"
    acc = op.accumulate(inputs([1.0, 2.0, NAN]), np.array([0, 0, 1]), 2)
    assert op.finish(acc) == [9.0, None]


@pytest.mark.parametrize(
    ("op", "params", "needle"),
    [
        ("sum", {"ddof": 1}, "'ddof'"),
        ("variance", {"dof": 1}, "'dof'"),
        ("variance", {"ddof": -1}, "ddof"),
        ("variance", {"ddof": 1.5}, "ddof"),
        ("stddev", {"ddof": True}, "ddof"),
        ("percentile", {}, "'q'"),
        ("percentile", {"q": 1.5}, "q"),
        ("percentile", {"q": -0.1}, "q"),
        ("percentile", {"q": [0.5, 2]}, "q"),
        ("percentile", {"q": []}, "q"),
        ("percentile", {"q": [0.5, 0.9, 0.5]}, "lists 0.5 twice"),
        ("percentile", {"q": "0.5"}, "q"),
        ("count", {"has_field": True}, "has_field"),
        ("udf_example:ProductOp", {"factor": 2}, "'factor'"),
        ("udf_example:PowerSumOp", {"power": 0}, "power"),
        ("no_such_module_xyz:Op", {}, "no_such_module_xyz"),
        ("udf_example:Missing", {}, "Missing"),
        ("udf_example.NotAnOp", {}, "create"),
        ("math.pi", {}, "not a class"),
    ],
)
def test_bad_params_raise_op_param_error(op: str, params: dict[str, Any], needle: str) -> None:
    with pytest.raises(OpParamError) as info:
        resolve_op(op, params)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_resolve_does_not_mutate_params() -> None:
    params = {"q": [0.5, 0.9]}
    op = resolve_op("percentile", params)
    assert params == {"q": [0.5, 0.9]}
    assert isinstance(op, ObjectOp)
    assert op.finish(fold(op, [((1, 0, 0), 1.0), ((2, 0, 0), 3.0)])) == {"p50": 2.0, "p90": 2.8}

"""The column layout of a job's aggregations: vector ops side by side, objects apart."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import runtime_for

from window_operator.aggset import AggregationSet
from window_operator.results import FailedValue


def test_rows_combine_deduct_and_finish_per_operation() -> None:
    aggs = runtime_for(
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "s", "op": "sum", "field": "v"},
            {"name": "f", "op": "first", "field": "v"},
        ]
    ).aggregations
    assert aggs.width == 3 and [a.name for a, _ in aggs.objects] == ["f"]
    assert not aggs.deductible  # first has no deduct
    part = aggs.accumulate({"v": np.array([1.0, 2.0, 4.0])}, np.arange(3), np.array([0, 1, 0]), 2)
    total = aggs.combine(part, part)
    values = aggs.finish(total, [aggs.create_objects(), aggs.create_objects()])
    assert values["n"] == [4, 2] and values["s"] == [10.0, 4.0] and values["f"] == [None, None]
    assert aggs.deduct(total, part).tolist() == part.tolist()


def test_a_deduct_that_cancels_most_of_a_second_moment_is_flagged() -> None:
    """Removing a far value from a spread-out window leaves two close ones: their
    variance is ~1e-9 of the total's, too little to trust after the subtraction."""
    aggs = runtime_for(
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "var", "op": "variance", "field": "v"},
            {"name": "fit", "op": "linreg", "field": "v"},
        ]
    ).aggregations
    assert [op.op_name for op, _ in aggs.cancelling] == ["variance", "linreg"]
    values = np.array([35_185.0, 65_535.0, 65_536.0, 1.0, 2.0, 3.0])
    ts = np.array([35_185, 65_535, 65_536, 1, 2, 3])
    # rows 0 and 1: {35185} and {65535, 65536} (cancelling); rows 2 and 3: {1} and {2, 3}
    part = aggs.accumulate({"v": values}, ts, np.array([0, 1, 1, 2, 3, 3]), 4)
    total = aggs.combine(part[[0, 2]], part[[1, 3]])
    rest, lost = aggs.deduct_checked(total, part[[0, 2]])
    assert lost.tolist() == [0]
    assert np.allclose(rest[1], part[3])  # a well-conditioned deduct is trusted
    assert aggs.combine_all([part[[0, 2]], part[[1, 3]]]).tolist() == total.tolist()


def test_deduct_is_only_forced_where_every_operation_has_one() -> None:
    def aggs(op: str) -> AggregationSet:
        return runtime_for(aggregations=[{"name": "x", "op": op, "field": "v"}]).aggregations

    aggs("sum").check_deduct(True)
    aggs("max").check_deduct(None)
    aggs("max").check_deduct(False)
    with pytest.raises(ValueError, match="use_deduct=True but not every aggregation"):
        aggs("max").check_deduct(True)


def test_a_finish_that_raises_fails_only_its_windows() -> None:
    """A user operation's ``finish`` that raises makes that window's value a
    FailedValue naming the aggregation and the exception; every other value, in the
    same rows and in other rows, is what it would be (vector and object operations)."""
    aggs = runtime_for(
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "obj", "op": "udf_example:FinishFailsOverTenOp", "field": "v"},
            {"name": "vec", "op": "udf_example:VectorFinishFailsOp", "field": "v",
             "params": {"power": 1}},
        ]
    ).aggregations  # fmt: skip
    groups = np.array([0, 0, 1, 2, 2])
    values = np.array([1.0, 2.0, 30.0, 4.0, 8.0])  # sums 3, 30, 12
    acc = aggs.accumulate({"v": values}, np.arange(5), groups, 3)
    objs = [aggs.create_objects() for _ in range(3)]
    for g, v in zip(groups.tolist(), values.tolist(), strict=True):
        objs[g] = [
            op.accumulate(o, v, None) for (_, op), o in zip(aggs.objects, objs[g], strict=True)
        ]
    got = aggs.finish(acc, objs)
    assert got["n"] == [2, 1, 2]
    for name in ("obj", "vec"):
        assert got[name][0] == 3.0
        for failed in got[name][1:]:
            assert isinstance(failed, FailedValue)
            assert failed.reason.startswith(f"aggregation {name!r}: finish raised ValueError: ")
            assert isinstance(failed.error, ValueError)


def test_each_finish_runs_once_and_an_unprintable_exception_is_named() -> None:
    """After a window whose finish raised, the next windows go on: each finish runs
    once (a finish with side effects is not run twice), and an exception whose message
    cannot be printed still gives a reason."""
    import udf_example

    aggs = runtime_for(
        aggregations=[{"name": "c", "op": "udf_example:CountedFinishOp", "field": "v"}]
    ).aggregations
    acc = aggs.accumulate({"v": np.zeros(0)}, np.zeros(0, dtype=np.int64), np.zeros(0), 4)
    udf_example.CountedFinishOp.calls = 0
    got = aggs.finish(acc, [[1.0], [20.0], [2.0], [30.0]])["c"]
    assert udf_example.CountedFinishOp.calls == 4
    assert [v if not isinstance(v, FailedValue) else v.reason for v in got] == [
        1.0,
        "aggregation 'c': finish raised UnprintableError: <its message could not be printed>",
        2.0,
        "aggregation 'c': finish raised UnprintableError: <its message could not be printed>",
    ]

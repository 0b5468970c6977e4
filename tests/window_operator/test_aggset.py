"""The column layout of a job's aggregations: vector ops side by side, objects apart."""

from __future__ import annotations

import numpy as np
from helpers import runtime_for


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

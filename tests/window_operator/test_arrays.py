"""Array helpers: distinct values as np.unique gives them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from window_operator.arrays import distinct


@given(st.lists(st.integers(-3, 3), max_size=20))
def test_distinct_is_np_unique(values: list[int]) -> None:
    arr = np.array(values, dtype=np.int64)
    assert distinct(arr) == np.unique(arr).tolist()


def test_one_partition_and_several() -> None:
    assert distinct(np.zeros(5, dtype=np.int64)) == [0]
    assert distinct(np.array([2, 0, 2, 1], dtype=np.int64)) == [0, 1, 2]
    assert distinct(np.zeros(0, dtype=np.int64)) == []

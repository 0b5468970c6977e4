"""Array helpers: distinct values and present ids as np.unique gives them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from window_operator.arrays import distinct, present_ids


@given(st.lists(st.integers(-3, 3), max_size=20))
def test_distinct_is_np_unique(values: list[int]) -> None:
    arr = np.array(values, dtype=np.int64)
    assert distinct(arr) == np.unique(arr).tolist()


def test_one_partition_and_several() -> None:
    assert distinct(np.zeros(5, dtype=np.int64)) == [0]
    assert distinct(np.array([2, 0, 2, 1], dtype=np.int64)) == [0, 1, 2]
    assert distinct(np.zeros(0, dtype=np.int64)) == []


@given(st.lists(st.lists(st.integers(0, 9), max_size=12), max_size=4))
def test_present_ids_is_np_unique_of_the_parts(parts: list[list[int]]) -> None:
    arrays = [np.array(p, dtype=np.int64) for p in parts]
    want = np.unique(np.concatenate(arrays)) if arrays else np.zeros(0, dtype=np.int64)
    got = present_ids(arrays, 10)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()

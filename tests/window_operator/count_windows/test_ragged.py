"""Ragged runs: starts of runs laid end to end, and the position inside each run."""

from __future__ import annotations

import numpy as np

from window_operator.count_windows.ragged import excl_cumsum, ragged_arange


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


# runs of lengths 3, 0, 2 laid end to end:  [a a a][][b b]
#   starts        0, 3, 3
#   positions     0 1 2 0 1
def test_runs_laid_end_to_end() -> None:
    assert excl_cumsum(ints(3, 0, 2)).tolist() == [0, 3, 3]
    assert ragged_arange(ints(3, 0, 2)).tolist() == [0, 1, 2, 0, 1]


def test_empty_and_single_runs() -> None:
    assert excl_cumsum(ints()).tolist() == []
    assert ragged_arange(ints()).tolist() == []
    assert excl_cumsum(ints(4)).tolist() == [0]
    assert ragged_arange(ints(0, 0)).tolist() == []

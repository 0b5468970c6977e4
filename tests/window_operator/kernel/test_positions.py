"""Input positions: replays recognised per (source, partition)."""

from __future__ import annotations

import numpy as np

from window_operator.kernel import InputPosition, Positions


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_missing_offsets_take_the_next_ones_of_their_partition() -> None:
    pos = Positions()
    pos.mark(0, 1, 9)
    # partition 0 has seen nothing, partition 1 up to offset 9
    got = pos.assign(0, arr(0, 1, 0, 1), arr(-1, -1, -1, 15))
    assert got.tolist() == [0, 10, 1, 15]


def test_replays_are_at_or_below_the_last_offset_or_an_earlier_row() -> None:
    pos = Positions()
    pos.mark(0, 0, 4)
    # offsets 3, 4 replay the past; the second 6 replays the row before it
    fresh = pos.fresh(0, arr(0, 0, 0, 0, 0), arr(3, 4, 5, 6, 6))
    assert fresh.tolist() == [False, False, True, True, False]


def test_sources_are_separate() -> None:
    pos = Positions()
    pos.advance(0, arr(0, 0), arr(3, 7))
    pos.advance(1, arr(0), arr(2))
    assert pos.as_dict() == {InputPosition(0, 0): 7, InputPosition(1, 0): 2}
    assert pos.fresh(1, arr(0), arr(3)).tolist() == [True]
    assert not pos.mark(0, 0, 5)  # positions never go back

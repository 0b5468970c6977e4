"""Numbering a batch's messages per key and grouping them per (key, frame)."""

from __future__ import annotations

import numpy as np

from window_operator.count_windows.numbering import number


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


# step 2; key 0 ("a") has 3 messages before the batch, key 1 ("b") none:
#
#   batch (arrival)   a   b   a   a   b   a
#   message index     3   0   4   5   1   6
#   frame (n // 2)    1   0   2   2   0   3
#   groups, by (key, frame):  (a,1) (a,2) (a,3) (b,0)
def test_messages_are_numbered_on_from_each_keys_count() -> None:
    num = number(ints(0, 1, 0, 0, 1, 0), counts=ints(3, 0), n_keys=2, step=2)
    assert num.n.tolist() == [3, 0, 4, 5, 1, 6]
    assert list(zip(num.g_kid.tolist(), num.g_frame.tolist(), strict=True)) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
    ]
    assert num.groups.tolist() == [0, 3, 1, 1, 3, 2]
    assert num.g_key.tolist() == [0, 0, 0, 1]
    assert (num.ukid.tolist(), num.c0.tolist(), num.c1.tolist()) == ([0, 1], [3, 0], [7, 2])
    assert num.first_group.tolist() == [0, 3]


def test_many_key_ids_use_the_wide_sort() -> None:
    # ids beyond int16 must not be truncated by the narrow sort key
    kids = ints(40_000, 7, 40_000)
    counts = np.zeros(40_001, dtype=np.int64)
    num = number(kids, counts, n_keys=40_001, step=1)
    assert num.ukid.tolist() == [7, 40_000]
    assert num.n.tolist() == [0, 0, 1]

"""Which count windows fire in a batch, which frames stay open, which windows are open."""

from __future__ import annotations

import numpy as np

from window_operator.count_windows.firing import CountTrigger
from window_operator.count_windows.numbering import number


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


# Hopping, size 4, step 2 (k = 2 frames per window). One key, 3 messages before the
# batch, 5 in it (messages 3..7):
#
#   message    0 1 | 2 3 | 4 5 | 6 7
#   frame        0     1     2     3
#   [0,4)      ===========            full at message 3: fires in this batch
#   [2,6)            ===========      full at message 5
#   [4,8)                  ========== full at message 7
#   [6,10)                       ==== open (2 messages): frame 3 is kept
def test_hopping_windows_fire_when_full_and_only_open_frames_stay() -> None:
    trigger = CountTrigger(4, 2)
    num = number(ints(0, 0, 0, 0, 0), counts=ints(3), n_keys=1, step=2)
    full = trigger.full_windows(num)
    assert full is not None
    assert full.frames.tolist() == [0, 1, 2]
    assert full.existed.tolist() == [True, True, False]  # [4,8) had no message before
    assert (full.keys.tolist(), full.first.tolist(), full.n_win.tolist()) == ([0], [0], [3])
    assert full.index.tolist() == [0, 1, 2]
    kept = trigger.kept(num)
    assert num.g_frame[kept.groups].tolist() == [3]
    assert kept.born.tolist() == [True]
    assert trigger.frame_completed(num).tolist() == [True]  # count 8: frame 4 starts


def test_no_window_fires_before_one_is_full() -> None:
    trigger = CountTrigger(4, 2)
    assert trigger.full_windows(number(ints(0, 0, 0), ints(0), 1, 2)) is None


# Tumbling, size 3: key 0 had 2 messages, gets 4 (messages 2..5); key 1 gets 1.
#
#   key 0   [0,3) full at message 2 (existed), [3,6) full at message 5 (new)
#   key 1   [0,3) holds 1 message: nothing fires
def test_tumbling_windows_are_full_frames() -> None:
    trigger = CountTrigger(3, 3)
    num = number(ints(0, 1, 0, 0, 0), counts=ints(2, 0), n_keys=2, step=3)
    full = trigger.full_frames(num)
    assert (full.kids.tolist(), full.frames.tolist()) == ([0, 0], [0, 1])
    assert full.existed.tolist() == [True, False]
    assert trigger.frame_completed(num).tolist() == [True, False]


# size 4, step 2; counts: key 0 has 5 messages, key 1 none, key 2 has 4
#
#   key 0   messages 0..4: [2,6) holds 2..4, [4,8) holds 4 -> open starts 1, 2
#   key 2   messages 0..3: [2,6) holds 2, 3                -> open start 1
def test_open_windows_are_those_holding_messages() -> None:
    trigger = CountTrigger(4, 2)
    wins = trigger.open_windows(ints(0, 1, 2), ints(5, 0, 4))
    assert wins.kids.tolist() == [0, 0, 2]
    assert wins.starts.tolist() == [1, 2, 1]
    assert wins.last.tolist() == [2, 2, 1]
    # messages [5, 6) are in the windows starting at messages 2 and 4
    near = trigger.overlapping(wins.select(ints(0, 1)), 5, 6)
    assert near.starts.tolist() == [1, 2]
    assert trigger.overlapping(wins, 0, 2).starts.tolist() == []

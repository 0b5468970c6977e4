"""The reference answers of the Nexmark queries, on small timelines drawn by hand."""

from __future__ import annotations

import numpy as np

from window_operator.nexmark import Auctions, Bids, Persons
from window_operator.nexmark.reference import (
    Session,
    final_watermark,
    q5_hot_items,
    q7_highest_bid,
    q8_new_users,
    q11_user_sessions,
)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def bids(rows: list[tuple[int, int, int, int]]) -> Bids:
    """(auction, bidder, price, dateTime) rows."""
    a, b, p, t = (i64(*col) for col in zip(*rows, strict=True))
    return Bids(np.arange(len(rows)), a, b, p, t, [""] * len(rows))


# time (s)      0    1    3         9    10        12             25
# auction 1     x         x                   x
# auction 2          x                   x
B = bids([(1, 7, 50, 0), (2, 7, 10, 1_000), (1, 8, 70, 3_000), (1, 7, 20, 9_000),
          (2, 8, 90, 10_000), (1, 8, 30, 12_000), (2, 7, 60, 25_000)])  # fmt: skip


def test_q5_counts_each_bid_in_the_five_hopping_windows_that_hold_it() -> None:
    got = q5_hot_items(B)
    # [-8, 2) .. [0, 10) hold the bid at 0 s; [2, 12) holds auction 1's bids at 3 and 9 s
    assert got[(1, -8_000)] == 1 and got[(1, 0)] == 3 and got[(1, 2_000)] == 2
    assert got[(1, 4_000)] == 2 and got[(2, 2_000)] == 1 and got[(2, 10_000)] == 1
    assert sum(got.values()) == 5 * len(B)
    # the watermark keeps only the windows that have ended: [-8, 2) holds the bids at 0, 1 s
    assert q5_hot_items(B, watermark=3_999) == {(1, -8_000): 1, (2, -8_000): 1}


def test_q7_is_the_highest_price_per_tumbling_window() -> None:
    assert q7_highest_bid(B) == {0: 70, 10_000: 90, 20_000: 60}
    assert q7_highest_bid(B, watermark=19_999) == {0: 70}


def test_q11_splits_a_bidders_bids_where_they_pause_longer_than_the_gap() -> None:
    # bidder 7: 0, 1, 9 s (one session), 25 s (16 s later: a new one)
    # bidder 8: 3, 10, 12 s (7 s and 2 s apart: one session)
    assert q11_user_sessions(B) == {
        (7, 0): Session(19_000, 3),
        (7, 25_000): Session(35_000, 1),
        (8, 3_000): Session(22_000, 3),
    }
    assert set(q11_user_sessions(B, watermark=21_999)) == {(7, 0)}
    # two bids exactly one gap apart are in the same session
    same = q11_user_sessions(bids([(1, 5, 1, 0), (1, 5, 1, 10_000)]))
    assert same == {(5, 0): Session(20_000, 2)}


def test_q8_pairs_new_persons_with_auctions_they_open_in_the_same_window() -> None:
    p = Persons(i64(0, 50, 100), i64(1000, 1001, 1002), ["Ann", "Bob", "Cy"], [""] * 3,
                [""] * 3, [""] * 3, [""] * 3, i64(1_000, 8_000, 15_000), [""] * 3)  # fmt: skip
    # 1000 sells at 9 s (same window as joining); 1001 joined at 8 s, sells at 11 s (next
    # window); 1002 sells twice in its window
    a = Auctions(i64(1, 51, 101, 102), i64(1000, 1001, 1002, 1003), [""] * 4, [""] * 4,
                 i64(1, 1, 1, 1), i64(2, 2, 2, 2), i64(9_000, 11_000, 16_000, 17_000),
                 i64(0, 0, 0, 0), i64(1000, 1001, 1002, 1002), i64(10, 10, 10, 10),
                 [""] * 4)  # fmt: skip
    assert q8_new_users(p, a) == {(1000, 0): "Ann", (1002, 10_000): "Cy"}
    assert q8_new_users(p, a, watermark=10_000) == {(1000, 0): "Ann"}


def test_the_final_watermark_is_the_slowest_partition_minus_the_lateness() -> None:
    times, parts = i64(5, 9, 7, 3), i64(0, 0, 1, 1)
    assert final_watermark(times, parts, 2, 1) == 6
    assert final_watermark(times, parts, 3, 1) is None  # partition 2 never saw an event

"""Reference answers of the Nexmark queries, computed in plain Python over generated events.

They are the oracles the benchmark and the tests check the jobs of ``config/nexmark/``
against. Windows are aligned to the epoch and half-open, ``[start, start + size)``; a
session of a key is a maximal run of its events each at most ``gap`` after the previous
one, reported as ``[first, last + gap)``.

A streaming job has only emitted the windows its watermark has passed (``end <=
watermark``); :func:`final_watermark` is that watermark once a topic has been read to
its end, and every answer takes it as ``watermark`` (``None``: every window).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from window_operator.arrays import IntArray
from window_operator.nexmark.generator import Auctions, Bids, Persons

__all__ = [
    "Session",
    "final_watermark",
    "q5_hot_items",
    "q7_highest_bid",
    "q8_new_users",
    "q11_user_sessions",
]


def final_watermark(
    times: IntArray, partition: IntArray, partitions: int, allowed_lateness: int
) -> int | None:
    """The watermark of a job that has read every event of a topic: the smallest of its
    partitions' largest event times, minus the allowed lateness (``None`` while a
    partition has no event: it holds the watermark back)."""
    highest = []
    for p in range(partitions):
        mine = times[partition == p]
        if not len(mine):
            return None
        highest.append(int(mine.max()))
    return min(highest) - allowed_lateness


def _closed(end: int, watermark: int | None) -> bool:
    return watermark is None or end <= watermark


def _rows(*columns: IntArray) -> Iterable[tuple[int, ...]]:
    return zip(*(c.tolist() for c in columns), strict=True)


def q5_hot_items(
    bids: Bids, size: int = 10_000, step: int = 2_000, watermark: int | None = None
) -> dict[tuple[int, int], int]:
    """Bids per ``(auction, window start)`` of hopping windows ``size`` every ``step``."""
    counts: Counter[tuple[int, int]] = Counter()
    for auction, t in _rows(bids.auction, bids.date_time):
        last = t - t % step
        for start in range(last, t - size, -step):
            counts[(auction, start)] += 1
    return {k: n for k, n in counts.items() if _closed(k[1] + size, watermark)}


def q7_highest_bid(bids: Bids, size: int = 10_000, watermark: int | None = None) -> dict[int, int]:
    """The highest price per tumbling window start."""
    best: dict[int, int] = {}
    for price, t in _rows(bids.price, bids.date_time):
        start = t - t % size
        if price > best.get(start, -1):
            best[start] = price
    return {s: p for s, p in best.items() if _closed(s + size, watermark)}


def q8_new_users(
    persons: Persons,
    auctions: Auctions,
    size: int = 10_000,
    watermark: int | None = None,
) -> dict[tuple[int, int], str]:
    """Persons who opened an auction in the tumbling window they joined in:
    ``(person id, window start) -> name``."""
    sold = {(seller, t - t % size) for seller, t in _rows(auctions.seller, auctions.date_time)}
    out: dict[tuple[int, int], str] = {}
    for pid, t, name in zip(persons.id.tolist(), persons.date_time.tolist(), persons.name,
                            strict=True):  # fmt: skip
        start = t - t % size
        if (pid, start) in sold and _closed(start + size, watermark):
            out[(pid, start)] = name
    return out


@dataclass(frozen=True)
class Session:
    """One session of a bidder: ``[start, end)`` and its number of bids."""

    end: int
    bids: int


def q11_user_sessions(
    bids: Bids, gap: int = 10_000, watermark: int | None = None
) -> dict[tuple[int, int], Session]:
    """Bids per session of each bidder: ``(bidder, session start) -> Session``."""
    order = np.lexsort((bids.date_time, bids.bidder))
    out: dict[tuple[int, int], Session] = {}
    current: tuple[int, int, int, int] | None = None  # bidder, start, last, count

    def close(s: tuple[int, int, int, int]) -> None:
        if _closed(s[2] + gap, watermark):
            out[(s[0], s[1])] = Session(s[2] + gap, s[3])

    for bidder, t in _rows(bids.bidder[order], bids.date_time[order]):
        if current is not None and current[0] == bidder and t - current[2] <= gap:
            current = (bidder, current[1], t, current[3] + 1)
            continue
        if current is not None:
            close(current)
        current = (bidder, t, t, 1)
    if current is not None:
        close(current)
    return out

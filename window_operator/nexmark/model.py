"""The Nexmark event model: its settings, and the arithmetic of event numbers, ids and times.

Nexmark (the auction-site benchmark of the streaming field, as specified by the Nexmark
project and Apache Beam) numbers the events of a stream 0, 1, 2, ... and derives almost
everything from that number:

* its **kind**: out of every 50 consecutive numbers, 1 is a new person, the next 3 are
  new auctions and the other 46 are bids (``number % 50``, the proportions 1 : 3 : 46);
* its **event time**: ``base_time + number / rate`` (``rate`` events per second of event
  time, truncated to the millisecond), so timestamps never decrease unless an
  out-of-order group shuffles the numbers inside each group of ``out_of_order_group``;
* the **ids** it creates and may refer to: persons and auctions get consecutive ids in
  creation order (the first ones are 1000), so the id of the latest person or auction
  at any point of the stream is a function of the number alone. Bids and auctions refer
  to recent ids: a *hot* id (the first id of the current group of 100) most of the time,
  otherwise a random one among the active people / in-flight auctions, with a small
  lead of ids that do not exist yet.

The random draws (which hot or random id, prices, strings) are made by the generator;
this module holds only the deterministic part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from window_operator.arrays import FloatArray, IntArray
from window_operator.errors import WindowOperatorError

__all__ = [
    "CATEGORIES",
    "FIRST_AUCTION_ID",
    "FIRST_CATEGORY_ID",
    "FIRST_PERSON_ID",
    "HOT_GROUP",
    "ID_LEAD",
    "MAX_ABS_TIME",
    "EventKind",
    "EventTimeRangeError",
    "NexmarkConfig",
]

#: The first person and auction ids (small streams still find joinable ids).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
#: Categories are ``FIRST_CATEGORY_ID .. FIRST_CATEGORY_ID + CATEGORIES - 1``.
FIRST_CATEGORY_ID = 10
CATEGORIES = 5
#: Ids up to this many past the latest created one may be referred to (not created yet).
ID_LEAD = 10
#: A hot seller, bidder or auction is the first (bidders: the second) id of its group
#: of this many consecutive ids.
HOT_GROUP = 100
#: Multiplier that spreads event numbers inside an out-of-order group.
_SHUFFLE = 953
#: A job rejects event times at or beyond this many ms either side of the epoch
#: (``BAD_TIMESTAMP``, :mod:`window_operator.events`).
MAX_ABS_TIME = 2**61


class EventTimeRangeError(WindowOperatorError, ValueError):
    """A stream whose times would leave the ±2^61 ms a job accepts (a rate too low for
    its number of events, or a base time too far out)."""


class EventKind(IntEnum):
    """What an event is (its position in the proportions cycle decides)."""

    PERSON = 0
    AUCTION = 1
    BID = 2


@dataclass(frozen=True, slots=True)
class NexmarkConfig:
    """The settings of a Nexmark stream (defaults: those of the reference generator).

    ``rate`` is events per second of *event time* (the reference ``firstEventRate``);
    ``base_time`` the event time of event 0 (epoch ms); ``seed`` fixes every random
    draw. ``hot_*_ratio`` r means a share of ``1 - 1/r`` of the references go to the
    hot id. ``*_bytes`` are the average sizes the ``extra`` padding fills records up to
    (``extra=False`` leaves it empty). ``out_of_order_group`` > 1 shuffles event numbers
    inside each group of that many events (1: in order).
    """

    rate: float = 10_000.0
    base_time: int = 0
    seed: int = 0
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    in_flight_auctions: int = 100
    active_people: int = 1000
    person_bytes: int = 200
    auction_bytes: int = 500
    bid_bytes: int = 100
    out_of_order_group: int = 1
    extra: bool = True

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be positive (got {self.rate})")
        if self.seed < 0:  # NumPy's seed sequences take no negative number
            raise ValueError(f"seed must be >= 0 (got {self.seed})")
        positive = {
            "person_proportion": self.person_proportion,
            "auction_proportion": self.auction_proportion,
            "bid_proportion": self.bid_proportion,
            "hot_auction_ratio": self.hot_auction_ratio,
            "hot_sellers_ratio": self.hot_sellers_ratio,
            "hot_bidders_ratio": self.hot_bidders_ratio,
            "in_flight_auctions": self.in_flight_auctions,
            "active_people": self.active_people,
            "out_of_order_group": self.out_of_order_group,
        }
        bad = [f"{name}={value}" for name, value in positive.items() if value < 1]
        if bad:
            raise ValueError(f"these settings must be >= 1: {', '.join(bad)}")

    @property
    def total_proportion(self) -> int:
        """Events per cycle of the proportions (50 by default)."""
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def delay_us(self) -> float:
        """Microseconds of event time between consecutive events."""
        return 1_000_000.0 / self.rate

    # -- numbers, kinds and times ---------------------------------------------------------

    def event_ids(self, numbers: IntArray) -> IntArray:
        """The id of the event at each position (= its number, shuffled within its group)."""
        g = self.out_of_order_group
        if g == 1:
            return numbers
        ids: IntArray = (numbers // g) * g + (numbers * _SHUFFLE) % g
        return ids

    def offsets_ms(self, ids: IntArray | FloatArray) -> FloatArray:
        """Whole milliseconds from ``base_time`` to the events with these ids, as floats
        (the far events of a slow rate do not fit an int64 of microseconds)."""
        us = np.floor(ids.astype(np.float64) * self.delay_us)
        ms: FloatArray = np.floor_divide(us, 1000.0)
        return ms

    def timestamps(self, ids: IntArray) -> IntArray:
        """Event time (epoch ms) of the events with these ids."""
        # a chunk computes the numbers past the stream's end too, which check_times does
        # not bound: those saturate instead of overflowing (they are dropped)
        ms = np.minimum(self.offsets_ms(ids), float(MAX_ABS_TIME)).astype(np.int64)
        ts: IntArray = self.base_time + ms
        return ts

    def check_times(self, stop: int) -> int:
        """The latest time (epoch ms) the events numbered below ``stop`` can carry: their
        event times and their auctions' expiries (at most two auction horizons after
        the auction). Raises :class:`EventTimeRangeError` when a time would be at or
        beyond ±2^61 ms, which a job rejects as ``BAD_TIMESTAMP``."""
        g = self.out_of_order_group
        last_id = max(stop - 1, 0) // g * g + g - 1  # the last id of the last group
        # as a float: the id of a huge stop may be past an int64
        horizon = np.array([float(last_id + self.auction_horizon_events())])
        with np.errstate(over="ignore", invalid="ignore"):  # an infinite delay is refused
            far = float(self.offsets_ms(horizon)[0])
        reach = "have no end (the rate puts them infinitely far apart)"
        if self.base_time <= -MAX_ABS_TIME:
            reach = f"start at {self.base_time} ms"
        elif math.isfinite(far):
            latest = self.base_time + 2 * int(far) + 1
            if latest < MAX_ABS_TIME:
                return latest
            reach = f"reach up to {latest} ms (auction expiries included)"
        raise EventTimeRangeError(
            f"the times of events 0 to {stop - 1} {reach}, and a job accepts times within ±2^61 ms"
        )

    def kinds(self, ids: IntArray) -> IntArray:
        """:class:`EventKind` of each id."""
        rem = ids % self.total_proportion
        p, a = self.person_proportion, self.person_proportion + self.auction_proportion
        kinds: IntArray = np.where(
            rem < p, EventKind.PERSON, np.where(rem < a, EventKind.AUCTION, EventKind.BID)
        ).astype(np.int64)
        return kinds

    # -- ids (base 0: add FIRST_PERSON_ID / FIRST_AUCTION_ID for the real ones) -----------

    def last_person(self, ids: IntArray) -> IntArray:
        """The latest person created at or before each event (base 0; the event's own
        id for a person event)."""
        cycle, pos = np.divmod(ids, self.total_proportion)
        last: IntArray = cycle * self.person_proportion + np.minimum(
            pos, self.person_proportion - 1
        )
        return last

    def last_auction(self, ids: IntArray) -> IntArray:
        """The latest auction created at or before each event (base 0; -1 before any)."""
        p, a = self.person_proportion, self.auction_proportion
        cycle, pos = np.divmod(ids, self.total_proportion)
        # before this cycle's auctions: the last one of the previous cycle
        within = np.clip(pos - p, -1, a - 1)
        last: IntArray = cycle * a + within
        return last

    def auction_horizon_events(self) -> int:
        """Events until ``in_flight_auctions`` more auctions have been created."""
        return self.in_flight_auctions * self.total_proportion // self.auction_proportion

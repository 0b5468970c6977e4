"""The Nexmark generator keeps the reference model: proportions, ids, references, times."""

from __future__ import annotations

import warnings

import numpy as np
import orjson
import pytest

from window_operator.nexmark import (
    NexmarkConfig,
    NexmarkEvents,
    auctions_json,
    bids_json,
    generate,
    persons_json,
)
from window_operator.nexmark.encoding import AUCTION_FIELDS, BID_FIELDS, PERSON_FIELDS
from window_operator.nexmark.model import (
    FIRST_AUCTION_ID,
    FIRST_PERSON_ID,
    ID_LEAD,
    MAX_ABS_TIME,
    EventTimeRangeError,
)
from window_operator.nexmark.topics import partitions_of

BASE = 1_700_000_000_000
N = 100_000
CFG = NexmarkConfig(base_time=BASE, seed=7)


@pytest.fixture(scope="module")
def events() -> NexmarkEvents:
    return generate(CFG, N)


def test_one_person_three_auctions_and_46_bids_in_every_50_events(events: NexmarkEvents) -> None:
    assert (len(events.persons), len(events.auctions), len(events.bids)) == (2_000, 6_000, 92_000)
    # the kind follows the position in the cycle of 50
    assert set((events.persons.number % 50).tolist()) == {0}
    assert set((events.auctions.number % 50).tolist()) == {1, 2, 3}
    assert set((events.bids.number % 50).tolist()) == set(range(4, 50))
    all_numbers = np.concatenate([c.number for c in (events.persons, events.auctions, events.bids)])
    assert np.array_equal(np.sort(all_numbers), np.arange(N))


def test_persons_and_auctions_get_consecutive_ids_from_1000(events: NexmarkEvents) -> None:
    assert np.array_equal(events.persons.id, FIRST_PERSON_ID + np.arange(2_000))
    assert np.array_equal(events.auctions.id, FIRST_AUCTION_ID + np.arange(6_000))


def test_event_time_advances_by_the_rate_and_never_goes_back(events: NexmarkEvents) -> None:
    for col in (events.persons, events.auctions, events.bids):
        # 10,000 events per second: event n happens n / 10 ms after the base time
        assert np.array_equal(col.date_time, BASE + col.number // 10)
    shuffled = generate(NexmarkConfig(base_time=BASE, out_of_order_group=100), 10_000).bids
    assert not np.all(np.diff(shuffled.date_time) >= 0)
    # out of order only within a group of 100 events (10 ms)
    assert np.all(np.abs(shuffled.date_time - (BASE + shuffled.number // 10)) <= 10)


def _latest(ids: np.ndarray, created_numbers: np.ndarray) -> np.ndarray:
    """Index of the latest creation at or before each event number (-1: none yet)."""
    return np.searchsorted(created_numbers, ids, side="right") - 1


def test_bids_refer_to_in_flight_auctions_and_active_people(events: NexmarkEvents) -> None:
    b = events.bids
    last_auction = _latest(b.number, events.auctions.number)
    assert np.all(b.auction - FIRST_AUCTION_ID >= np.maximum(last_auction - 100, 0))
    assert np.all(b.auction - FIRST_AUCTION_ID <= last_auction + ID_LEAD)
    last_person = _latest(b.number, events.persons.number)
    assert np.all(b.bidder - FIRST_PERSON_ID >= np.maximum(last_person - 999, 0))
    assert np.all(b.bidder - FIRST_PERSON_ID <= last_person + ID_LEAD)
    # hot auction: the first of the current group of 100 auctions, for half of the bids
    hot_auction = (last_auction // 100) * 100 + FIRST_AUCTION_ID
    assert 0.49 < np.mean(b.auction == hot_auction) < 0.53
    # hot bidder: the second person of the current group of 100, for 3 bids in 4
    hot_bidder = (last_person // 100) * 100 + 1 + FIRST_PERSON_ID
    assert 0.74 < np.mean(b.bidder == hot_bidder) < 0.77
    assert np.all(b.price >= 100) and np.all(b.price <= 100_000_000)


def test_auctions_are_sold_by_recent_people_mostly_hot_sellers(events: NexmarkEvents) -> None:
    a = events.auctions
    last_person = _latest(a.number, events.persons.number)
    assert np.all(a.seller - FIRST_PERSON_ID <= last_person + ID_LEAD)
    hot_seller = (last_person // 100) * 100 + FIRST_PERSON_ID
    assert 0.74 < np.mean(a.seller == hot_seller) < 0.77
    assert np.all(a.expires > a.date_time)
    assert np.all(a.reserve > a.initial_bid)
    assert set(a.category.tolist()) == {10, 11, 12, 13, 14}


def test_the_same_seed_gives_the_same_stream_in_any_pieces(events: NexmarkEvents) -> None:
    again = generate(CFG, N)
    assert bids_json(again.bids) == bids_json(events.bids)
    assert persons_json(again.persons) == persons_json(events.persons)
    # a range of the stream is the same events as the range of a longer one
    middle = generate(CFG, 10_000, start=45_000)
    assert auctions_json(middle.auctions) == auctions_json(events.between(45_000, 55_000).auctions)
    assert bids_json(generate(CFG, 1_000).bids) == bids_json(events.bids)[:920]
    other = generate(NexmarkConfig(base_time=BASE, seed=8), 1_000)
    assert bids_json(other.bids) != bids_json(events.bids)[:920]


def test_events_are_json_with_the_reference_fields(events: NexmarkEvents) -> None:
    p = orjson.loads(persons_json(events.persons)[5])
    assert tuple(p) == PERSON_FIELDS
    assert p["id"] == 1005 and p["dateTime"] == int(events.persons.date_time[5])
    assert p["emailAddress"].endswith(".com") and len(p["creditCard"]) == 19
    a = orjson.loads(auctions_json(events.auctions)[7])
    assert tuple(a) == AUCTION_FIELDS and a["seller"] == int(events.auctions.seller[7])
    bids = [orjson.loads(v) for v in bids_json(events.bids)[:1000]]
    assert all(tuple(b) == BID_FIELDS for b in bids)
    assert [b["price"] for b in bids] == events.bids.price[:1000].tolist()
    # padding brings bids to about 100 bytes of content on average (as the reference)
    assert 60 < np.mean([len(x) for x in events.bids.extra]) < 76
    bare = generate(NexmarkConfig(base_time=BASE, extra=False), 100)
    assert all(x == "" for x in bare.bids.extra)


def test_each_kind_is_spread_evenly_over_the_partitions(events: NexmarkEvents) -> None:
    for part in partitions_of(CFG, events, 4):
        assert np.bincount(part, minlength=4).tolist() == [len(part) // 4] * 4


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        NexmarkConfig(rate=0)
    with pytest.raises(ValueError, match="hot_bidders_ratio=0"):
        NexmarkConfig(hot_bidders_ratio=0)
    # NumPy's seed sequences take no negative number (its traceback reached the CLI)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        NexmarkConfig(seed=-1)


def test_a_stream_whose_times_leave_what_a_job_accepts_is_refused() -> None:
    # --rate 1e-12: 100 events 1e12 s apart, whose auctions expire past 2^61 ms (their
    # times passed an int64 of microseconds: NumPy warned and wrote -9.2e15 .. 9e15 ms)
    for cfg in (NexmarkConfig(rate=1e-12, base_time=BASE), NexmarkConfig(rate=5e-324)):
        with pytest.raises(EventTimeRangeError, match="2\\^61"):
            generate(cfg, 100)
    with pytest.raises(EventTimeRangeError):
        generate(NexmarkConfig(base_time=-MAX_ABS_TIME), 1)
    with pytest.raises(EventTimeRangeError):
        generate(NexmarkConfig(base_time=MAX_ABS_TIME), 1)


def test_a_slow_stream_within_range_has_its_times_without_overflow() -> None:
    # an event every 12,700 years: 60 events reach past an int64 of microseconds (9.2e15
    # ms), and their auctions expire within 2^61 ms (up to two auction horizons, 1,666
    # events, after their own time)
    cfg = NexmarkConfig(rate=2.5e-12, base_time=BASE)
    assert cfg.check_times(60) < MAX_ABS_TIME
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        events = generate(cfg, 60)
    times = np.concatenate(
        [events.persons.date_time, events.auctions.date_time, events.bids.date_time]
    )
    assert times.min() == BASE and np.all(np.diff(np.sort(times)) > 0)
    delay_ms = 1000.0 / cfg.rate
    assert abs(int(events.bids.date_time[-1]) - BASE - 59 * delay_ms) <= 59 * delay_ms * 1e-15
    assert np.all(events.auctions.expires > events.auctions.date_time)
    assert int(events.auctions.expires.max()) <= cfg.check_times(60)
    # the times of ordinary rates are those of the integer arithmetic they always had
    ordinary = NexmarkConfig(rate=7_777.0, base_time=BASE)
    ids = np.arange(0, 10**12, 10**7, dtype=np.int64)
    expected = BASE + np.floor(ids * ordinary.delay_us).astype(np.int64) // 1000
    assert np.array_equal(ordinary.timestamps(ids), expected)

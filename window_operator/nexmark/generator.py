"""The Nexmark generator: persons, auctions and bids as NumPy columns.

Events are generated in fixed chunks of :data:`CHUNK` event numbers, each with its own
random stream seeded by ``(seed, chunk index)``: the events at a position are the same
whatever range is asked for, so ``generate(cfg, n)`` is a prefix of ``generate(cfg, m)``
for ``n < m``, and a large stream can be produced piece by piece.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self

import numpy as np

from window_operator.arrays import IntArray
from window_operator.nexmark import strings
from window_operator.nexmark.model import (
    CATEGORIES,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_GROUP,
    ID_LEAD,
    EventKind,
    NexmarkConfig,
)

__all__ = ["CHUNK", "Auctions", "Bids", "NexmarkEvents", "Persons", "generate", "generate_chunks"]

#: Event numbers per independently seeded chunk.
CHUNK = 1 << 15

_FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
                "Deiter", "Walter")  # fmt: skip
_LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
               "Noris")  # fmt: skip
_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
           "Seattle", "Kent", "Cheyenne")  # fmt: skip
_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
#: Bytes a bid / an auction counts for its fixed-size fields when sizing ``extra``.
_BID_FIXED_BYTES = 32
_AUCTION_FIXED_BYTES = 48


class _Columns:
    """Columns of equal length; ``number`` is each row's position in the whole stream."""

    number: IntArray

    def __len__(self) -> int:
        return len(self.number)

    def take(self, mask: Any) -> Self:
        """The rows selected by a boolean mask or an index array."""
        idx = np.flatnonzero(mask) if np.asarray(mask).dtype == np.bool_ else mask
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            col = getattr(self, f.name)
            out[f.name] = col[idx] if isinstance(col, np.ndarray) else [col[i] for i in idx]
        return type(self)(**out)

    @classmethod
    def concat(cls, parts: Sequence[Self]) -> Self:
        """The rows of ``parts``, in order."""
        out: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            cols = [getattr(p, f.name) for p in parts]
            if cols and isinstance(cols[0], np.ndarray):
                out[f.name] = np.concatenate(cols)
            else:
                out[f.name] = [v for c in cols for v in c]
        return cls(**out)


@dataclass(frozen=True, eq=False)
class Persons(_Columns):
    """New persons (the reference's ``Person``)."""

    number: IntArray
    id: IntArray
    name: list[str]
    email_address: list[str]
    credit_card: list[str]
    city: list[str]
    state: list[str]
    date_time: IntArray
    extra: list[str]


@dataclass(frozen=True, eq=False)
class Auctions(_Columns):
    """New auctions (the reference's ``Auction``); ``seller`` is a person id."""

    number: IntArray
    id: IntArray
    item_name: list[str]
    description: list[str]
    initial_bid: IntArray
    reserve: IntArray
    date_time: IntArray
    expires: IntArray
    seller: IntArray
    category: IntArray
    extra: list[str]


@dataclass(frozen=True, eq=False)
class Bids(_Columns):
    """Bids (the reference's ``Bid``): an auction id, a bidder (person id), a price in cents."""

    number: IntArray
    auction: IntArray
    bidder: IntArray
    price: IntArray
    date_time: IntArray
    extra: list[str]


@dataclass(frozen=True)
class NexmarkEvents:
    """A range of a Nexmark stream, split by kind; each kind in stream order."""

    persons: Persons
    auctions: Auctions
    bids: Bids

    def __len__(self) -> int:
        return len(self.persons) + len(self.auctions) + len(self.bids)

    @classmethod
    def concat(cls, parts: Sequence[NexmarkEvents]) -> NexmarkEvents:
        """Consecutive ranges joined into one."""
        return cls(
            Persons.concat([p.persons for p in parts]),
            Auctions.concat([p.auctions for p in parts]),
            Bids.concat([p.bids for p in parts]),
        )

    def between(self, start: int, stop: int) -> NexmarkEvents:
        """The events with numbers in ``[start, stop)``."""
        return NexmarkEvents(
            self.persons.take((self.persons.number >= start) & (self.persons.number < stop)),
            self.auctions.take((self.auctions.number >= start) & (self.auctions.number < stop)),
            self.bids.take((self.bids.number >= start) & (self.bids.number < stop)),
        )


# -- the random draws -------------------------------------------------------------------


def _price(rng: np.random.Generator, n: int) -> IntArray:
    """Prices in cents, log-uniform from 1 to 1,000,000 dollars."""
    return np.floor(10.0 ** (rng.random(n) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _random_person(cfg: NexmarkConfig, rng: np.random.Generator, ids: IntArray) -> IntArray:
    """A random one of the latest ``active_people`` persons, or one of the next few (base 0)."""
    people = cfg.last_person(ids) + 1
    active = np.minimum(people, cfg.active_people)
    picked: IntArray = people - active + rng.integers(0, active + ID_LEAD)
    return picked


def _random_auction(cfg: NexmarkConfig, rng: np.random.Generator, ids: IntArray) -> IntArray:
    """A random one of the auctions likely still in flight, or one of the next few (base 0)."""
    last = cfg.last_auction(ids)
    low = np.maximum(last - cfg.in_flight_auctions, 0)
    picked: IntArray = low + rng.integers(0, last - low + 1 + ID_LEAD)
    return picked


def _hot(rng: np.random.Generator, ratio: int, n: int) -> Any:
    """Which draws go to the hot id: ``1 - 1/ratio`` of them."""
    return rng.integers(0, ratio, n) > 0


def _lengths(values: list[str]) -> IntArray:
    return np.fromiter(map(len, values), dtype=np.int64, count=len(values))


def _extra(
    cfg: NexmarkConfig, rng: np.random.Generator, sizes: IntArray, average: int
) -> list[str]:
    if not cfg.extra:
        return [""] * len(sizes)
    return strings.padding(rng, sizes, average)


def _persons(cfg: NexmarkConfig, rng: np.random.Generator, number: IntArray) -> Persons:
    ids = cfg.event_ids(number)
    n = len(ids)
    first = strings.pick(rng, _FIRST_NAMES, n)
    name = [f"{a} {b}" for a, b in zip(first, strings.pick(rng, _LAST_NAMES, n), strict=True)]
    user, host = strings.words(rng, 7, n), strings.words(rng, 5, n)
    email = [f"{u}@{h}.com" for u, h in zip(user, host, strict=True)]
    digits = rng.integers(0, 10_000, (n, 4)).tolist()
    card = [f"{a:04d} {b:04d} {c:04d} {d:04d}" for a, b, c, d in digits]
    city, state = strings.pick(rng, _CITIES, n), strings.pick(rng, _STATES, n)
    size = 8 + sum(_lengths(c) for c in (name, email, card, city, state))
    extra = _extra(cfg, rng, np.asarray(size, dtype=np.int64), cfg.person_bytes)
    pid = cfg.last_person(ids) + FIRST_PERSON_ID
    return Persons(number, pid, name, email, card, city, state, cfg.timestamps(ids), extra)


def _auctions(cfg: NexmarkConfig, rng: np.random.Generator, number: IntArray) -> Auctions:
    ids = cfg.event_ids(number)
    n = len(ids)
    ts = cfg.timestamps(ids)
    hot = _hot(rng, cfg.hot_sellers_ratio, n)
    hot_seller = cfg.last_person(ids) // HOT_GROUP * HOT_GROUP
    seller = np.where(hot, hot_seller, _random_person(cfg, rng, ids)) + FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + rng.integers(0, CATEGORIES, n)
    initial = _price(rng, n)
    # auctions last on average as long as it takes to create in_flight_auctions more
    horizon = cfg.timestamps(ids + cfg.auction_horizon_events()) - ts
    expires = ts + 1 + rng.integers(0, np.maximum(2 * horizon, 1))
    item, desc = strings.words(rng, 20, n), strings.words(rng, 100, n)
    reserve = initial + _price(rng, n)
    size = _AUCTION_FIXED_BYTES + _lengths(item) + _lengths(desc)
    extra = _extra(cfg, rng, size, cfg.auction_bytes)
    aid = cfg.last_auction(ids) + FIRST_AUCTION_ID
    return Auctions(number, aid, item, desc, initial, reserve, ts, expires, seller, category, extra)


def _bids(cfg: NexmarkConfig, rng: np.random.Generator, number: IntArray) -> Bids:
    ids = cfg.event_ids(number)
    n = len(ids)
    hot_auction = cfg.last_auction(ids) // HOT_GROUP * HOT_GROUP
    auction = np.where(
        _hot(rng, cfg.hot_auction_ratio, n), hot_auction, _random_auction(cfg, rng, ids)
    )
    # the second id of the group, so hot bidders are not the hot sellers
    hot_bidder = cfg.last_person(ids) // HOT_GROUP * HOT_GROUP + 1
    bidder = np.where(
        _hot(rng, cfg.hot_bidders_ratio, n), hot_bidder, _random_person(cfg, rng, ids)
    )
    price = _price(rng, n)
    extra = _extra(cfg, rng, np.full(n, _BID_FIXED_BYTES, dtype=np.int64), cfg.bid_bytes)
    return Bids(
        number,
        auction + FIRST_AUCTION_ID,
        bidder + FIRST_PERSON_ID,
        price,
        cfg.timestamps(ids),
        extra,
    )


def _chunk(cfg: NexmarkConfig, index: int) -> NexmarkEvents:
    rng = np.random.default_rng([cfg.seed, index])
    number = np.arange(index * CHUNK, (index + 1) * CHUNK, dtype=np.int64)
    kind = cfg.kinds(cfg.event_ids(number))
    return NexmarkEvents(
        _persons(cfg, rng, number[kind == EventKind.PERSON]),
        _auctions(cfg, rng, number[kind == EventKind.AUCTION]),
        _bids(cfg, rng, number[kind == EventKind.BID]),
    )


def generate_chunks(
    cfg: NexmarkConfig, events: int, start: int = 0, per_chunk: int = 4
) -> Iterator[NexmarkEvents]:
    """Events ``[start, start + events)`` in consecutive pieces of up to ``per_chunk``
    chunks (bounded memory for long streams). Raises
    :class:`~window_operator.nexmark.model.EventTimeRangeError` at once when their times
    would leave what a job accepts."""
    if events < 0 or start < 0:
        raise ValueError("events and start must be >= 0")
    stop = start + events
    cfg.check_times(stop)
    first, last = start // CHUNK, (stop + CHUNK - 1) // CHUNK
    for lo in range(first, last, per_chunk):
        hi = min(lo + per_chunk, last)
        part = NexmarkEvents.concat([_chunk(cfg, i) for i in range(lo, hi)])
        if lo * CHUNK < start or hi * CHUNK > stop:
            part = part.between(start, stop)
        yield part


def generate(cfg: NexmarkConfig, events: int, start: int = 0) -> NexmarkEvents:
    """The events with numbers ``[start, start + events)`` of the stream of ``cfg``."""
    parts = list(generate_chunks(cfg, events, start))
    if not parts:
        return NexmarkEvents.concat([_chunk(cfg, 0).between(0, 0)])
    return parts[0] if len(parts) == 1 else NexmarkEvents.concat(parts)

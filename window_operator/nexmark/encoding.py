"""Nexmark events as JSON: one object per event, the reference's field names.

``dateTime`` and ``expires`` are epoch milliseconds. The generator's strings are
letters and spaces only, so they are written without escaping.
"""

from __future__ import annotations

from window_operator.nexmark.generator import Auctions, Bids, Persons

__all__ = [
    "AUCTION_FIELDS",
    "BID_FIELDS",
    "PERSON_FIELDS",
    "auctions_json",
    "bids_json",
    "persons_json",
]

PERSON_FIELDS = ("id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra")
AUCTION_FIELDS = ("id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires",
                  "seller", "category", "extra")  # fmt: skip
BID_FIELDS = ("auction", "bidder", "price", "dateTime", "extra")

_PERSON = (
    '{"id":%d,"name":"%s","emailAddress":"%s","creditCard":"%s","city":"%s","state":"%s",'
    '"dateTime":%d,"extra":"%s"}'
)
_AUCTION = (
    '{"id":%d,"itemName":"%s","description":"%s","initialBid":%d,"reserve":%d,"dateTime":%d,'
    '"expires":%d,"seller":%d,"category":%d,"extra":"%s"}'
)
_BID = '{"auction":%d,"bidder":%d,"price":%d,"dateTime":%d,"extra":"%s"}'


def persons_json(p: Persons) -> list[bytes]:
    """One JSON object per person."""
    rows = zip(p.id.tolist(), p.name, p.email_address, p.credit_card, p.city, p.state,
               p.date_time.tolist(), p.extra, strict=True)  # fmt: skip
    return [(_PERSON % row).encode() for row in rows]


def auctions_json(a: Auctions) -> list[bytes]:
    """One JSON object per auction."""
    rows = zip(a.id.tolist(), a.item_name, a.description, a.initial_bid.tolist(),
               a.reserve.tolist(), a.date_time.tolist(), a.expires.tolist(), a.seller.tolist(),
               a.category.tolist(), a.extra, strict=True)  # fmt: skip
    return [(_AUCTION % row).encode() for row in rows]


def bids_json(b: Bids) -> list[bytes]:
    """One JSON object per bid."""
    rows = zip(b.auction.tolist(), b.bidder.tolist(), b.price.tolist(), b.date_time.tolist(),
               b.extra, strict=True)  # fmt: skip
    return [(_BID % row).encode() for row in rows]

"""Filling Kafka topics with a Nexmark stream: one topic per event kind, JSON values.

Records have no key. The ``i``-th person, auction or bid goes to partition
``i % partitions`` of its topic, so every partition of every topic gets data and each
partition is in stream order (the job's watermark is per partition). Topics are created
with ``retention.ms=-1``: the stream may carry event times from the past.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.arrays import IntArray
from window_operator.errors import WindowOperatorError
from window_operator.kafka_admin import KafkaAdmin, TopicSpec
from window_operator.nexmark.encoding import auctions_json, bids_json, persons_json
from window_operator.nexmark.generator import NexmarkEvents, generate_chunks
from window_operator.nexmark.model import FIRST_AUCTION_ID, FIRST_PERSON_ID, NexmarkConfig
from window_operator.observe.logs import kafka_logger

__all__ = [
    "DEFAULT_PREFIX",
    "DeliveryErrors",
    "FillReport",
    "NexmarkTopics",
    "UnacknowledgedError",
    "create_topics",
    "fill_topics",
    "partitions_of",
    "produce_events",
]

DEFAULT_PREFIX = "nexmark-"
_PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "enable.idempotence": True,
    "compression.type": "lz4",
}


class UnacknowledgedError(WindowOperatorError):
    """The broker did not acknowledge every produced record."""


@dataclass(frozen=True)
class NexmarkTopics:
    """The three topics of a stream: persons, auctions, bids."""

    persons: str
    auctions: str
    bids: str

    @classmethod
    def with_prefix(cls, prefix: str = DEFAULT_PREFIX) -> NexmarkTopics:
        """``<prefix>persons``, ``<prefix>auctions``, ``<prefix>bids``."""
        return cls(f"{prefix}persons", f"{prefix}auctions", f"{prefix}bids")

    def names(self) -> tuple[str, str, str]:
        """The three names, persons first."""
        return (self.persons, self.auctions, self.bids)


@dataclass
class FillReport:
    """What :func:`fill_topics` produced."""

    persons: int = 0
    auctions: int = 0
    bids: int = 0
    first_time: int | None = None
    last_time: int | None = None
    seconds: float = 0.0

    @property
    def events(self) -> int:
        """Records produced, all kinds."""
        return self.persons + self.auctions + self.bids

    def add(self, events: NexmarkEvents) -> None:
        """Count a produced piece of the stream."""
        self.persons += len(events.persons)
        self.auctions += len(events.auctions)
        self.bids += len(events.bids)
        times = [c.date_time for c in (events.persons, events.auctions, events.bids) if len(c)]
        if times:
            lo, hi = min(int(t.min()) for t in times), max(int(t.max()) for t in times)
            self.first_time = lo if self.first_time is None else min(self.first_time, lo)
            self.last_time = hi if self.last_time is None else max(self.last_time, hi)


def create_topics(bootstrap_servers: str, topics: NexmarkTopics, partitions: int) -> list[str]:
    """Create the topics that do not exist yet (kept forever); the ones created."""
    specs = [TopicSpec(t, partitions, {"retention.ms": "-1"}) for t in topics.names()]
    return KafkaAdmin(bootstrap_servers).create_topics(specs)


def partitions_of(cfg: NexmarkConfig, events: NexmarkEvents, partitions: int) -> list[IntArray]:
    """The partition of every person, auction and bid (their ordinal modulo ``partitions``)."""
    bid_ids = cfg.event_ids(events.bids.number)
    cycle, pos = np.divmod(bid_ids, cfg.total_proportion)
    bid_ordinal = cycle * cfg.bid_proportion + pos - cfg.person_proportion - cfg.auction_proportion
    return [
        (events.persons.id - FIRST_PERSON_ID) % partitions,
        (events.auctions.id - FIRST_AUCTION_ID) % partitions,
        bid_ordinal % partitions,
    ]


class DeliveryErrors:
    """A delivery callback that keeps the first error and counts them."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def __call__(self, error: Any, _message: Any) -> None:
        """Delivery report of one record."""
        if error is not None:
            self.count += 1
            if self.first is None:
                self.first = str(error)


def produce_events(
    producer: Any,
    cfg: NexmarkConfig,
    events: NexmarkEvents,
    topics: NexmarkTopics,
    partitions: int,
    on_delivery: DeliveryErrors | None = None,
) -> None:
    """Queue one piece of the stream on ``producer`` (a confluent-kafka ``Producer``)."""
    values = (
        persons_json(events.persons),
        auctions_json(events.auctions),
        bids_json(events.bids),
    )
    parts = partitions_of(cfg, events, partitions)
    for topic, vals, part in zip(topics.names(), values, parts, strict=True):
        produce = producer.produce
        for value, p in zip(vals, part.tolist(), strict=True):
            while True:
                try:
                    produce(topic, value=value, partition=p, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)


def fill_topics(
    bootstrap_servers: str,
    cfg: NexmarkConfig,
    events: int,
    *,
    topics: NexmarkTopics,
    partitions: int = 4,
    start: int = 0,
    producer_config: Mapping[str, Any] | None = None,
    on_piece: Callable[[NexmarkEvents], None] | None = None,
) -> FillReport:
    """Generate events ``[start, start + events)`` and produce them to ``topics``.

    Creates missing topics with ``partitions`` partitions. ``on_piece`` sees every
    generated piece (e.g. to keep what the reference answers need). Raises
    :class:`UnacknowledgedError` when the broker does not acknowledge every record, and
    :class:`~window_operator.nexmark.model.EventTimeRangeError`, before any topic is
    created, when the events' times would leave what a job accepts.
    """
    from confluent_kafka import Producer

    cfg.check_times(start + events)
    create_topics(bootstrap_servers, topics, partitions)
    conf = {
        **_PRODUCER_DEFAULTS,
        "logger": kafka_logger(),
        **(producer_config or {}),
        "bootstrap.servers": bootstrap_servers,
    }
    producer = Producer(conf)
    report = FillReport()
    errors = DeliveryErrors()
    started = time.perf_counter()
    for piece in generate_chunks(cfg, events, start):
        produce_events(producer, cfg, piece, topics, partitions, errors)
        report.add(piece)
        if on_piece is not None:
            on_piece(piece)
    left = producer.flush(300)
    if left or errors.count:
        raise UnacknowledgedError(
            f"{left + errors.count} records were not acknowledged by {bootstrap_servers}"
            + (f" (first error: {errors.first})" if errors.first else "")
        )
    report.seconds = time.perf_counter() - started
    return report

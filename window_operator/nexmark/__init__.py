"""Nexmark, the auction benchmark of the streaming field: its event model and generator.

A Nexmark stream is persons, auctions and bids in the proportions 1 : 3 : 46, with ids
and event times derived from each event's position in the stream (:mod:`.model`),
generated as NumPy columns (:mod:`.generator`), written as JSON (:mod:`.encoding`) to
one Kafka topic per kind (:mod:`.topics`). :mod:`.reference` computes the answers of the
queries of ``config/nexmark/`` in plain Python, to check jobs against.

    from window_operator.nexmark import NexmarkConfig, generate
    events = generate(NexmarkConfig(base_time=1_700_000_000_000, seed=1), 1_000_000)
    events.bids.price, events.bids.date_time, events.persons.name, ...
"""

from window_operator.nexmark.encoding import auctions_json, bids_json, persons_json
from window_operator.nexmark.generator import (
    Auctions,
    Bids,
    NexmarkEvents,
    Persons,
    generate,
    generate_chunks,
)
from window_operator.nexmark.model import EventKind, EventTimeRangeError, NexmarkConfig
from window_operator.nexmark.topics import (
    FillReport,
    NexmarkTopics,
    UnacknowledgedError,
    fill_topics,
)

__all__ = [
    "Auctions",
    "Bids",
    "EventKind",
    "EventTimeRangeError",
    "FillReport",
    "NexmarkConfig",
    "NexmarkEvents",
    "NexmarkTopics",
    "Persons",
    "UnacknowledgedError",
    "auctions_json",
    "bids_json",
    "fill_topics",
    "generate",
    "generate_chunks",
    "persons_json",
]

"""Kafka producers of a worker process: shared plain ones, one transactional one per task.

A new producer waits for its producer id before its first acknowledgement, so a worker
keeps its producers between micro-batches. Under exactly-once every state task has its
own transactional producer, ``transactional.id = <job>-task-<n>``: initialising it
fences every older producer of the same task (a zombie: a task Spark re-ran elsewhere,
a worker that came back) and resolves a transaction a dead producer left open. A
producer that failed is discarded, never reused: the next batch of its task gets a fresh
one (a fenced or fatally failed producer cannot be used again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "close_producers",
    "discard_producer",
    "plain_producer",
    "transactional_id",
    "transactional_producer",
]

_PLAIN: dict[str, Any] = {}
_TRANSACTIONAL: dict[str, Any] = {}


def _key(config: Mapping[str, Any]) -> str:
    return repr(sorted(config.items()))


def transactional_id(job: str, task: int) -> str:
    """The transactional id of a state task (stable across restarts and hosts)."""
    return f"{job}-task-{task}"


def plain_producer(config: Mapping[str, Any]) -> Any:
    """The worker's producer for ``config`` (idempotent, not transactional)."""
    from confluent_kafka import Producer

    key = _key(config)
    producer = _PLAIN.get(key)
    if producer is None:
        producer = _PLAIN[key] = Producer(dict(config))
    return producer


def transactional_producer(config: Mapping[str, Any], txn_id: str, timeout_s: float) -> Any:
    """The worker's producer of one transactional id, initialised (fencing older ones)."""
    from confluent_kafka import Producer

    key = _key({**config, "transactional.id": txn_id})
    producer = _TRANSACTIONAL.get(key)
    if producer is None:
        producer = Producer({**config, "transactional.id": txn_id})
        producer.init_transactions(timeout_s)
        _TRANSACTIONAL[key] = producer
    return producer


def discard_producer(producer: Any) -> None:
    """Forget a producer after a failure (it may be fenced or in a fatal state)."""
    for cache in (_PLAIN, _TRANSACTIONAL):
        for key in [k for k, p in cache.items() if p is producer]:
            del cache[key]


def close_producers(timeout_s: float = 5.0) -> None:
    """Flush and forget every cached producer (before their broker goes away)."""
    for producer in _PLAIN.values():
        producer.flush(timeout_s)
    _PLAIN.clear()
    _TRANSACTIONAL.clear()

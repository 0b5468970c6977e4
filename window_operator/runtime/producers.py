"""Kafka producers of a worker process: shared plain ones, one transactional one per task.

A new producer waits for its producer id before its first acknowledgement, so a worker
keeps its producers between micro-batches. Under exactly-once every state task has its
own transactional producer, ``transactional.id = <job>-task-<n>``: initialising it
fences every older producer of the same task (a zombie: a task Spark re-ran elsewhere,
a worker that came back) and resolves a transaction a dead producer left open. A
producer that failed is discarded, never reused: the next batch of its task gets a fresh
one (a fenced or fatally failed producer cannot be used again). A task's store records
which producer last committed it (its *writer token*): when a task comes back to a worker
after running elsewhere, the worker's old producer is known to be fenced and is replaced
before the batch, not found out by a failed commit.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING

from window_operator.runtime.kafka_waits import Stopping, until_done
from window_operator.runtime.settings import KafkaConfig, TaskSettings

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = [
    "close_producers",
    "discard_producer",
    "plain_producer",
    "task_producer",
    "transactional_id",
    "transactional_producer",
]

_PLAIN: dict[str, Producer] = {}
#: per transactional id: the producer and its writer token
_TRANSACTIONAL: dict[str, tuple[Producer, str]] = {}


def _key(config: KafkaConfig) -> str:
    return repr(sorted(config.items()))


def transactional_id(job: str, task: int) -> str:
    """The transactional id of a state task (stable across restarts and hosts)."""
    return f"{job}-task-{task}"


def plain_producer(config: KafkaConfig) -> Producer:
    """The worker's producer for ``config`` (idempotent, not transactional)."""
    from confluent_kafka import Producer

    key = _key(config)
    producer = _PLAIN.get(key)
    if producer is None:
        producer = _PLAIN[key] = Producer(dict(config))
    return producer


def transactional_producer(
    config: KafkaConfig,
    txn_id: str,
    timeout_s: float,
    last_writer: str | None,
    stopping: Stopping = None,
) -> tuple[Producer, str]:
    """The worker's initialised producer of one transactional id, and its writer token.

    ``last_writer`` is the token of the producer that last committed the task's store
    here (None: unknown). A cached producer with another token may have been fenced by
    that writer since: it is replaced by a new one (whose initialisation fences every
    older producer of the id and resolves a transaction left open).
    """
    from confluent_kafka import Producer

    key = _key({**config, "transactional.id": txn_id})
    cached = _TRANSACTIONAL.get(key)
    if cached is not None and cached[1] == last_writer:
        return cached
    producer = Producer({**config, "transactional.id": txn_id})
    until_done(producer.init_transactions, timeout_s, stopping, "the producer's initialisation")
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    _TRANSACTIONAL[key] = (producer, token)
    return producer, token


def task_producer(
    settings: TaskSettings, task: int, last_writer: str | None, stopping: Stopping = None
) -> tuple[Producer, str | None]:
    """The producer of a state task's batch, and its writer token (exactly-once only);
    ``last_writer``: the token of the producer that last committed the task's store;
    ``stopping``: whether the job was asked to stop (the initialisation then gives up)."""
    if settings.exactly_once:
        txn = transactional_id(settings.job, task)
        config = settings.producer_config()
        timeout_s = settings.broker_timeout_s
        return transactional_producer(config, txn, timeout_s, last_writer, stopping)
    return plain_producer(settings.producer_config()), None


def discard_producer(producer: Producer) -> None:
    """Forget a producer after a failure (it may be fenced or in a fatal state)."""
    for key in [k for k, p in _PLAIN.items() if p is producer]:
        del _PLAIN[key]
    for key in [k for k, (p, _) in _TRANSACTIONAL.items() if p is producer]:
        del _TRANSACTIONAL[key]


def close_producers(timeout_s: float = 5.0) -> None:
    """Flush and forget every cached producer (before their broker goes away)."""
    for producer in _PLAIN.values():
        producer.flush(timeout_s)
    _PLAIN.clear()
    _TRANSACTIONAL.clear()

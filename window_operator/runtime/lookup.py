"""Reading input back from Kafka: a partition range (the map side's read, and a state
task's re-read of input its state lacks), and single records (the original bytes of a
row that made the operator raise: the exchange carries decoded columns, not bytes)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.settings import KafkaConfig

__all__ = ["read_input", "read_records"]


def read_records(
    consumer_config: KafkaConfig,
    topic: str,
    partition: int,
    offsets: Iterable[int],
    *,
    timeout_s: float = 10.0,
) -> dict[int, tuple[bytes | None, bytes | None]]:
    """``{offset: (key, value)}`` of the records at ``offsets`` (missing ones are left out)."""
    from confluent_kafka import Consumer, TopicPartition

    wanted = sorted(set(offsets))
    found: dict[int, tuple[bytes | None, bytes | None]] = {}
    if not wanted:
        return found
    consumer = Consumer(
        {
            **consumer_config,
            "group.id": f"window-operator-lookup-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        for offset in wanted:
            consumer.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is None and msg.offset() == offset:
                    found[offset] = (msg.key(), msg.value())
                break
    finally:
        consumer.close()
    return found


def read_input(
    consumer_config: KafkaConfig,
    topic: str,
    partition: int,
    start: int,
    until: int,
    *,
    timeout_s: float,
) -> InputRecords:
    """The records ``start <= offset < until`` of an input partition (``start`` may be
    :data:`~window_operator.kafka_range.EARLIEST`), with keys, values and timestamps.

    Raises :class:`~window_operator.kafka_range.KafkaSourceError` when they are gone
    (deleted by retention) or the broker delivers nothing for ``timeout_s``.
    """
    from window_operator.kafka_range import KafkaRange, range_consumer_config, read_messages

    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    rng = KafkaRange(
        topic,
        partition,
        start,
        until,
        range_consumer_config(consumer_config),
        poll_timeout_ms=int(timeout_s * 1000),
    )
    for msgs in read_messages(rng):
        for m in msgs:
            offsets.append(m.offset())
            keys.append(m.key())
            values.append(m.value())
            kind, ts = m.timestamp()
            stamps.append(ts if kind else -1)
    return InputRecords(topic, partition, offsets, keys, values, stamps)

"""Reading single input records back from Kafka (for the rare error record of a row that
made the operator raise: the exchange carries decoded columns, not the original bytes)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["read_records"]


def read_records(
    consumer_config: Mapping[str, Any],
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

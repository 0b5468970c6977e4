"""Helpers for the Kafka source tests: produce records, run a query to completion."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

Record = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


# ---------------------------------------------------------------------------------------
# helpers


def produce(
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]],
    producer: Producer | None = None,
) -> list[Record]:
    """Produce (partition, key, value, headers); return the records with their offsets."""
    own = producer is None
    p = producer or Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    out: list[Record] = []

    def on_delivery(hdrs: tuple[tuple[str, bytes | None], ...]) -> Callable[[Any, Any], None]:
        # Delivery reports do not carry the headers: remember what was sent.
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), hdrs))

        return delivered

    for part, key, value, headers in items:
        p.produce(
            topic,
            key=key,
            value=value,
            partition=part,
            headers=headers,
            on_delivery=on_delivery(tuple(headers or ())),
        )
        p.poll(0)
    if own:
        assert p.flush(30) == 0
    return out


def simple_items(n: int, partitions: int = 4, tag: str = "r") -> list[Any]:
    return [(i % partitions, f"{tag}{i}".encode(), f"v-{tag}-{i}".encode(), None) for i in range(n)]


@dataclass
class Batch:
    batch_id: int
    num_partitions: int
    records: list[Record]


def as_bytes(x: Any) -> bytes | None:
    return None if x is None else bytes(x)


def run_available_now(df: Any, checkpoint: Path, timeout_s: float = 60) -> list[Batch]:
    """Run ``df`` to completion with Trigger.AvailableNow, collecting every micro-batch."""
    batches: list[Batch] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.select("partition", "offset", "key", "value", "headers").collect()
        records = [
            (
                r.partition,
                r.offset,
                as_bytes(r.key),
                as_bytes(r.value),
                tuple((h.key, as_bytes(h.value)) for h in (r.headers or ())),
            )
            for r in rows
        ]
        batches.append(Batch(batch_id, batch_df.rdd.getNumPartitions(), records))

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(timeout_s), "AvailableNow query did not finish"
    finally:
        if query.isActive:
            query.stop()
    return batches


def all_records(batches: list[Batch]) -> Counter[Record]:
    return Counter(r for b in batches for r in b.records)


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    return producer


def transaction(
    bootstrap: str, producer: Producer, topic: str, items: list[Any], commit: bool
) -> list[Record]:
    producer.begin_transaction()
    recs = produce(bootstrap, topic, items, producer=producer)
    assert producer.flush(30) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    return recs

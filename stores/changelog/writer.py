"""Logging a task store's batches to its changelog partition."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stores.changelog.records import CF_TAGS, ChangelogError, is_marker
from stores.rocks import BulkPut, ColumnFamily, Mutation, MutationKind, StoreBatch, TaskStore

__all__ = ["ChangelogDelivery", "ChangelogWriter", "produce"]

Headers = list[tuple[str, bytes]]


def produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    *,
    partition: int | None = None,
    headers: Headers | None = None,
    on_delivery: Any = None,
) -> None:
    """``producer.produce``, waiting (serving delivery reports) while its queue is full."""
    while True:
        try:
            if partition is None:
                producer.produce(
                    topic, key=key, value=value, headers=headers, on_delivery=on_delivery
                )
            else:
                producer.produce(
                    topic,
                    key=key,
                    value=value,
                    partition=partition,
                    headers=headers,
                    on_delivery=on_delivery,
                )
            return
        except BufferError:
            producer.poll(0.05)


@dataclass
class ChangelogDelivery:
    """Delivery reports of one logged batch (a producer ``on_delivery`` callback)."""

    topic: str
    partition: int
    records: int = 0
    last_offset: int = -1
    errors: list[str] = field(default_factory=list)

    def __call__(self, err: Any, msg: Any) -> None:
        """Record one delivery report."""
        if err is not None:
            self.errors.append(str(err))
        elif msg.offset() is not None and msg.offset() > self.last_offset:
            self.last_offset = msg.offset()

    def marker_offset(self, unacknowledged: int = 0) -> int:
        """The offset of the commit marker once every record is acknowledged."""
        if unacknowledged or self.errors:
            raise ChangelogError(
                f"changelog {self.topic}[{self.partition}]: {unacknowledged} records "
                f"unacknowledged, errors: {self.errors[:3]}"
            )
        return self.last_offset


class ChangelogWriter:
    """Logs the mutations of a task's store batches to its changelog partition.

    A record's key is the column family's tag byte and the store key, its value the
    stored bytes (a tombstone for a delete); the commit marker (the checkpoint, last)
    carries the headers ``cf``, ``batch`` and ``offsets``. Every record gets a delivery
    report callback, unless ``transactional``: a transaction commits only if every one
    of its records was written, so only the marker's report is needed (its offset).
    Per-record callbacks and headers are a large part of the cost of a changelog record.
    """

    def __init__(
        self, producer: Any, topic: str, partition: int, *, transactional: bool = False
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.transactional = transactional
        self._headers = {cf: [("cf", cf.value.encode())] for cf in ColumnFamily}

    def write(
        self,
        batch: StoreBatch,
        store: TaskStore,
        *,
        batch_number: int,
        source_offsets: Iterable[tuple[tuple[int, int], int]],
        extra: Sequence[tuple[ColumnFamily, bytes, bytes | None]] = (),
    ) -> ChangelogDelivery:
        """Produce ``extra`` records then ``batch`` (marker last), without waiting.

        Range deletes become one tombstone per key currently in the store or put
        earlier in the same batch, so this must run before ``batch`` is committed to
        ``store``. The caller flushes (or commits the transaction) and then reads the
        marker's offset from the returned delivery.
        """
        delivery = ChangelogDelivery(self.topic, self.partition)
        send = self._sender(delivery)
        for cf, key, value in extra:
            send(CF_TAGS[cf] + key, value)
        marker: Mutation | None = None
        for i, e in enumerate(batch.entries):
            if isinstance(e, BulkPut):
                tag = CF_TAGS[e.cf]
                for k, v in zip(e.keys, e.values, strict=True):
                    send(tag + k, v)
            elif e.kind is MutationKind.PUT and is_marker(e.cf, e.key):
                marker = e  # the checkpoint is the commit marker: send it last
            elif e.kind is MutationKind.PUT:
                send(CF_TAGS[e.cf] + e.key, e.value)
            elif e.kind is MutationKind.DELETE:
                send(CF_TAGS[e.cf] + e.key, None)
            else:
                assert e.value is not None
                tag = CF_TAGS[e.cf]
                for k in _doomed(store, batch.entries[:i], e.cf, e.key, e.value):
                    send(tag + k, None)
        if marker is None:
            raise ChangelogError("a logged batch must contain the task checkpoint (its marker)")
        offsets = [[s, p, o] for (s, p), o in sorted(source_offsets)]
        headers = [
            *self._headers[marker.cf],
            ("batch", str(batch_number).encode()),
            ("offsets", orjson.dumps(offsets)),
        ]
        delivery.records += 1
        produce(
            self.producer,
            self.topic,
            CF_TAGS[marker.cf] + marker.key,
            marker.value,
            partition=self.partition,
            headers=headers,
            on_delivery=delivery,
        )
        return delivery

    def wait(self, delivery: ChangelogDelivery) -> int:
        """Wait for every acknowledgement of a :meth:`write`; the marker's offset."""
        return delivery.marker_offset(self.producer.flush(60))

    def _sender(self, delivery: ChangelogDelivery) -> Callable[[bytes, bytes | None], None]:
        """``send(key, value)`` of one data record (the hot path: one call per record)."""
        raw = self.producer.produce
        topic, partition = self.topic, self.partition
        callback = None if self.transactional else delivery

        def send(key: bytes, value: bytes | None) -> None:
            delivery.records += 1
            try:
                raw(topic, value=value, key=key, partition=partition, on_delivery=callback)
            except BufferError:  # the queue is full: wait for room (rare)
                produce(self.producer, topic, key, value, partition=partition,
                        on_delivery=callback)  # fmt: skip

        return send


def _doomed(
    store: TaskStore, earlier: list[Mutation | BulkPut], cf: ColumnFamily, lo: bytes, hi: bytes
) -> list[bytes]:
    """The keys a range delete removes: those in the store, and those put earlier in the
    same batch (each gets a tombstone, so the compacted changelog holds what the store
    holds)."""
    doomed = {k for k, _ in store.scan(cf, lo, hi)}
    for e in earlier:
        if e.cf is not cf:
            continue
        if isinstance(e, BulkPut):
            doomed.update(k for k in e.keys if lo <= k < hi)
        elif e.kind is MutationKind.PUT and lo <= e.key < hi:
            doomed.add(e.key)
    return sorted(doomed)

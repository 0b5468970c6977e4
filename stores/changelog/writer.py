"""Logging a task store's batches to its changelog partition."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stores.changelog.records import CF_TAGS, ChangelogError, is_marker
from stores.rocks import ColumnFamily, Mutation, MutationKind, StoreBatch, TaskStore

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
    """Logs the mutations of a task's store batches to its changelog partition."""

    def __init__(self, producer: Any, topic: str, partition: int) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
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
        for cf, key, value in extra:
            self._send(delivery, cf, key, value)
        marker: Mutation | None = None
        put_keys: dict[ColumnFamily, set[bytes]] = {}
        for m in batch:
            if m.kind is MutationKind.PUT and is_marker(m.cf, m.key):
                marker = m  # the checkpoint is the commit marker: send it last
            elif m.kind is MutationKind.PUT:
                self._send(delivery, m.cf, m.key, m.value)
                put_keys.setdefault(m.cf, set()).add(m.key)
            elif m.kind is MutationKind.DELETE:
                self._send(delivery, m.cf, m.key, None)
            else:
                assert m.value is not None
                doomed = {k for k, _ in store.scan(m.cf, m.key, m.value)}
                doomed |= {k for k in put_keys.get(m.cf, ()) if m.key <= k < m.value}
                for k in sorted(doomed):
                    self._send(delivery, m.cf, k, None)
        if marker is None:
            raise ChangelogError("a logged batch must contain the task checkpoint (its marker)")
        offsets = [[s, p, o] for (s, p), o in sorted(source_offsets)]
        headers = [
            *self._headers[marker.cf],
            ("batch", str(batch_number).encode()),
            ("offsets", orjson.dumps(offsets)),
        ]
        self._send(delivery, marker.cf, marker.key, marker.value, headers)
        return delivery

    def wait(self, delivery: ChangelogDelivery) -> int:
        """Wait for every acknowledgement of a :meth:`write`; the marker's offset."""
        return delivery.marker_offset(self.producer.flush(60))

    def _send(
        self,
        delivery: ChangelogDelivery,
        cf: ColumnFamily,
        key: bytes,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> None:
        delivery.records += 1
        produce(
            self.producer,
            self.topic,
            CF_TAGS[cf] + key,
            value,
            partition=self.partition,
            headers=headers or self._headers[cf],
            on_delivery=delivery,
        )

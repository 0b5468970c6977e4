"""Logging a task store's batches to its changelog partition."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from stores.changelog.parts import PART_BYTES, in_parts, logged_parts
from stores.changelog.records import CF_TAGS, LOCAL_KEY_PREFIX, ChangelogError, is_marker
from stores.errors import ProduceError
from stores.rocks import BulkPut, ColumnFamily, Mutation, MutationKind, StoreBatch, TaskStore

__all__ = ["ChangelogDelivery", "ChangelogWriter", "produce", "produce_many"]

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


#: Records handed to librdkafka in one ``produce_batch`` call.
PRODUCE_CHUNK = 10_000


def produce_many(
    producer: Any,
    topic: str,
    records: list[dict[str, bytes | None]],
    *,
    partition: int | None = None,
    on_delivery: Any = None,
) -> None:
    """Queue ``records`` (dicts of ``key`` and ``value``) in order, ``PRODUCE_CHUNK`` per
    ``produce_batch`` call (a call per record costs about twice as much).

    A full queue rejects a chunk's tail: it is queued again once the queue has room. A
    record rejected for another reason, or out of order, raises :class:`ProduceError`.
    """
    from confluent_kafka import KafkaError

    options: dict[str, Any] = {"on_delivery": on_delivery}
    if partition is not None:
        options["partition"] = partition
    for i in range(0, len(records), PRODUCE_CHUNK):
        chunk = records[i : i + PRODUCE_CHUNK]
        while producer.produce_batch(topic, chunk, **options) < len(chunk):
            failed = [j for j, r in enumerate(chunk) if "_error" in r]
            errors = [cast(KafkaError, chunk[j]["_error"]) for j in failed]
            tail = failed == list(range(failed[0], len(chunk)))
            if not tail or any(e.code() != KafkaError._QUEUE_FULL for e in errors):
                raise ProduceError(
                    f"producing to {topic} failed: {errors[0]}",
                    tuple(e.code() for e in errors),
                )
            chunk = chunk[failed[0] :]
            for r in chunk:
                del r["_error"]
            producer.poll(0.05)


@dataclass
class ChangelogDelivery:
    """Delivery reports of one logged batch (a producer ``on_delivery`` callback)."""

    topic: str
    partition: int
    records: int = 0
    last_offset: int = -1
    errors: list[str] = field(default_factory=list)
    #: the ``KafkaError`` codes of ``errors``
    codes: list[int] = field(default_factory=list)

    def __call__(self, err: Any, msg: Any) -> None:
        """Record one delivery report."""
        if err is not None:
            self.errors.append(str(err))
            self.codes.append(int(err.code()))
        elif msg.offset() is not None and msg.offset() > self.last_offset:
            self.last_offset = msg.offset()

    def marker_offset(self, unacknowledged: int = 0) -> int:
        """The offset of the commit marker once every record is acknowledged."""
        if unacknowledged or self.errors:
            raise ChangelogError(
                f"changelog {self.topic}[{self.partition}]: {unacknowledged} records "
                f"unacknowledged, errors: {self.errors[:3]}",
                tuple(self.codes),
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
        self,
        producer: Any,
        topic: str,
        partition: int,
        *,
        transactional: bool = False,
        part_bytes: int = PART_BYTES,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.transactional = transactional
        #: values longer than this are logged in parts (:mod:`~stores.changelog.parts`)
        self.part_bytes = part_bytes
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
        ``store``; values longer than :attr:`part_bytes` are logged in parts, which
        adds the note of their part count to ``batch``. The caller flushes (or commits
        the transaction) and then reads the marker's offset from the returned delivery.
        """
        delivery = ChangelogDelivery(self.topic, self.partition)
        records, marker = _records(batch, store, extra)
        records = in_parts(records, logged_parts(store), batch, self.part_bytes)
        offsets = [[s, p, o] for (s, p), o in sorted(source_offsets)]
        headers = [
            *self._headers[marker.cf],
            ("batch", str(batch_number).encode()),
            ("offsets", orjson.dumps(offsets)),
        ]
        callback = None if self.transactional else delivery
        try:
            produce_many(
                self.producer, self.topic, records, partition=self.partition, on_delivery=callback
            )
        except ProduceError as exc:
            raise ChangelogError(str(exc)) from exc
        delivery.records = len(records) + 1
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


def _is_local(key: bytes) -> bool:
    """Whether a checkpoint-family key is local-only (never logged)."""
    return key.startswith(LOCAL_KEY_PREFIX)


def _records(
    batch: StoreBatch,
    store: TaskStore,
    extra: Sequence[tuple[ColumnFamily, bytes, bytes | None]],
) -> tuple[list[dict[str, bytes | None]], Mutation]:
    """The changelog records of ``extra`` then ``batch`` but its marker, and the marker."""
    records: list[dict[str, bytes | None]] = [
        {"key": CF_TAGS[cf] + key, "value": value} for cf, key, value in extra
    ]
    marker: Mutation | None = None
    for i, e in enumerate(batch.entries):
        if isinstance(e, BulkPut):
            tag = CF_TAGS[e.cf]
            records += [{"key": tag + k, "value": v} for k, v in zip(e.keys, e.values, strict=True)]
        elif e.cf is ColumnFamily.CHECKPOINT and _is_local(e.key):
            continue  # this copy's own (a batch written again: its notes of parts)
        elif e.kind is MutationKind.PUT and is_marker(e.cf, e.key):
            marker = e  # the checkpoint is the commit marker: send it last
        elif e.kind is MutationKind.PUT:
            records.append({"key": CF_TAGS[e.cf] + e.key, "value": e.value})
        elif e.kind is MutationKind.DELETE:
            records.append({"key": CF_TAGS[e.cf] + e.key, "value": None})
        else:
            assert e.value is not None
            tag = CF_TAGS[e.cf]
            doomed = _doomed(store, batch.entries[:i], e.cf, e.key, e.value)
            records += [{"key": tag + k, "value": None} for k in doomed]
    if marker is None:
        raise ChangelogError("a logged batch must contain the task checkpoint (its marker)")
    return records, marker

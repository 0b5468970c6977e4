"""Changelog topics: every store mutation logged to Kafka, and restore by replay.

One compacted topic per store, one partition per task. A record's key is the column
family's one-byte tag followed by the store key; its value is the stored bytes, or
``None`` (a tombstone) for a delete. A range delete is logged as one tombstone per
key it removes. Headers carry the column family name, the batch number and the
task's input offsets.

Atomicity without broker transactions: the writer logs a batch's mutations and then
its *commit marker* (the task checkpoint record, always last). A restore applies
records only up to the last marker it has seen; records after it belong to a batch
whose commit never completed (a crash mid-write) and are reported back as the
*uncommitted tail*, which the task overwrites with the store's true values before it
logs anything new. Compaction keeps the latest marker (it has a fixed key), and never
reorders records, so "everything before the last marker" stays committed state.

The local position (the changelog offset the local store reflects) lives under a
local-only key of the checkpoint column family: it is never logged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stores.errors import StoreError
from stores.rocks import ColumnFamily, Mutation, MutationKind, StoreBatch, TaskStore

__all__ = [
    "CF_TAGS",
    "ChangelogError",
    "ChangelogWriter",
    "LOCAL_POSITION_KEY",
    "RestoreResult",
    "changelog_key",
    "changelog_topic",
    "local_position",
    "restore_from_changelog",
    "set_local_position",
    "split_changelog_key",
]

#: One byte per column family in changelog keys (stable: they are on the wire).
CF_TAGS: Mapping[ColumnFamily, bytes] = {
    ColumnFamily.WINDOW_META: b"\x01",
    ColumnFamily.MESSAGES: b"\x02",
    ColumnFamily.CHECKPOINT: b"\x03",
}
_TAG_CF = {v[0]: k for k, v in CF_TAGS.items()}
#: Local-only key (checkpoint family): next changelog offset to read.
LOCAL_POSITION_KEY = b"\x00changelog-position"
_I64 = struct.Struct(">q")


def changelog_topic(job: str, store: str = "state") -> str:
    """The changelog topic of a job's store: ``<job>-<store>-changelog``."""
    return f"{job}-{store}-changelog"


class ChangelogError(StoreError):
    """A changelog record could not be written or read."""


def changelog_key(cf: ColumnFamily, key: bytes) -> bytes:
    """The changelog record key of a store key."""
    return CF_TAGS[cf] + key


def split_changelog_key(data: bytes) -> tuple[ColumnFamily, bytes]:
    """Inverse of :func:`changelog_key`."""
    try:
        return _TAG_CF[data[0]], data[1:]
    except (KeyError, IndexError):
        raise ChangelogError(f"not a changelog key: {data[:16]!r}") from None


def local_position(store: TaskStore) -> int:
    """Next changelog offset the local store has not applied (0 for a fresh store)."""
    raw = store.get(ColumnFamily.CHECKPOINT, LOCAL_POSITION_KEY)
    return 0 if raw is None else int(_I64.unpack(raw)[0])


def set_local_position(batch: StoreBatch, position: int) -> None:
    """Record in ``batch`` that the store reflects the changelog up to ``position``."""
    batch.put(ColumnFamily.CHECKPOINT, LOCAL_POSITION_KEY, _I64.pack(position))


@dataclass
class _Delivery:
    last_offset: int = -1
    errors: list[str] = field(default_factory=list)

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        elif msg.offset() is not None and msg.offset() > self.last_offset:
            self.last_offset = msg.offset()


class ChangelogWriter:
    """Logs the mutations of a task's store batches to its changelog partition."""

    def __init__(self, producer: Any, topic: str, partition: int) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition

    def log(
        self,
        batch: StoreBatch,
        store: TaskStore,
        *,
        batch_number: int,
        source_offsets: Iterable[tuple[tuple[int, int], int]],
        extra: Sequence[tuple[ColumnFamily, bytes, bytes | None]] = (),
    ) -> int:
        """Log ``extra`` records then ``batch`` (marker last); wait for acks.

        Range deletes become one tombstone per key currently in the store or put
        earlier in the same batch. Returns the offset of the commit marker. Must be
        called before ``batch`` is committed to ``store`` (the range scan reads the
        state the deletes apply to).
        """
        import orjson

        delivery = _Delivery()
        common = [
            ("batch", str(batch_number).encode()),
            ("offsets", orjson.dumps([[s, p, o] for (s, p), o in sorted(source_offsets)])),
        ]
        headers = {cf: [("cf", cf.value.encode()), *common] for cf in ColumnFamily}
        produce = self.producer.produce
        topic, part = self.topic, self.partition

        def send(cf: ColumnFamily, key: bytes, value: bytes | None) -> None:
            while True:
                try:
                    produce(
                        topic,
                        key=CF_TAGS[cf] + key,
                        value=value,
                        partition=part,
                        headers=headers[cf],
                        on_delivery=delivery,
                    )
                    return
                except BufferError:
                    self.producer.poll(0.05)

        for cf, key, value in extra:
            send(cf, key, value)
        marker: Mutation | None = None
        put_keys: dict[ColumnFamily, set[bytes]] = {}
        for m in batch:
            if m.cf is ColumnFamily.CHECKPOINT and m.kind is MutationKind.PUT and (
                m.key != LOCAL_POSITION_KEY
            ):
                marker = m  # the checkpoint is the commit marker: send it last
                continue
            if m.kind is MutationKind.PUT:
                send(m.cf, m.key, m.value)
                put_keys.setdefault(m.cf, set()).add(m.key)
            elif m.kind is MutationKind.DELETE:
                send(m.cf, m.key, None)
            else:
                assert m.value is not None
                doomed = {k for k, _ in store.scan(m.cf, m.key, m.value)}
                doomed |= {k for k in put_keys.get(m.cf, ()) if m.key <= k < m.value}
                for k in sorted(doomed):
                    send(m.cf, k, None)
        if marker is None:
            raise ChangelogError("a logged batch must contain the task checkpoint (its marker)")
        send(marker.cf, marker.key, marker.value)
        remaining = self.producer.flush(60)
        if remaining or delivery.errors:
            raise ChangelogError(
                f"changelog {topic}[{part}]: {remaining} records unacknowledged, "
                f"errors: {delivery.errors[:3]}"
            )
        return delivery.last_offset


@dataclass
class RestoreResult:
    """What a restore applied, and the keys of an uncommitted tail (if any)."""

    applied: int = 0
    batches: int = 0
    position: int = 0
    uncommitted: list[tuple[ColumnFamily, bytes]] = field(default_factory=list)
    #: The local store claims more than the changelog holds (the topic was recreated,
    #: or the store belongs to another run): it cannot be trusted.
    ahead: bool = False


def restore_from_changelog(
    store: TaskStore,
    consumer_config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    chunk_records: int = 50_000,
    timeout_s: float = 60.0,
) -> RestoreResult:
    """Replay ``topic[partition]`` from the store's local position to the end.

    Whole batches are applied (several per WriteBatch, ``chunk_records`` at a time);
    the tail after the last commit marker is returned, not applied.
    """
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    result = RestoreResult()
    start = local_position(store)
    result.position = start
    conf = {
        "group.id": f"window-operator-restore-{topic}-{partition}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 10,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **consumer_config,
    }
    consumer = Consumer(conf)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high < start:
            result.ahead = True
            return result
        if high == start:
            return result
        begin = max(start, low)
        first = begin if begin > 0 else OFFSET_BEGINNING
        consumer.assign([TopicPartition(topic, partition, first)])
        pending: list[tuple[ColumnFamily, bytes, bytes | None]] = []
        chunk = StoreBatch()
        chunk_size = 0
        deadline = time.monotonic() + timeout_s
        position = begin
        while True:
            msgs = consumer.consume(10_000, timeout=0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    raise ChangelogError(
                        f"restore of {topic}[{partition}] stalled at offset {position} "
                        f"(end {high})"
                    )
                continue
            deadline = time.monotonic() + timeout_s
            done = False
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                        continue
                    raise ChangelogError(f"restore of {topic}[{partition}]: {err}")
                offset, raw_key = msg.offset(), msg.key()
                if offset is None or raw_key is None:
                    raise ChangelogError(f"{topic}[{partition}]: a record without offset or key")
                position = offset + 1
                cf, key = split_changelog_key(raw_key)
                pending.append((cf, key, msg.value()))
                if cf is ColumnFamily.CHECKPOINT and key != LOCAL_POSITION_KEY:
                    for pcf, pkey, pval in pending:
                        if pval is None:
                            chunk.delete(pcf, pkey)
                        else:
                            chunk.put(pcf, pkey, pval)
                    chunk_size += len(pending)
                    result.applied += len(pending)
                    result.batches += 1
                    pending = []
                    result.position = position
                    if chunk_size >= chunk_records:
                        set_local_position(chunk, result.position)
                        store.commit(chunk)
                        chunk, chunk_size = StoreBatch(), 0
            if done or position >= high:
                break
        if chunk_size:
            set_local_position(chunk, result.position)
            store.commit(chunk)
        result.uncommitted = list(dict.fromkeys((cf, k) for cf, k, _ in pending))
        return result
    finally:
        consumer.close()

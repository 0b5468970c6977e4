"""Restoring a task store from its changelog partition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stores.changelog.parts import Reassembler, Restored
from stores.changelog.records import (
    ChangelogError,
    is_marker,
    local_position,
    set_local_position,
)
from stores.rocks import ColumnFamily, StoreBatch, TaskStore

__all__ = ["RestoreProgress", "RestoreResult", "last_marker", "restore_from_changelog"]
#: Records between two progress reports of a restore.
PROGRESS_EVERY = 10_000


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """Where a restore is: it reads ``[start, end)`` and has reached ``position``."""

    topic: str
    partition: int
    start: int
    position: int
    end: int
    records: int
    done: bool = False


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
    #: The changelog's first record after the store's position is older than
    #: ``stale_after_ms`` (see ``restore_from_changelog``): the store was not caught up,
    #: and must be rebuilt.
    stale: bool = False
    seconds: float = 0.0


#: How long one ``consume`` waits. It returns early only with a full batch, so the last
#: call of every restore (the one that meets the end of the partition) waits all of it:
#: at 0.5 s that was half a second per task opened, at each start and task move.
_CONSUME_WAIT_S = 0.05


def _consumer_config(topic: str, partition: int, isolation: str, extra: Mapping[str, Any]) -> Any:
    return {
        "group.id": f"window-operator-restore-{topic}-{partition}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "fetch.wait.max.ms": 10,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **extra,
    }


class _Reader:
    """Reads one partition from an offset to its end (partition EOF from the fetch side)."""

    def __init__(
        self,
        extra: Mapping[str, Any],
        topic: str,
        partition: int,
        timeout_s: float,
        *,
        isolation: str = "read_committed",
    ) -> None:
        """A consumer of ``topic[partition]`` (``extra``: the job's consumer settings)."""
        from confluent_kafka import Consumer

        self.consumer = Consumer(_consumer_config(topic, partition, isolation, extra))
        self.topic = topic
        self.partition = partition
        self.timeout_s = timeout_s
        #: the offset the partition ended at (the last stable offset under read_committed)
        self.end = -1
        #: the Kafka timestamp (epoch ms) of the first record read (0: none or unknown)
        self.first_ts = 0

    def watermarks(self) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        low, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, self.partition), timeout=10
        )
        return int(low), int(high)

    def records(self, start: int) -> Iterator[tuple[int, Restored]]:
        """``(offset, record)`` from ``start`` to the end of the partition."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        first = start if start > 0 else OFFSET_BEGINNING
        self.consumer.assign([TopicPartition(self.topic, self.partition, first)])
        deadline = time.monotonic() + self.timeout_s
        while True:
            msgs = self.consumer.consume(10_000, timeout=_CONSUME_WAIT_S)
            if not msgs:
                if time.monotonic() > deadline:
                    raise ChangelogError(
                        f"restore of {self.topic}[{self.partition}] stalled after offset {start}"
                    )
                continue
            deadline = time.monotonic() + self.timeout_s
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self.end = int(msg.offset() or 0)
                        return
                    raise ChangelogError(f"restore of {self.topic}[{self.partition}]: {err}")
                offset, raw_key = msg.offset(), msg.key()
                if offset is None or raw_key is None:
                    raise ChangelogError(
                        f"{self.topic}[{self.partition}]: a record without offset or key"
                    )
                if self.first_ts == 0:
                    self.first_ts = max(0, int(msg.timestamp()[1]))
                yield offset, Restored.read(raw_key, msg.value())

    def close(self) -> None:
        self.consumer.close()


class _Applier:
    """Applies whole batches (up to each commit marker), several per WriteBatch."""

    def __init__(self, store: TaskStore, result: RestoreResult, chunk_records: int) -> None:
        self.store = store
        self.result = result
        self.chunk_records = chunk_records
        self.pending: list[Restored] = []
        self.chunk = StoreBatch()
        self.chunk_size = 0
        self.parts = Reassembler(store)

    def add(self, offset: int, record: Restored) -> None:
        self.pending.append(record)
        if record.part is not None or record.head or not is_marker(record.cf, record.key):
            return
        for pending in self.pending:
            self.parts.apply(pending, self.chunk)
        self.chunk_size += len(self.pending)
        self.result.applied += len(self.pending)
        self.result.batches += 1
        self.result.position = offset + 1
        self.pending = []
        # not past a head whose parts are missing until a later record of its key
        # replaced it: a restore that fails on it fails again when it is asked again
        if self.chunk_size >= self.chunk_records and not self.parts.incomplete:
            self.commit()

    def commit(self, *, moved: bool = False) -> None:
        """Write the batches gathered (and the position: ``moved``, also with none)."""
        if len(self.chunk) or moved:
            set_local_position(self.chunk, self.result.position)
            self.store.commit(self.chunk)
            self.chunk, self.chunk_size = StoreBatch(), 0

    def finish(self, end: int, topic: str, partition: int) -> None:
        """Commit what is left, read to ``end`` (where the partition ended). With no batch
        left unfinished, what lies between the last batch and ``end`` is transaction
        markers and aborted records: the position moves on to ``end``, where the job's
        own commits put it, so that the next opening of the store reads nothing. Parts
        and heads of the unfinished batch are noted, for the key's next write to
        tombstone them."""
        self.parts.check_complete(topic, partition)
        for record in self.pending:
            self.parts.uncommitted(record, self.chunk)
        moved = not self.pending and end > self.result.position
        if moved:
            self.result.position = end
        self.commit(moved=moved)


def restore_from_changelog(
    store: TaskStore,
    consumer_config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    chunk_records: int = 50_000,
    timeout_s: float = 60.0,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    transactional: bool = True,
    stale_after_ms: int | None = None,
) -> RestoreResult:
    """Replay ``topic[partition]`` (``read_committed``) from the store's local position.

    Whole batches are applied, ``chunk_records`` at a time per WriteBatch; the keys of
    the tail after the last marker, and of records beyond the last stable offset (an
    open transaction), are returned in ``uncommitted``, not applied. With no such tail,
    the position ends at the last stable offset, past the last batch's transaction
    marker (and past aborted records), where the job's own commits put it.
    ``transactional``: the changelog is written in transactions; if not (at-least-once),
    no record waits behind an open one: the consumer that looks for them is not made (nor
    after a switch from exactly-once, with a dead producer's transaction still open:
    Kafka aborts it when it times out).
    ``on_progress`` is called every :data:`PROGRESS_EVERY` records read and once at the
    end of a non-empty restore.
    ``stale_after_ms``: when the first record after the store's position is older than
    this (by its Kafka timestamp), compaction may have removed deletes (tombstones) after
    it that the store never applied, once they were older than the topic's
    ``delete.retention.ms``: the store is not caught up (``stale`` in the result), and
    the caller rebuilds it from the whole changelog, which holds every live key's
    latest value.
    """
    started = time.perf_counter()
    result = RestoreResult()
    start = result.position = local_position(store)
    reader = _Reader(consumer_config, topic, partition, timeout_s)
    try:
        # under read_committed, the end a consumer is told is the last stable offset
        _, high = reader.watermarks()
        if high < start:
            result.ahead = True
            return result
        tail: dict[tuple[ColumnFamily, bytes], None] = {}
        stable = start
        if high > start:
            applier = _Applier(store, result, chunk_records)
            if not _catch_up(reader, applier, high, on_progress, stale_after_ms):
                result.stale = True
                return result
            tail = dict.fromkeys((r.cf, r.key) for r in applier.pending)
            stable = reader.end
        if transactional:
            opened = _open_transaction_records(consumer_config, topic, partition, stable, timeout_s)
            tail.update(dict.fromkeys((r.cf, r.key) for r in opened))
            _note_parts(store, opened)
        result.uncommitted = list(tail)
        return result
    finally:
        reader.close()
        result.seconds = time.perf_counter() - started


def _catch_up(
    reader: _Reader,
    applier: _Applier,
    high: int,
    on_progress: Callable[[RestoreProgress], None] | None,
    stale_after_ms: int | None,
) -> bool:
    """Apply the whole batches from the store's position to the end of the partition;
    ``False`` (nothing applied) when the first record is older than ``stale_after_ms``
    and the store has a position (from 0 the whole changelog is read anyway)."""
    topic, partition, start = reader.topic, reader.partition, applier.result.position
    for n, (offset, record) in enumerate(reader.records(start), 1):
        if n == 1 and stale_after_ms is not None and start > 0:
            age = time.time() * 1000 - reader.first_ts if reader.first_ts > 0 else 0
            if age > stale_after_ms:
                return False
        applier.add(offset, record)
        if on_progress is not None and n % PROGRESS_EVERY == 0:
            on_progress(RestoreProgress(topic, partition, start, offset + 1, high, n))
    applier.finish(reader.end, topic, partition)
    if on_progress is not None:
        applied = applier.result.applied
        on_progress(RestoreProgress(topic, partition, start, high, high, applied, True))
    return True


def _open_transaction_records(
    consumer_config: Mapping[str, Any], topic: str, partition: int, start: int, timeout_s: float
) -> list[Restored]:
    """The records from ``start`` (the last stable offset) that ``read_committed`` does
    not show yet: those of a transaction still open, up to the high watermark, which
    only a ``read_uncommitted`` consumer is told."""
    peek = _Reader(consumer_config, topic, partition, timeout_s, isolation="read_uncommitted")
    try:
        _, high = peek.watermarks()
        if high <= start:
            return []
        # only a head's value is read (its part count): not the values of a whole batch
        return [r if r.head else replace(r, value=None) for _, r in peek.records(start)]
    finally:
        peek.close()


def _note_parts(store: TaskStore, records: list[Restored]) -> None:
    """Note the parts and heads among ``records`` (an open transaction's), for their
    keys' next writes to tombstone them."""
    if not any(r.part is not None or r.head for r in records):
        return
    parts, batch = Reassembler(store), StoreBatch()
    for record in records:
        parts.uncommitted(record, batch)
    if len(batch):
        store.commit(batch)


def last_marker(
    consumer_config: Mapping[str, Any],
    topic: str,
    partition: int,
    *,
    window: int = 64,
    most: int = 65_536,
    timeout_s: float = 10.0,
) -> bytes | None:
    """The value of the last commit marker (the logged checkpoint) of ``topic[partition]``
    among its last ``most`` committed records; ``None`` for an empty partition or none
    there (an unfinished batch of more records at the end). The last ``window`` records
    are read first, then 32 times as many at each try: a batch a crash left unfinished
    (an aborted transaction, or the torn tail of an at-least-once job) is as long as the
    batch, thousands of records, and ends the partition until the job runs again.
    Read ``read_committed``: the records of an aborted or open transaction are not seen."""
    reader = _Reader(consumer_config, topic, partition, timeout_s)
    try:
        low, high = reader.watermarks()
        span = window
        while high > low:
            found: bytes | None = None
            for _, record in reader.records(max(low, high - span)):
                if record.part is None and not record.head and is_marker(record.cf, record.key):
                    found = record.value
            if found is not None or high - span <= low or span >= most:
                return found
            span = min(span * 32, most)
        return None
    finally:
        reader.close()

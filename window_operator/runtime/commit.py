"""The commit protocol of a state task: restore, log, commit.

A task's local RocksDB is a cache of its changelog partition:

1. **open**: the store is opened and caught up from the changelog (``read_committed``)
   from the position it records; a store ahead of its changelog (the topic was
   recreated, or the store belongs to another run) is rebuilt from scratch. Under
   exactly-once the runner initialises the task's producer between opening the store
   (:meth:`TaskState.open_store`) and catching it up (:meth:`TaskState.catch_up`), so
   no other producer of the task commits unseen after the catch-up;
2. **log**: the batch's state changes go to the changelog, preceded by the store's true
   values of every key an earlier, unfinished batch left in the log (the uncommitted
   tail), with the checkpoint last as the commit marker;
3. **commit**: once Kafka has the batch (transaction committed, or records
   acknowledged), the same changes are committed to RocksDB with the changelog position.

A pass that changes nothing but the checkpoint's wall clock (a timer pass of an idle
task: :meth:`TaskState.unchanged_by`) skips 2 and 3: an idle job writes no transaction
per task and trigger, and its changelog no checkpoint record that every restore reads.

A crash before 3 leaves the local store behind its changelog: the next run restores it
and recognises the input as a replay.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stores.changelog import (
    LOCAL_KEY_PREFIX,
    ChangelogDelivery,
    ChangelogWriter,
    RestoreProgress,
    RestoreResult,
    restore_from_changelog,
    set_local_position,
)
from stores.rocks import ColumnFamily, MutationKind, StoreBatch, TaskStore
from window_operator.kernel.checkpoint import CHECKPOINT_KEY, Checkpoint
from window_operator.kernel.kernel import COMPACT_EVERY
from window_operator.observe.progress import RestoreLog
from window_operator.runtime.settings import TaskSettings

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["CHANGELOG_DELETE_RETENTION_MS", "WRITER_KEY", "TaskState", "last_writer"]

#: Local-only key (checkpoint family, never logged): who committed the store last.
WRITER_KEY = LOCAL_KEY_PREFIX + b"writer"
#: The changelog keeps a delete (tombstone) at least this long (``delete.retention.ms``,
#: set when the job creates the topic: Kafka's default, made explicit; a changelog made
#: otherwise is asked for its own).
CHANGELOG_DELETE_RETENTION_MS = 86_400_000
#: ``delete.retention.ms`` of each changelog topic, asked once per process.
_DELETE_RETENTION: dict[tuple[str, str], int] = {}


@dataclass
class TaskState:
    """A task's open store and what its restore found."""

    settings: TaskSettings
    task: int
    store: TaskStore
    restored: RestoreResult
    #: the changelog batch number of the batch last logged (:meth:`log`)
    logged_batch: int | None = None
    #: the changelog batch number the store's checkpoint holds (None: not known, taken
    #: as the one before the batch logged); a task kept open counts the passes it did
    #: not commit (:meth:`unchanged_by`) too, so the numbers it logs skip some
    committed_batch: int | None = None

    @classmethod
    def open(
        cls,
        settings: TaskSettings,
        task: int,
        progress: Callable[[RestoreProgress], None] | None = None,
        *,
        lock_wait_s: float = 60.0,
    ) -> TaskState:
        """Open the task's store and catch it up with its changelog (step 1):
        :meth:`open_store`, then :meth:`catch_up`."""
        store = cls.open_store(settings, task, lock_wait_s=lock_wait_s)
        return cls.catch_up(settings, task, store, progress)

    @staticmethod
    def open_store(settings: TaskSettings, task: int, *, lock_wait_s: float = 60.0) -> TaskStore:
        """The task's store as it is on disk (not caught up); ``lock_wait_s`` bounds the
        wait for another process to let go of it (:class:`~stores.rocks.StoreLockedError`
        after it)."""
        return TaskStore(settings.task_path(task), lock_wait_s=lock_wait_s)

    @classmethod
    def catch_up(
        cls,
        settings: TaskSettings,
        task: int,
        store: TaskStore,
        progress: Callable[[RestoreProgress], None] | None = None,
    ) -> TaskState:
        """Catch ``store`` up with its changelog; a store ahead of it or too far behind
        is rebuilt. ``progress`` follows the catch-up (default: a log line every few
        seconds once it takes long, see :class:`~window_operator.observe.progress.RestoreLog`).
        The store is closed when this fails."""
        path = settings.task_path(task)
        progress = progress or RestoreLog(task)
        try:
            stale_after = _delete_retention_ms(settings) // 2
            result = cls._restore(settings, task, store, progress, stale_after_ms=stale_after)
            if result.ahead or result.stale:
                store.close()
                shutil.rmtree(path, ignore_errors=True)
                store = TaskStore(path)
                result = cls._restore(settings, task, store, progress)
        except BaseException:
            store.close()
            raise
        return cls(settings, task, store, result)

    @staticmethod
    def _restore(
        settings: TaskSettings,
        task: int,
        store: TaskStore,
        progress: Callable[[RestoreProgress], None],
        *,
        stale_after_ms: int | None = None,
    ) -> RestoreResult:
        return restore_from_changelog(
            store,
            settings.consumer_config(),
            settings.changelog_topic,
            task,
            timeout_s=settings.broker_timeout_s,
            on_progress=progress,
            transactional=settings.exactly_once,
            stale_after_ms=stale_after_ms,
        )

    def compensation(self) -> list[tuple[ColumnFamily, bytes, bytes | None]]:
        """The store's true values of the keys an unfinished batch left in the log."""
        return [(cf, key, self.store.get(cf, key)) for cf, key in self.restored.uncommitted]

    def log(
        self,
        producer: Producer,
        batch: StoreBatch,
        *,
        batch_number: int,
        offsets: Iterable[tuple[tuple[int, int], int]],
    ) -> ChangelogDelivery:
        """Produce the batch's changelog records, compensation first (step 2)."""
        self.logged_batch = batch_number
        writer = ChangelogWriter(
            producer,
            self.settings.changelog_topic,
            self.task,
            transactional=self.settings.exactly_once,
        )
        return writer.write(
            batch,
            self.store,
            batch_number=batch_number,
            source_offsets=offsets,
            extra=self.compensation(),
        )

    def unchanged_by(self, batch: StoreBatch) -> bool:
        """Whether committing ``batch`` would tell the changelog and the store nothing.

        So it is when the batch writes only the checkpoint, and that checkpoint moves
        nothing but the wall clock and the flush count (no position, event time,
        watermark, timer or operator field); and when no earlier batch left a tail in
        the log to compensate. The clock a restore then reads is the last one that
        changed anything: the wall clock only moves forward, and each batch brings its
        own. (A new producer's token is recorded all the same: :meth:`record_writer`.)
        """
        if len(batch) != 1 or self.restored.uncommitted:
            return False
        (put,) = batch
        if put.kind is not MutationKind.PUT or put.value is None:
            return False
        if (put.cf, put.key) != (ColumnFamily.CHECKPOINT, CHECKPOINT_KEY):
            return False
        stored = self.store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
        if stored is None:
            return False
        where = str(self.store.path)
        return Checkpoint.decode(put.value, where).moves_only_the_wall_clock(
            Checkpoint.decode(stored, where)
        )

    def record_writer(self, writer: str | None) -> None:
        """Record ``writer`` as the producer that last committed the store, in the store
        only (a local key, never logged): a pass that commits nothing still tells the next
        pass here that the producer cached elsewhere may be fenced (its initialisation
        fenced it), without a Kafka transaction. Nothing when it is recorded already."""
        if writer is None or writer == last_writer(self.store):
            return
        batch = StoreBatch()
        batch.put(ColumnFamily.CHECKPOINT, WRITER_KEY, writer.encode())
        self.store.commit(batch)

    def commit(self, batch: StoreBatch, marker: int, writer: str | None = None) -> None:
        """Commit the batch locally with the changelog position after it (step 3).

        Under exactly-once the transaction's commit marker follows the checkpoint, so
        the next record is two offsets on. ``writer`` is the token of the producer that
        committed the batch (see :mod:`~window_operator.runtime.producers`).

        Every :data:`COMPACT_EVERY` batches (whenever the changelog batch number passes a
        multiple of it, as the library path counts flushes: a task kept open skips the
        numbers of passes it did not commit) the ranges this batch deleted are compacted
        off the disk: expiry deletes from the start of each time-ordered keyspace, so they
        cover what the batches since the last compaction deleted, although this store
        object only lives for one batch.
        """
        set_local_position(batch, marker + (2 if self.settings.exactly_once else 1))
        if writer is not None:
            batch.put(ColumnFamily.CHECKPOINT, WRITER_KEY, writer.encode())
        self.store.commit(batch)
        # the batch logged the compensation: a task kept open does not log it again
        self.restored.uncommitted = []
        number = self.logged_batch
        if number is not None:
            before = number - 1 if self.committed_batch is None else self.committed_batch
            self.committed_batch = number
            if number // COMPACT_EVERY > before // COMPACT_EVERY:  # passed a multiple
                self.store.compact_deleted(background=True)

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def last_writer(store: TaskStore) -> str | None:
    """The token of the producer that last committed ``store`` (None: not known)."""
    raw = store.get(ColumnFamily.CHECKPOINT, WRITER_KEY)
    return None if raw is None else raw.decode()


def _delete_retention_ms(settings: TaskSettings) -> int:
    """How long the task's changelog keeps a delete (``delete.retention.ms``), asked once
    per process; :data:`CHANGELOG_DELETE_RETENTION_MS` when the broker does not say.

    A store whose catch-up would start at a record older than half of it is rebuilt
    instead (:func:`~stores.changelog.restore_from_changelog`'s ``stale_after_ms``): a
    delete after that record may have been compacted away (half: the broker's clock,
    which stamps and compacts, may run ahead of this host's).
    """
    from window_operator.kafka_admin import KafkaAdmin

    topic = settings.changelog_topic
    key = (settings.bootstrap_servers, topic)
    if key not in _DELETE_RETENTION:
        admin = KafkaAdmin(settings.bootstrap_servers, client_config=settings.config.kafka.consumer)
        text = admin.topic_config(topic).get("delete.retention.ms", "")
        known = text.isdigit() and int(text) > 0
        _DELETE_RETENTION[key] = int(text) if known else CHANGELOG_DELETE_RETENTION_MS
    return _DELETE_RETENTION[key]

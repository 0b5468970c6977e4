"""A task: one input partition's operator with its RocksDB, changelog and outputs.

A task runs wherever Spark schedules it. Each micro-batch it:

1. opens its local store and catches up from its changelog partition (a missing
   or stale local store is rebuilt; a torn tail from a crash is noted);
2. opens the aggregator from the store (checkpoint, open frames, bookkeeping);
3. drops replayed records (offset <= the checkpointed offset), decodes the rest
   (bad ones become error records, and so do far-future events, see
   :mod:`window_operator.arrival`) and adds them as one batch (a record that makes
   decoding or the operator raise is isolated and reported, see
   :mod:`window_operator.task_guard`);
4. runs the wall-clock timers;
5. sends window results and error records, and waits until they are acknowledged;
6. logs the state changes to the changelog, commit marker last, and waits;
7. commits the same changes to RocksDB, with the changelog position.

A crash before 6 completes leaves the changelog without this batch: the replayed
input is processed again and its results re-sent (at least once, identical up to
wall-clock timers). A crash between 6 and 7 leaves the local store behind its
changelog: the next run restores it and recognises the input as a replay.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from stores.changelog import (
    ChangelogWriter,
    RestoreResult,
    changelog_topic,
    restore_from_changelog,
    set_local_position,
)
from stores.rocks import ColumnFamily, TaskStore
from window_operator.arrival import reject_future
from window_operator.codecs import ResultEncoder, encode_error, result_encoder_for
from window_operator.codecs.inputs import InputDecoder
from window_operator.config import JobConfig
from window_operator.events import DecodeResult
from window_operator.job import JobRuntime, TaskOperator, build_runtime, task_state_dir
from window_operator.kernel import CHECKPOINT_KEY, InputPosition
from window_operator.results import ErrorRecord
from window_operator.task_guard import add_guarded, decode_guarded, internal_error

__all__ = [
    "InputRecords",
    "TaskReport",
    "TaskRunner",
    "TaskSettings",
    "changelog_topic",
    "close_producers",
    "crash_point",
]


#: Overrides ``state.dir`` on a host (set it in a Spark worker's environment).
STATE_DIR_ENV = "WINDOW_OPERATOR_STATE_DIR"


def crash_point(name: str, records: int) -> None:
    """Fault injection for recovery tests: kill the whole job here, once.

    Active only when ``WINDOW_OPERATOR_CRASH_AT`` names this point and the file
    ``WINDOW_OPERATOR_CRASH_ONCE`` exists (it is removed first, so one crash only). The
    driver's process group ``WINDOW_OPERATOR_CRASH_PGID`` (driver and JVM; ``run`` sets
    it) gets SIGKILL, and so does this Python worker. Only batches with input count,
    so the crash is mid-batch.
    """
    if os.environ.get("WINDOW_OPERATOR_CRASH_AT") != name or records == 0:
        return
    marker = os.environ.get("WINDOW_OPERATOR_CRASH_ONCE")
    if not marker:
        return
    try:
        os.remove(marker)
    except FileNotFoundError:
        return
    os.killpg(int(os.environ["WINDOW_OPERATOR_CRASH_PGID"]), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class TaskSettings:
    """Everything a task needs besides its input; picklable, shipped to executors."""

    config: JobConfig
    bootstrap_servers: str
    state_dir: str
    producer: Mapping[str, Any] = field(default_factory=dict)
    consumer: Mapping[str, Any] = field(default_factory=dict)

    @property
    def state_dir_path(self) -> Path:
        """The state directory as a path."""
        return Path(self.state_dir)

    @property
    def changelog_topic(self) -> str:
        """This job's changelog topic."""
        return changelog_topic(self.config.job)

    def producer_config(self) -> dict[str, Any]:
        """librdkafka producer settings (idempotent, all acks, batched)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
            **self.config.kafka.producer,
            **self.producer,
        }

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka consumer settings for restores."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self.config.kafka.consumer,
            **self.consumer,
        }


@dataclass(frozen=True, slots=True)
class InputRecords:
    """One task's input of a micro-batch, columnar (as read from Kafka).

    ``timestamps`` are the Kafka record timestamps in epoch ms (``-1``: the record has
    none), the arrival times the far-future guard compares event times with; ``None``:
    not known, no record is checked.
    """

    topic: str
    partition: int
    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int] | None = None

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass
class TaskReport:
    """What a task did in one micro-batch (sent back to the driver)."""

    task: int
    records: int = 0
    applied: int = 0
    replayed: int = 0
    rejected: int = 0
    results: int = 0
    restored_records: int = 0
    compensated: int = 0
    changelog_records: int = 0
    watermark: int = 0
    seconds: float = 0.0
    location: str = ""


@dataclass(frozen=True, slots=True)
class _Codecs:
    input_decoder: InputDecoder
    result_encoder: ResultEncoder


_RUNTIMES: dict[str, tuple[JobRuntime, _Codecs]] = {}


def _runtime(config: JobConfig) -> tuple[JobRuntime, _Codecs]:
    # One runtime per worker process and config: ops, schemas and codecs are reusable.
    key = config.model_dump_json()
    cached = _RUNTIMES.get(key)
    if cached is None:
        runtime = build_runtime(config)
        codecs = _Codecs(
            InputDecoder.for_config(config, runtime.decoder), result_encoder_for(config)
        )
        cached = _RUNTIMES[key] = (runtime, codecs)
    return cached


_PRODUCERS: dict[str, Any] = {}


def _producer(config: Mapping[str, Any]) -> Any:
    """One producer per worker process and config.

    A new idempotent producer waits for its producer id (~0.5 s) before its first
    acknowledgement, so tasks of the same worker share one; tasks of a worker run one
    at a time, so one task's flush never waits for another's records.
    """
    from confluent_kafka import Producer

    key = repr(sorted(config.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(dict(config))
    return producer


def close_producers(timeout_s: float = 5.0) -> None:
    """Flush and forget the cached producers (before their broker goes away)."""
    for producer in _PRODUCERS.values():
        producer.flush(timeout_s)
    _PRODUCERS.clear()


def _drop_producer(config: Mapping[str, Any]) -> None:
    """Forget a producer after a failure (it may be fenced or in a fatal state)."""
    _PRODUCERS.pop(repr(sorted(config.items())), None)


class TaskRunner:
    """Runs micro-batches of one task (= one input partition)."""

    def __init__(self, settings: TaskSettings, task: int) -> None:
        self.settings = settings
        self.task = task
        self.runtime, self.codecs = _runtime(settings.config)
        # A host may keep its stores elsewhere (each Spark worker its own local disk).
        root = os.environ.get(STATE_DIR_ENV) or settings.state_dir
        self.path = task_state_dir(Path(root), settings.config.job, task)

    # -- lifecycle ---------------------------------------------------------------------

    def _open_store(self) -> tuple[TaskStore, RestoreResult]:
        store = TaskStore(self.path)
        result = restore_from_changelog(
            store,
            self.settings.consumer_config(),
            self.settings.changelog_topic,
            self.task,
        )
        if result.ahead:
            # The local store is ahead of its changelog (topic recreated, or a store
            # from another run): it cannot be trusted. Rebuild from the changelog.
            store.close()
            shutil.rmtree(self.path, ignore_errors=True)
            store = TaskStore(self.path)
            result = restore_from_changelog(
                store,
                self.settings.consumer_config(),
                self.settings.changelog_topic,
                self.task,
            )
        return store, result

    def restore(self) -> RestoreResult:
        """Catch the local store up with the changelog (no input, no output)."""
        store, result = self._open_store()
        store.close()
        return result

    def run(self, records: InputRecords | None, now_ms: int | None = None) -> TaskReport:
        """Process one micro-batch (``None``: run the timers only) and commit it."""
        started = time.perf_counter()
        report = TaskReport(task=self.task, location=f"{socket.gethostname()}:{self.path}")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        store, restored = self._open_store()
        report.restored_records = restored.applied
        try:
            agg = self.runtime.operator(store)
            rejected: list[ErrorRecord] = []
            if records is not None and len(records):
                report.records = len(records)
                agg, rejected = self._add(store, agg, records, report)
            agg.timeout(now)
            # flush first: expiring windows may still emit their pending LATE results
            batch = agg.flush(commit=False)
            producer = _producer(self.settings.producer_config())
            rejected += agg.get_errors()
            report.rejected = len(rejected)
            report.results = self._send_outputs(producer, agg, rejected)
            crash_point("after_outputs", report.records)
            extra = [(cf, key, store.get(cf, key)) for cf, key in restored.uncommitted]
            report.compensated = len(extra)
            writer = ChangelogWriter(producer, self.settings.changelog_topic, self.task)
            marker = writer.log(
                batch,
                store,
                batch_number=agg.batches,
                source_offsets=agg.offsets.items(),
                extra=extra,
            )
            report.changelog_records = len(batch) + len(extra)
            crash_point("after_changelog", report.records)
            set_local_position(batch, marker + 1)
            store.commit(batch)
            report.watermark = agg.watermark
        except Exception:
            _drop_producer(self.settings.producer_config())
            raise
        finally:
            store.close()
        report.seconds = time.perf_counter() - started
        return report

    # -- steps -------------------------------------------------------------------------

    def _add(
        self, store: TaskStore, agg: TaskOperator, records: InputRecords, report: TaskReport
    ) -> tuple[TaskOperator, list[ErrorRecord]]:
        """Add the new records; returns the operator holding them and the rejected ones.

        No record's content makes this raise: see :mod:`window_operator.task_guard`.
        """
        part = records.partition
        last = agg.offsets.get(InputPosition(0, part), -1)
        keep = [i for i, o in enumerate(records.offsets) if o > last]
        report.replayed = len(records) - len(keep)
        if not keep:
            return agg, []
        offsets = [records.offsets[i] for i in keep]
        values = [records.values[i] for i in keep]
        keys = [records.keys[i] for i in keep]
        decoded = self._decode(records, keep, values, offsets)
        applied = add_guarded(lambda: self.runtime.operator(store), agg, decoded.batch)
        report.applied = applied.applied
        # Every input record of the batch is handled now, the rejected ones included.
        applied.operator.mark_consumed(part, max(offsets))
        rejected: list[ErrorRecord] = []
        if decoded.errors:  # one per input that was not kept, in input order
            kept = set(decoded.kept)
            failed = [i for i in range(len(keep)) if i not in kept]
            rejected = [
                replace(e, key=keys[i]) for i, e in zip(failed, decoded.errors, strict=True)
            ]
        for row, exc in applied.failed:
            i = decoded.kept[row]
            err = internal_error(
                "the operator",
                exc,
                topic=records.topic,
                partition=part,
                offset=offsets[i],
                raw=values[i],
            )
            rejected.append(replace(err, key=keys[i]))
        return applied.operator, rejected

    def _decode(
        self, records: InputRecords, keep: list[int], values: list[bytes | None], offsets: list[int]
    ) -> DecodeResult:
        """Decode the kept records, far-future events (by Kafka timestamp) rejected."""
        decoded = decode_guarded(
            self.codecs.input_decoder,
            values,
            topic=records.topic,
            partition=records.partition,
            offsets=offsets,
        )
        stamps = records.timestamps
        max_future = self.settings.config.watermark.max_future
        if stamps is None or max_future is None:
            return decoded
        rows = np.asarray(keep, dtype=np.int64)[np.asarray(decoded.kept, dtype=np.int64)]
        arrival = np.asarray(stamps, dtype=np.int64)[rows]
        return reject_future(decoded, arrival, max_future, raws=values, topic=records.topic)

    def _send_outputs(self, producer: Any, agg: TaskOperator, rejected: list[ErrorRecord]) -> int:
        cfg = self.settings.config
        encoder = self.codecs.result_encoder
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        def send(topic: str, key: bytes | None, value: bytes | None, headers: Any = None) -> None:
            while True:
                try:
                    producer.produce(
                        topic, key=key, value=value, headers=headers, on_delivery=on_delivery
                    )
                    return
                except BufferError:
                    producer.poll(0.05)

        n = 0
        for rb in agg.take_result_batches():
            for key, value in encoder.encode_batch(rb):
                send(cfg.output.topic, key, value)
            n += len(rb)
        for err in rejected:
            err_key, err_value, headers = encode_error(err, key=err.key)
            send(cfg.output.errors_topic, err_key, err_value, headers)
        remaining = producer.flush(60)
        if remaining or errors:
            raise RuntimeError(
                f"task {self.task}: {remaining} output records unacknowledged, errors {errors[:3]}"
            )
        return n


def read_stored_windows(
    settings: TaskSettings, task: int, key: str, start: int, end: int
) -> list[Any]:
    """The stored windows of ``key`` in a task's local store (for ``inspect``)."""
    runtime, _ = _runtime(settings.config)
    path = task_state_dir(Path(settings.state_dir), settings.config.job, task)
    if not path.exists():
        return []
    store = TaskStore(path)
    try:
        if store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None:
            return []
        agg = runtime.operator(store)
        windows: list[Any] = agg.get_windows(key, start, end)
        return windows
    finally:
        store.close()

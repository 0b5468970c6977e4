"""Executor side: a Spark task's offset range of one partition, read from Kafka exactly.

A range ``[start, until)`` is read by offset, never by counting records: transaction
markers, compaction and aborted records hidden under ``read_committed`` leave gaps.
"""

from __future__ import annotations

import bisect
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from window_operator.spark.kafka_source.options import (
    DEFAULT_ARROW_BATCH,
    DEFAULT_POLL_TIMEOUT_MS,
)
from window_operator.spark.kafka_source.schema import EARLIEST, KAFKA_SCHEMA, KafkaSourceError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KafkaInputPartition", "read_messages", "read_partition", "read_range"]

log = logging.getLogger(__name__)

_CONSUME_WAIT_S = 0.1

# confluent-kafka timestamp types -> Kafka's TimestampType ids (what Spark reports).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}


@dataclass
class KafkaInputPartition(InputPartition):
    """One Spark task's work: records ``start <= offset < until`` of one topic partition.

    ``start`` is :data:`EARLIEST` for a partition discovered in this micro-batch whose
    earliest offset was not known on the driver.
    """

    topic: str
    partition: int
    start: int
    until: int
    consumer_config: dict[str, Any]
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    arrow_batch_size: int = DEFAULT_ARROW_BATCH

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] [{self.start}, {self.until}))"


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(KAFKA_SCHEMA, timezone="UTC")


def _record_batch(msgs: Sequence[Any], topic: str, partition: int, schema: pa.Schema) -> Any:
    import pyarrow as pa

    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    ts_types = _TIMESTAMP_TYPES
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([t[1] * 1000 for t in stamps], schema.field("timestamp").type),
        pa.array([ts_types.get(t[0], -1) for t in stamps], pa.int32()),
        pa.array([m.headers() for m in msgs], schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    topic: str,
    partition: int,
    start: int,
    until: int,
    consumer_config: Mapping[str, Any],
    *,
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
    arrow_batch_size: int = DEFAULT_ARROW_BATCH,
) -> Iterator[list[Any]]:
    """Exactly the records ``start <= offset < until`` (a range row), as message lists.

    ``consumer_config`` needs ``bootstrap.servers``; the rest is filled in as the
    source's own reads do (no commits, partition EOF, ``read_committed``).
    """
    conf: dict[str, Any] = {
        "group.id": f"wo-kafka-range-{uuid.uuid4().hex}",
        "fetch.wait.max.ms": "10",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "500",
        **consumer_config,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }
    conf.setdefault("isolation.level", "read_committed")
    return read_messages(
        KafkaInputPartition(
            topic=topic,
            partition=partition,
            start=start,
            until=until,
            consumer_config=conf,
            poll_timeout_ms=poll_timeout_ms,
            arrow_batch_size=arrow_batch_size,
        )
    )


def _describe(p: KafkaInputPartition) -> str:
    start = "earliest" if p.start == EARLIEST else str(p.start)
    return f"{p.topic}[{p.partition}] offsets [{start}, {p.until})"


def read_partition(p: KafkaInputPartition) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch`` es with exactly the records of ``p``'s offset range.

    Stops at the first record with ``offset >= until``, or when the consumer reaches the
    end of the partition at or beyond ``until``; never counts records. Raises
    :class:`KafkaSourceError` if the broker delivers nothing for ``poll_timeout_ms``.
    """
    schema = _arrow_schema()
    for msgs in read_messages(p):
        yield _record_batch(msgs, p.topic, p.partition, schema)


def read_messages(p: KafkaInputPartition) -> Iterator[list[Any]]:
    """The records of ``p``'s range as lists of confluent-kafka messages (see read_partition)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    if p.start != EARLIEST and p.start >= p.until:
        return
    batch_rows = max(1, p.arrow_batch_size)
    progress = _RangeProgress(p, timeout_s=p.poll_timeout_ms / 1000.0)
    consumer = Consumer(dict(p.consumer_config))
    try:
        start = OFFSET_BEGINNING if p.start == EARLIEST else p.start
        consumer.assign([TopicPartition(p.topic, p.partition, start)])
        while not progress.done:
            want = max(batch_rows - len(progress.pending), 1)
            msgs: list[Any] = consumer.consume(num_messages=want, timeout=_CONSUME_WAIT_S)
            if msgs:
                progress.take(msgs)
            if len(progress.pending) >= batch_rows or (progress.done and progress.pending):
                yield progress.drain()
            if not progress.done:
                progress.check_deadline()
    finally:
        consumer.close()


@dataclass
class _RangeProgress:
    """How far the read of one range is: records not yet handed out, where, until when."""

    p: KafkaInputPartition
    timeout_s: float
    pending: list[Any] = field(default_factory=list)
    next_offset: int = 0
    deadline: float = 0.0
    last_error: str = ""
    done: bool = False

    def __post_init__(self) -> None:
        self.next_offset = self.p.start
        self.deadline = time.monotonic() + self.timeout_s

    def take(self, msgs: list[Any]) -> None:
        """Account for one ``consume`` result: errors, EOF, records up to ``until``."""
        errors = [m for m in msgs if m.error() is not None]
        if errors:
            msgs = [m for m in msgs if m.error() is None]
            for m in errors:
                self._on_error(m)
        if msgs:
            self._on_records(msgs)

    def _on_error(self, m: Any) -> None:
        from confluent_kafka import KafkaError

        err = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            eof_at = m.offset()
            if eof_at is not None and eof_at >= self.p.until:
                self.done = True
        elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise KafkaSourceError(
                f"Kafka source: data loss reading {_describe(self.p)}: {err.str()} "
                "(records were deleted before they were read; set "
                "failOnDataLoss=false to skip them)"
            )
        elif err.fatal():
            raise KafkaSourceError(f"Kafka source: error reading {_describe(self.p)}: {err.str()}")
        else:
            self.last_error = err.str()
            log.warning("Kafka source: %s: %s", _describe(self.p), self.last_error)

    def _on_records(self, msgs: list[Any]) -> None:
        self.deadline = time.monotonic() + self.timeout_s
        until = self.p.until
        last = msgs[-1].offset()
        if last >= until:
            cut = bisect.bisect_left(msgs, until, key=lambda m: m.offset())
            msgs = msgs[:cut]
            self.done = True
        elif last + 1 >= until:
            self.done = True
        if msgs:
            self.next_offset = msgs[-1].offset() + 1
            self.pending.extend(msgs)

    def drain(self) -> list[Any]:
        """The pending records, handed out once."""
        out, self.pending = self.pending, []
        return out

    def check_deadline(self) -> None:
        """Fail if the broker has delivered nothing for the poll timeout."""
        if time.monotonic() > self.deadline:
            raise KafkaSourceError(
                f"Kafka source: no records from {_describe(self.p)} for {self.timeout_s:.0f}s "
                f"(next expected offset {self.next_offset}); the broker stopped delivering "
                "(unreachable broker, or an open transaction blocking read_committed)"
                + (f"; last error: {self.last_error}" if self.last_error else "")
            )

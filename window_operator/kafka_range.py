"""Reading exactly the records ``start <= offset < until`` of one Kafka partition.

A range is read by offset, never by counting records: transaction markers, compaction
and aborted records hidden under ``read_committed`` leave gaps. Used by the Spark
source's executor side and by a state task that must read input its state lacks.
"""

from __future__ import annotations

import bisect
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from window_operator.errors import WindowOperatorError

__all__ = [
    "EARLIEST",
    "KafkaRange",
    "KafkaSourceError",
    "RangeLike",
    "log_ends",
    "range_consumer_config",
    "read_messages",
]

log = logging.getLogger(__name__)

EARLIEST = -2
"""Offset placeholder for the earliest available offset (as in Spark's JSON offsets)."""

_CONSUME_WAIT_S = 0.1
#: How long a read that met a partition's end early waits for the broker's answer to
#: where the partition ends.
_END_CHECK_S = 10.0


class KafkaSourceError(WindowOperatorError, RuntimeError):
    """Kafka records could not be read as asked (timeouts, data loss, errors)."""


class RangeLike(Protocol):
    """What a range read needs (a :class:`KafkaRange`, or Spark's input partition)."""

    topic: str
    partition: int
    start: int
    until: int
    consumer_config: dict[str, Any]
    poll_timeout_ms: int
    arrow_batch_size: int


@dataclass
class KafkaRange:
    """Records ``start <= offset < until`` of one topic partition (``start`` may be
    :data:`EARLIEST`), read with ``consumer_config``, in lists of ``arrow_batch_size``."""

    topic: str
    partition: int
    start: int
    until: int
    consumer_config: dict[str, Any]
    poll_timeout_ms: int = 60_000
    arrow_batch_size: int = 10_000


def range_consumer_config(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    """Consumer settings of a range read: ``consumer_config`` (``bootstrap.servers`` at
    least) plus no commits, partition EOF, ``read_committed`` unless set, no offset reset."""
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
    return conf


def _describe(p: RangeLike) -> str:
    start = "earliest" if p.start == EARLIEST else str(p.start)
    return f"{p.topic}[{p.partition}] offsets [{start}, {p.until})"


def read_messages(p: RangeLike) -> Iterator[list[Any]]:
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
            if progress.short_end is not None:
                _check_end(p, progress.short_end)
                progress.short_end = None
            if len(progress.pending) >= batch_rows or (progress.done and progress.pending):
                yield progress.drain()
            if not progress.done:
                progress.check_deadline()
    finally:
        consumer.close()


def log_ends(
    consumer_config: Mapping[str, Any],
    partitions: Sequence[tuple[str, int]],
    timeout_s: float = _END_CHECK_S,
) -> dict[tuple[str, int], int]:
    """The log end offset of each ``(topic, partition)``: its high watermark, records of
    open transactions included (``read_uncommitted``: under ``read_committed`` the broker
    answers with the last stable offset). Raises ``KafkaException`` when the broker does
    not answer within ``timeout_s`` for a partition."""
    from confluent_kafka import Consumer, TopicPartition

    config = range_consumer_config(consumer_config)
    probe = Consumer({**config, "isolation.level": "read_uncommitted"})
    try:
        return {
            (topic, partition): probe.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )[1]
            for topic, partition in partitions
        }
    finally:
        probe.close()


def _check_end(p: RangeLike, eof_at: int) -> None:
    """The read met the partition's end at ``eof_at``, before the range's end: fail at
    once if the broker holds no record there at all (waiting for them would only time
    out), not when records wait behind an open transaction. So the end asked for is the
    high watermark (``read_uncommitted``: under ``read_committed`` the broker answers
    with the last stable offset, which stops before an open transaction)."""
    from confluent_kafka import KafkaException

    try:
        tp = (p.topic, p.partition)
        high = log_ends(p.consumer_config, [tp])[tp]
    except KafkaException:  # no answer now: the poll timeout still bounds the wait
        return
    if high < p.until:
        raise KafkaSourceError(
            f"Kafka source: {p.topic}[{p.partition}] ends at offset {high}, before the end "
            f"of {_describe(p)} (the read met its end at {eof_at}): those records are not "
            "there (the topic was deleted and created again, or this is not the broker "
            "that held them)"
        )


@dataclass
class _RangeProgress:
    """How far the read of one range is: records not yet handed out, where, until when."""

    p: RangeLike
    timeout_s: float
    pending: list[Any] = field(default_factory=list)
    next_offset: int = 0
    deadline: float = 0.0
    last_error: str = ""
    done: bool = False
    #: the partition's end the read met before the range's end (not checked yet)
    short_end: int | None = None

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
            elif eof_at is not None:
                self.short_end = eof_at
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

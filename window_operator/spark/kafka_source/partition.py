"""Executor side: a Spark task's offset range of one partition, read from Kafka exactly.

A range ``[start, until)`` is read by offset, never by counting records: transaction
markers, compaction and aborted records hidden under ``read_committed`` leave gaps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from window_operator.kafka_range import range_consumer_config, read_messages
from window_operator.spark.kafka_source.options import (
    DEFAULT_ARROW_BATCH,
    DEFAULT_POLL_TIMEOUT_MS,
)
from window_operator.spark.kafka_source.schema import KAFKA_SCHEMA

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
    conf = range_consumer_config(consumer_config)
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


def read_partition(p: KafkaInputPartition) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch`` es with exactly the records of ``p``'s offset range.

    Stops at the first record with ``offset >= until``, or when the consumer reaches the
    end of the partition at or beyond ``until``; never counts records. Raises
    :class:`KafkaSourceError` if the broker delivers nothing for ``poll_timeout_ms``.
    """
    schema = _arrow_schema()
    for msgs in read_messages(p):
        yield _record_batch(msgs, p.topic, p.partition, schema)

"""A Kafka source for Spark Structured Streaming written as a PySpark Python Data Source.

Spark's own ``kafka`` connector (``spark-sql-kafka-0-10``) is a separate jar that is not
always available (no Maven access on these machines). This package provides the same
streaming source over confluent-kafka instead, registered as format ``wo_kafka``:

* the schema is the one of Spark's built-in source with ``includeHeaders=true``:
  ``key binary, value binary, topic string, partition int, offset long,
  timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>``;
* offsets live in Spark's checkpoint as ``{"topic": {"partition": next_offset}}``; no
  consumer-group offsets are committed;
* one Spark input partition per Kafka partition that has data in the micro-batch (unless
  ``minPartitions`` asks for splitting), reading exactly the records with
  ``from <= offset < until`` (offsets may be non-contiguous: transaction markers,
  compaction, aborted records hidden under ``read_committed``);
* admission control (``maxOffsetsPerTrigger``) and ``Trigger.AvailableNow``.

:func:`read_kafka_stream` returns the streaming DataFrame, preferring Spark's built-in
``kafka`` format when its jar is on the classpath.

Options (case-insensitive):

``kafka.bootstrap.servers``
    Required.
``subscribe`` / ``subscribePattern``
    Comma-separated topic names, or a regular expression matched against topic names
    (exactly one of the two).
``startingOffsets``
    ``earliest`` (default), ``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` where
    -2 means earliest and -1 latest. Partitions the JSON does not name start at earliest
    (Spark's source rejects such JSON instead). Only used when a query starts without a
    checkpoint; partitions discovered later always start at earliest.
``maxOffsetsPerTrigger``
    Offsets per micro-batch across all partitions: every partition with a backlog gets at
    least one, the rest is split in proportion to the backlogs. Never exceeded (Spark's
    source may exceed it slightly by rounding tiny shares up). Ignored when the engine asks
    for everything available (``ReadAllAvailable``).
``minPartitions``
    Split offset ranges so that a micro-batch has at least this many Spark partitions.
    Off by default: one Spark partition per Kafka partition with data.
``isolation.level``
    ``read_committed`` (default) or ``read_uncommitted``. Under ``read_committed`` the end
    of a partition is its last stable offset.
``failOnDataLoss``
    ``true`` (default): fail when offsets to read were already deleted (retention). With
    ``false``, skip to the earliest available record.
``kafkaConsumer.pollTimeoutMs``
    How long a task waits for the broker to deliver before failing (default 60000).
``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``
    Retries of the driver-side offset queries (default 3 and 1000).
``arrowBatchSize``
    Rows per Arrow record batch handed to Spark (default 10000).
``kafka.<librdkafka setting>``
    Passed to the consumers (and, where meaningful, to the driver's admin client).

Modules: ``schema`` (schemas, offset placeholders, the error type), ``options``
(parsing and validation), ``offsets`` (checkpointed offsets JSON, rate limiting and
range splitting), ``queries`` (the driver's partition and offset lookups),
``reader`` (the data source and its streaming reader), ``partition`` (the executor-side
read of one offset range) and ``stream`` (registration and :func:`read_kafka_stream`).
"""

from __future__ import annotations

from window_operator.spark.kafka_source import schema
from window_operator.spark.kafka_source.partition import (
    KafkaInputPartition,
    read_messages,
    read_partition,
    read_range,
)
from window_operator.spark.kafka_source.reader import KafkaDataSource, KafkaStreamReader
from window_operator.spark.kafka_source.schema import *  # noqa: F403 (its __all__ is ours too)
from window_operator.spark.kafka_source.stream import (
    builtin_kafka_available,
    kafka_end_offsets,
    read_kafka_stream,
)

__all__ = [
    "KafkaDataSource",
    "KafkaInputPartition",
    "KafkaStreamReader",
    "builtin_kafka_available",
    "kafka_end_offsets",
    "read_kafka_stream",
    "read_messages",
    "read_partition",
    "read_range",
]
__all__ += schema.__all__

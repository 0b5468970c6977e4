"""What the source hands to Spark: its format name, row schemas, offset placeholders, errors."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from window_operator.kafka_range import EARLIEST, KafkaSourceError

__all__ = [
    "EARLIEST",
    "KAFKA_COLUMNS",
    "KAFKA_SCHEMA",
    "LATEST",
    "RANGES_SCHEMA",
    "SOURCE_NAME",
    "KafkaSourceError",
    "OffsetMap",
    "TopicPartitionKey",
]

SOURCE_NAME = "wo_kafka"
"""Format name the Python data source is registered under."""

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)
"""Schema of Spark's built-in Kafka source with ``includeHeaders=true``."""

#: With ``emitRanges=true``: one row per topic partition and micro-batch, the offset
#: range ``[start_offset, until_offset)`` to read (``start_offset`` -2 = earliest).
#: Offsets are still planned and checkpointed by Spark; the rows' consumer reads the
#: records on the executor, so they never pass through the JVM.
RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("start_offset", LongType()),
        StructField("until_offset", LongType()),
    ]
)

KAFKA_COLUMNS: tuple[str, ...] = tuple(KAFKA_SCHEMA.fieldNames())
"""Column names of :data:`KAFKA_SCHEMA`, in order."""

LATEST = -1
"""Offset placeholder for the latest offset (as in Spark's JSON offsets)."""

TopicPartitionKey = tuple[str, int]
OffsetMap = dict[TopicPartitionKey, int]

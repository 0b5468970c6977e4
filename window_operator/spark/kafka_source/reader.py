"""Driver side: the ``wo_kafka`` data source and its streaming reader.

The reader resolves ``startingOffsets``, answers ``latestOffset`` within the read limit
(``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``) and plans one input partition per
topic partition with data; executors read the partitions (see ``partition.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from window_operator.spark.kafka_source.offsets import (
    OffsetRange,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
    split_ranges,
)
from window_operator.spark.kafka_source.options import SourceOptions, opt, parse_options
from window_operator.spark.kafka_source.partition import KafkaInputPartition, read_partition
from window_operator.spark.kafka_source.queries import BrokerQueries
from window_operator.spark.kafka_source.schema import (
    EARLIEST,
    KAFKA_SCHEMA,
    LATEST,
    RANGES_SCHEMA,
    SOURCE_NAME,
    KafkaSourceError,
    OffsetMap,
)

__all__ = ["KafkaDataSource", "KafkaStreamReader"]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader: offsets, admission control, AvailableNow and partition planning.

    Lives in a long-running Python worker on the driver; clients are created lazily and
    never pickled (Spark pickles the reader with the read function sent to executors).
    """

    def __init__(self, options: SourceOptions) -> None:
        self._reset(options)

    def _reset(self, options: SourceOptions) -> None:
        self.options = options
        self._queries = BrokerQueries(options)
        self._target: OffsetMap | None = None
        self._last_latest: OffsetMap | None = None
        self._new_partition_starts: OffsetMap = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reset(state["options"])

    # -- DataSourceStreamReader ----------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Resolve ``startingOffsets`` against the current partitions and offsets."""
        tps = self._queries.partitions()
        starting = self.options.starting_offsets
        if starting == "latest":
            return offsets_to_json(self._queries.list_offsets(tps, earliest=False))
        if starting == "earliest":
            return offsets_to_json(self._queries.list_offsets(tps, earliest=True))
        assert isinstance(starting, dict)
        wanted = offsets_from_json(starting)
        missing = sorted(set(wanted) - set(tps))
        if missing:
            raise KafkaSourceError(
                f"Kafka source: startingOffsets names partitions that do not exist: {missing}"
            )
        need_earliest = [tp for tp in tps if wanted.get(tp, EARLIEST) == EARLIEST]
        # LATEST, and an offset given: it must not lie past the end
        need_latest = [tp for tp in tps if wanted.get(tp, EARLIEST) != EARLIEST]
        earliest = self._queries.list_offsets(need_earliest, earliest=True)
        latest = self._queries.list_offsets(need_latest, earliest=False)
        if past := [tp for tp in tps if wanted.get(tp, EARLIEST) > latest.get(tp, 0)]:
            tp = past[0]
            raise KafkaSourceError(
                f"Kafka source: startingOffsets gives {tp[0]}[{tp[1]}] offset {wanted[tp]}, "
                f"past the partition's end at {latest[tp]}: the broker holds no record there "
                "(the offset is wrong, the broker lost records, or the topic was deleted and "
                "created again)"
            )
        out: OffsetMap = {}
        for tp in tps:
            off = wanted.get(tp, EARLIEST)
            out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return offsets_to_json(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` if set, else ``ReadAllAvailable``."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the current end offsets as the target of a ``Trigger.AvailableNow`` run.

        Later ``latestOffset`` calls never go beyond it; partitions created after this call
        are left for the next run.
        """
        self._target = self._queries.latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next micro-batch from ``start``, within ``limit``."""
        start_map = offsets_from_json(start)
        latest = self._queries.latest()
        self._last_latest = dict(latest)
        if self._target is not None:
            target = self._target
            latest = {tp: min(off, target[tp]) for tp, off in latest.items() if tp in target}
        new = [tp for tp in latest if tp not in start_map]
        earliest_new = self._queries.list_offsets(new, earliest=True) if new else {}
        begins: OffsetMap = {}
        ends: OffsetMap = {}
        for tp, end in latest.items():
            begin = start_map.get(tp, earliest_new.get(tp, 0))
            if end < begin and self.options.fail_on_data_loss:
                raise KafkaSourceError(_behind(tp, end, begin))
            begins[tp] = begin
            ends[tp] = max(end, begin)
        for tp in new:
            self._new_partition_starts[tp] = begins[tp]
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(int(limit.max_rows), begins, ends)
        elif isinstance(limit, ReadMinRows):
            backlog = sum(ends[tp] - begins[tp] for tp in ends)
            if backlog < int(limit.min_rows):
                return offsets_to_json(start_map)
        out = dict(start_map)
        out.update(ends)
        return offsets_to_json(out)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The end offsets seen by the last ``latestOffset`` call (for query progress)."""
        if self._last_latest is None:
            return None
        return offsets_to_json(self._last_latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One input partition per topic partition with ``start < end``."""
        start_map = offsets_from_json(start)
        end_map = offsets_from_json(end)
        conf = self.options.consumer_config()
        ranges: list[OffsetRange] = []
        for tp, until in sorted(end_map.items()):
            begin = start_map.get(tp, self._new_partition_starts.get(tp, EARLIEST))
            if begin == EARLIEST:
                if until > 0:
                    ranges.append(OffsetRange(tp, EARLIEST, until))
            elif begin < until:
                ranges.append(OffsetRange(tp, begin, until))
        ranges = split_ranges(ranges, self.options.min_partitions)
        return [
            KafkaInputPartition(
                topic=tp[0],
                partition=tp[1],
                start=begin,
                until=until,
                consumer_config=conf,
                poll_timeout_ms=self.options.poll_timeout_ms,
                arrow_batch_size=self.options.arrow_batch_size,
            )
            for tp, begin, until in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Read one input partition (runs on an executor); yields Arrow record batches.

        With ``emitRanges`` the partition's offset range itself is the one row: the
        consumer of the DataFrame reads the records (see :func:`read_partition`).
        """
        assert isinstance(partition, KafkaInputPartition), type(partition)
        if self.options.emit_ranges:
            return iter([(partition.topic, partition.partition, partition.start, partition.until)])
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """No-op: offsets live in Spark's checkpoint, nothing is committed to Kafka."""

    def stop(self) -> None:
        """Drop the admin client.

        PySpark's source runner calls this on its way out, also when Spark stopped the
        query and closed the runner's socket before killing it (a stop under load):
        the runner then reports the closed socket (``EOFError``) back over that socket,
        and prints a screen of tracebacks (``BrokenPipeError``) into the job's stderr
        after its Ctrl-C. That exit is made quiet here; any other error is reported.
        """
        self._queries.close()
        if isinstance(sys.exc_info()[1], EOFError) and in_source_runner():
            sys.stderr.flush()
            os._exit(0)


def in_source_runner() -> bool:
    """Whether this process is PySpark's streaming source runner (the driver's Python
    process that serves the reader)."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return str(main).endswith("python_streaming_source_runner.py")


class KafkaDataSource(DataSource):
    """Kafka streaming source over confluent-kafka, format ``wo_kafka`` (see the package doc)."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``wo_kafka``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka source schema with headers, or :data:`RANGES_SCHEMA` with emitRanges."""
        if (opt(self.options, "emitRanges") or "false").lower() == "true":
            return RANGES_SCHEMA
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A :class:`KafkaStreamReader` for the options given to ``readStream``."""
        return KafkaStreamReader(parse_options(self.options))


def _behind(tp: tuple[str, int], end: int, begin: int) -> str:
    """Why a partition that ends before the query's position stops the query: the
    records written there from now on would never be read."""
    return (
        f"Kafka source: {tp[0]}[{tp[1]}] ends at offset {end}, before offset {begin} the "
        "query continues from: the broker lost records the query had read (acknowledged "
        "writes lost in a broker crash or an unclean leader election), or the topic was "
        "deleted and created again; the records written there from now on would never be "
        "read (failOnDataLoss=false: read on from the query's position all the same)"
    )

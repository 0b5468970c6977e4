"""A Kafka source for Spark Structured Streaming written as a PySpark Python Data Source.

Spark's own ``kafka`` connector (``spark-sql-kafka-0-10``) is a separate jar that is not
always available (no Maven access on these machines). This module provides the same
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
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
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

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EARLIEST",
    "KAFKA_COLUMNS",
    "KAFKA_SCHEMA",
    "LATEST",
    "RANGES_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataSource",
    "KafkaInputPartition",
    "KafkaSourceError",
    "KafkaStreamReader",
    "builtin_kafka_available",
    "kafka_end_offsets",
    "read_kafka_stream",
    "read_messages",
    "read_partition",
    "read_range",
]

log = logging.getLogger(__name__)

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

EARLIEST = -2
"""Offset placeholder for the earliest available offset (as in Spark's JSON offsets)."""
LATEST = -1
"""Offset placeholder for the latest offset (as in Spark's JSON offsets)."""

_DEFAULT_POLL_TIMEOUT_MS = 60_000
_DEFAULT_ARROW_BATCH = 10_000
_ADMIN_REQUEST_TIMEOUT_S = 30.0
_CONSUME_WAIT_S = 0.1

# confluent-kafka timestamp types -> Kafka's TimestampType ids (what Spark reports).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}

# librdkafka properties that only make sense for consumers (kept away from the admin client).
_CONSUMER_ONLY_PREFIXES = (
    "fetch.",
    "group.",
    "enable.auto.",
    "auto.",
    "isolation.level",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "queued.",
    "partition.assignment.strategy",
    "enable.partition.eof",
    "check.crcs",
    "max.partition.fetch.bytes",
    "allow.auto.create.topics",
    "coordinator.query.interval.ms",
    "consume.callback.max.messages",
)

TopicPartitionKey = tuple[str, int]
OffsetMap = dict[TopicPartitionKey, int]


class KafkaSourceError(RuntimeError):
    """The Kafka source could not read what it was asked to (timeouts, data loss, errors)."""


# ---------------------------------------------------------------------------------------
# options


@dataclass(frozen=True)
class _SourceOptions:
    bootstrap_servers: str
    topics: tuple[str, ...]
    pattern: str | None
    starting_offsets: str | dict[str, dict[str, int]]
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    isolation_level: str
    fail_on_data_loss: bool
    poll_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    arrow_batch_size: int
    client_config: dict[str, str] = field(default_factory=dict)
    #: Emit one row per offset range instead of the records (see RANGES_SCHEMA).
    emit_ranges: bool = False

    def subscribed(self, topic: str) -> bool:
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": f"wo-kafka-source-{uuid.uuid4().hex}",
            "fetch.wait.max.ms": "10",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "500",
        }
        conf.update(self.client_config)
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "isolation.level": self.isolation_level,
                "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
            }
        )
        return conf

    def admin_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        for k, v in self.client_config.items():
            if not k.startswith(_CONSUMER_ONLY_PREFIXES):
                conf[k] = v
        return conf


def _opt(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for k, v in options.items():
        if k.lower() == lowered:
            return str(v)
    return None


def _int_opt(
    options: Mapping[str, str], name: str, default: int | None, minimum: int
) -> int | None:
    raw = _opt(options, name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _parse_starting_offsets(raw: str | None) -> str | dict[str, dict[str, int]]:
    if raw is None or raw.strip().lower() in ("", "earliest"):
        return "earliest"
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"startingOffsets must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(f"startingOffsets JSON must be an object, got {raw!r}")
    out: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(f"startingOffsets: topic {topic!r} must map to an object")
        out[str(topic)] = {}
        for p, off in parts.items():
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise ValueError(f"startingOffsets: bad offset {off!r} for {topic}[{p}]")
            out[str(topic)][str(int(p))] = off
    return out


def _parse_options(options: Mapping[str, str]) -> _SourceOptions:
    bootstrap = _opt(options, "kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option kafka.bootstrap.servers is required")
    subscribe = _opt(options, "subscribe")
    pattern = _opt(options, "subscribePattern")
    if bool(subscribe) == bool(pattern):
        raise ValueError("exactly one of the options subscribe, subscribePattern is required")
    topics = tuple(t.strip() for t in (subscribe or "").split(",") if t.strip())
    if subscribe and not topics:
        raise ValueError(f"option subscribe names no topic: {subscribe!r}")
    if pattern:
        re.compile(pattern)
    isolation = (
        _opt(options, "isolation.level") or _opt(options, "kafka.isolation.level") or ""
    ).strip().lower() or "read_committed"
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation.level must be read_committed or read_uncommitted: {isolation}")
    fail_raw = (_opt(options, "failOnDataLoss") or "true").strip().lower()
    if fail_raw not in ("true", "false"):
        raise ValueError(f"failOnDataLoss must be true or false, got {fail_raw!r}")
    client: dict[str, str] = {}
    for k, v in options.items():
        key = k.lower()
        if key.startswith("kafka.") and key not in (
            "kafka.bootstrap.servers",
            "kafka.isolation.level",
        ):
            client[k[len("kafka.") :]] = str(v)
    starting = _parse_starting_offsets(_opt(options, "startingOffsets"))
    if isinstance(starting, dict) and topics:
        unknown = sorted(set(starting) - set(topics))
        if unknown:
            raise ValueError(f"startingOffsets names topics not subscribed: {unknown}")
    return _SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        pattern=pattern or None,
        starting_offsets=starting,
        max_offsets_per_trigger=_int_opt(options, "maxOffsetsPerTrigger", None, 1),
        min_partitions=_int_opt(options, "minPartitions", None, 1),
        isolation_level=isolation,
        fail_on_data_loss=fail_raw == "true",
        poll_timeout_ms=_int_opt(options, "kafkaConsumer.pollTimeoutMs", None, 1)
        or _DEFAULT_POLL_TIMEOUT_MS,
        fetch_retries=_int_opt(options, "fetchOffset.numRetries", 3, 0) or 0,
        fetch_retry_interval_ms=_int_opt(options, "fetchOffset.retryIntervalMs", 1000, 0) or 0,
        arrow_batch_size=_int_opt(options, "arrowBatchSize", _DEFAULT_ARROW_BATCH, 1)
        or _DEFAULT_ARROW_BATCH,
        client_config=client,
        emit_ranges=(_opt(options, "emitRanges") or "false").lower() == "true",
    )


# ---------------------------------------------------------------------------------------
# offsets


def _offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Canonical (sorted) JSON-able form, so equal offsets serialise to equal strings."""
    out: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def _offsets_from_json(offsets: Mapping[str, Any] | None) -> OffsetMap:
    out: OffsetMap = {}
    for topic, parts in (offsets or {}).items():
        for p, off in parts.items():
            out[(str(topic), int(p))] = int(off)
    return out


def _rate_limit(limit: int, begins: Mapping[TopicPartitionKey, int], ends: OffsetMap) -> OffsetMap:
    """Cap ``ends`` so that exactly ``limit`` offsets are admitted when the backlog exceeds it.

    Like Spark's source, no partition with a backlog is starved: each gets one offset, and
    the rest of ``limit`` is shared in proportion to the remaining backlogs (largest-remainder
    rounding, ties broken by topic/partition), so the total never exceeds ``limit``. If
    ``limit`` is smaller than the number of partitions with a backlog, the partitions that
    get one offset rotate with the start offsets (deterministic when a batch is replayed).
    """
    tps = sorted(tp for tp, end in ends.items() if end > begins[tp])
    sizes = {tp: ends[tp] - begins[tp] for tp in tps}
    total = sum(sizes.values())
    if total <= limit:
        return dict(ends)
    shares = dict.fromkeys(tps, 0)
    if limit < len(tps):
        k = sum(begins[tp] for tp in tps) % len(tps)
        for tp in (tps[k:] + tps[:k])[:limit]:
            shares[tp] = 1
    else:
        rest = limit - len(tps)
        rest_total = total - len(tps)
        remainders: list[tuple[int, TopicPartitionKey]] = []
        for tp in tps:
            q, r = divmod(rest * (sizes[tp] - 1), rest_total)
            shares[tp] = 1 + q
            remainders.append((r, tp))
        leftover = limit - sum(shares.values())
        remainders.sort(key=lambda item: (-item[0], item[1]))
        for _, tp in remainders[:leftover]:
            shares[tp] += 1
    out = dict(ends)
    for tp, share in shares.items():
        out[tp] = min(ends[tp], begins[tp] + share)
    return out


# ---------------------------------------------------------------------------------------
# input partitions and the executor-side read


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
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS
    arrow_batch_size: int = _DEFAULT_ARROW_BATCH

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
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS,
    arrow_batch_size: int = _DEFAULT_ARROW_BATCH,
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
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    if p.start != EARLIEST and p.start >= p.until:
        return
    until = p.until
    batch_rows = max(1, p.arrow_batch_size)
    timeout_s = p.poll_timeout_ms / 1000.0
    consumer = Consumer(dict(p.consumer_config))
    try:
        start = OFFSET_BEGINNING if p.start == EARLIEST else p.start
        consumer.assign([TopicPartition(p.topic, p.partition, start)])
        pending: list[Any] = []
        next_offset = p.start
        deadline = time.monotonic() + timeout_s
        last_error = ""
        done = False
        while not done:
            want = batch_rows - len(pending)
            msgs: list[Any] = consumer.consume(num_messages=max(want, 1), timeout=_CONSUME_WAIT_S)
            if msgs:
                errors = [m for m in msgs if m.error() is not None]
                if errors:
                    msgs = [m for m in msgs if m.error() is None]
                    for m in errors:
                        err = m.error()
                        if err.code() == KafkaError._PARTITION_EOF:
                            eof_at = m.offset()
                            if eof_at is not None and eof_at >= until:
                                done = True
                        elif err.code() in (
                            KafkaError._AUTO_OFFSET_RESET,
                            KafkaError.OFFSET_OUT_OF_RANGE,
                        ):
                            raise KafkaSourceError(
                                f"Kafka source: data loss reading {_describe(p)}: {err.str()} "
                                "(records were deleted before they were read; set "
                                "failOnDataLoss=false to skip them)"
                            )
                        elif err.fatal():
                            raise KafkaSourceError(
                                f"Kafka source: error reading {_describe(p)}: {err.str()}"
                            )
                        else:
                            last_error = err.str()
                            log.warning("Kafka source: %s: %s", _describe(p), last_error)
                if msgs:
                    deadline = time.monotonic() + timeout_s
                    last = msgs[-1].offset()
                    if last >= until:
                        cut = bisect.bisect_left(msgs, until, key=lambda m: m.offset())
                        msgs = msgs[:cut]
                        done = True
                    elif last + 1 >= until:
                        done = True
                    if msgs:
                        next_offset = msgs[-1].offset() + 1
                        pending.extend(msgs)
                if len(pending) >= batch_rows or (done and pending):
                    yield pending
                    pending = []
            if not done and time.monotonic() > deadline:
                raise KafkaSourceError(
                    f"Kafka source: no records from {_describe(p)} for {timeout_s:.0f}s "
                    f"(next expected offset {next_offset}); the broker stopped delivering "
                    "(unreachable broker, or an open transaction blocking read_committed)"
                    + (f"; last error: {last_error}" if last_error else "")
                )
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------
# driver side


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader: offsets, admission control, AvailableNow and partition planning.

    Lives in a long-running Python worker on the driver; clients are created lazily and
    never pickled (Spark pickles the reader with the read function sent to executors).
    """

    def __init__(self, options: _SourceOptions) -> None:
        self.options = options
        self._admin: Any = None
        self._target: OffsetMap | None = None
        self._last_latest: OffsetMap | None = None
        self._new_partition_starts: OffsetMap = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._admin = None
        self._target = None
        self._last_latest = None
        self._new_partition_starts = {}

    # -- broker queries ------------------------------------------------------------------

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self.options.admin_config())
        return self._admin

    def _retrying(self, what: str, fn: Any) -> Any:
        attempts = self.options.fetch_retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - KafkaException and timeouts
                last = exc
                log.warning("Kafka source: %s failed (attempt %d): %s", what, attempt + 1, exc)
                if attempt + 1 < attempts:
                    time.sleep(self.options.fetch_retry_interval_ms / 1000.0)
        raise KafkaSourceError(
            f"Kafka source: {what} failed against {self.options.bootstrap_servers}: {last}"
        ) from last

    def _partitions(self) -> list[TopicPartitionKey]:
        def fetch() -> list[TopicPartitionKey]:
            md = self._admin_client().list_topics(timeout=_ADMIN_REQUEST_TIMEOUT_S)
            found: list[TopicPartitionKey] = []
            for name, meta in md.topics.items():
                if meta.error is not None or not self.options.subscribed(name):
                    continue
                found.extend((name, p) for p in meta.partitions)
            return sorted(found)

        result: list[TopicPartitionKey] = self._retrying("topic metadata", fetch)
        return result

    def _list_offsets(self, tps: Sequence[TopicPartitionKey], earliest: bool) -> OffsetMap:
        if not tps:
            return {}
        import confluent_kafka.admin as kafka_admin
        from confluent_kafka import IsolationLevel, TopicPartition

        offset_spec: Any = getattr(kafka_admin, "OffsetSpec")  # noqa: B009 - untyped export

        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.options.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

        def fetch() -> OffsetMap:
            spec = offset_spec.earliest() if earliest else offset_spec.latest()
            futures = self._admin_client().list_offsets(
                {TopicPartition(t, p): spec for t, p in tps},
                isolation_level=isolation,
                request_timeout=_ADMIN_REQUEST_TIMEOUT_S,
            )
            return {
                (tp.topic, tp.partition): int(f.result(timeout=_ADMIN_REQUEST_TIMEOUT_S).offset)
                for tp, f in futures.items()
            }

        result: OffsetMap = self._retrying("earliest" if earliest else "latest offsets", fetch)
        return result

    def _latest(self) -> OffsetMap:
        return self._list_offsets(self._partitions(), earliest=False)

    # -- DataSourceStreamReader ----------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Resolve ``startingOffsets`` against the current partitions and offsets."""
        tps = self._partitions()
        starting = self.options.starting_offsets
        if starting == "latest":
            return _offsets_to_json(self._latest_of(tps))
        if starting == "earliest":
            return _offsets_to_json(self._list_offsets(tps, earliest=True))
        assert isinstance(starting, dict)
        wanted = _offsets_from_json(starting)
        missing = sorted(set(wanted) - set(tps))
        if missing:
            raise KafkaSourceError(
                f"Kafka source: startingOffsets names partitions that do not exist: {missing}"
            )
        need_earliest = [tp for tp in tps if wanted.get(tp, EARLIEST) == EARLIEST]
        need_latest = [tp for tp in tps if wanted.get(tp) == LATEST]
        earliest = self._list_offsets(need_earliest, earliest=True)
        latest = self._latest_of(need_latest)
        out: OffsetMap = {}
        for tp in tps:
            off = wanted.get(tp, EARLIEST)
            out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return _offsets_to_json(out)

    def _latest_of(self, tps: Sequence[TopicPartitionKey]) -> OffsetMap:
        return self._list_offsets(tps, earliest=False)

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
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next micro-batch from ``start``, within ``limit``."""
        start_map = _offsets_from_json(start)
        latest = self._latest()
        self._last_latest = dict(latest)
        if self._target is not None:
            target = self._target
            latest = {tp: min(off, target[tp]) for tp, off in latest.items() if tp in target}
        new = [tp for tp in latest if tp not in start_map]
        earliest_new = self._list_offsets(new, earliest=True) if new else {}
        begins: OffsetMap = {}
        ends: OffsetMap = {}
        for tp, end in latest.items():
            begin = start_map.get(tp, earliest_new.get(tp, 0))
            begins[tp] = begin
            ends[tp] = max(end, begin)
        for tp in new:
            self._new_partition_starts[tp] = begins[tp]
        if isinstance(limit, ReadMaxRows):
            ends = _rate_limit(int(limit.max_rows), begins, ends)
        elif isinstance(limit, ReadMinRows):
            backlog = sum(ends[tp] - begins[tp] for tp in ends)
            if backlog < int(limit.min_rows):
                return _offsets_to_json(start_map)
        out = dict(start_map)
        out.update(ends)
        return _offsets_to_json(out)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The end offsets seen by the last ``latestOffset`` call (for query progress)."""
        if self._last_latest is None:
            return None
        return _offsets_to_json(self._last_latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One input partition per topic partition with ``start < end``."""
        start_map = _offsets_from_json(start)
        end_map = _offsets_from_json(end)
        conf = self.options.consumer_config()
        ranges: list[tuple[TopicPartitionKey, int, int]] = []
        for tp, until in sorted(end_map.items()):
            begin = start_map.get(tp, self._new_partition_starts.get(tp, EARLIEST))
            if begin == EARLIEST:
                if until > 0:
                    ranges.append((tp, EARLIEST, until))
            elif begin < until:
                ranges.append((tp, begin, until))
        ranges = _split_ranges(ranges, self.options.min_partitions)
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
        """Drop the admin client."""
        self._admin = None


def _split_ranges(
    ranges: list[tuple[TopicPartitionKey, int, int]], min_partitions: int | None
) -> list[tuple[TopicPartitionKey, int, int]]:
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    sized = [r for r in ranges if r[1] != EARLIEST]
    total = sum(until - begin for _, begin, until in sized)
    if total <= 0:
        return ranges
    out: list[tuple[TopicPartitionKey, int, int]] = []
    for tp, begin, until in ranges:
        if begin == EARLIEST:
            out.append((tp, begin, until))
            continue
        size = until - begin
        parts = max(1, min(size, round(size / total * min_partitions)))
        for i in range(parts):
            lo = begin + size * i // parts
            hi = begin + size * (i + 1) // parts
            if lo < hi:
                out.append((tp, lo, hi))
    return out


class KafkaDataSource(DataSource):
    """Kafka streaming source over confluent-kafka, format ``wo_kafka`` (see module doc)."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``wo_kafka``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka source schema with headers, or :data:`RANGES_SCHEMA` with emitRanges."""
        if (_opt(self.options, "emitRanges") or "false").lower() == "true":
            return RANGES_SCHEMA
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A :class:`KafkaStreamReader` for the options given to ``readStream``."""
        return KafkaStreamReader(_parse_options(self.options))


# ---------------------------------------------------------------------------------------
# helpers


_registered: weakref.WeakSet[Any] = weakref.WeakSet()
_BUILTIN_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
# Options only this module's source understands (not passed to Spark's built-in source).
_OWN_OPTIONS = {"isolation.level", "arrowbatchsize"}


def _register(spark: Any) -> None:
    try:
        if spark in _registered:
            return
    except TypeError:
        pass
    spark.dataSource.register(KafkaDataSource)
    try:
        _registered.add(spark)
    except TypeError:
        pass


def builtin_kafka_available(spark: Any) -> bool:
    """Whether Spark's own ``kafka`` format (spark-sql-kafka jar) is on the classpath."""
    try:
        jvm = spark._jvm
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(_BUILTIN_PROVIDER, False, loader)
        return True
    except Exception:  # noqa: BLE001 - py4j errors, Spark Connect sessions without _jvm
        return False


def read_kafka_stream(
    spark: Any,
    *,
    bootstrap_servers: str,
    topics: Sequence[str] | str,
    starting_offsets: str | Mapping[str, Mapping[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    extra: Mapping[str, str] | None = None,
    use_builtin: bool | None = None,
    ranges: bool = False,
) -> Any:
    """A streaming DataFrame over ``topics`` with the columns of :data:`KAFKA_SCHEMA`.

    Uses Spark's built-in ``kafka`` format when its jar is on the classpath (with
    ``includeHeaders=true`` and ``kafka.isolation.level=read_committed``), otherwise this
    module's ``wo_kafka`` Python data source, registered once per session. ``extra``
    holds further source options (``kafka.*`` client settings, ``minPartitions``,
    ``failOnDataLoss``, ...). ``use_builtin`` forces the choice (``None``: automatic).
    With ``ranges=True`` the frame has :data:`RANGES_SCHEMA` instead: one offset range per
    topic partition and batch, for consumers that read the records on the executors
    (with :func:`read_range`).
    """
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    if not topic_list:
        raise ValueError("read_kafka_stream needs at least one topic")
    options: dict[str, str] = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(topic_list),
        "startingOffsets": (
            starting_offsets
            if isinstance(starting_offsets, str)
            else json.dumps(
                {t: {str(p): int(o) for p, o in ps.items()} for t, ps in starting_offsets.items()}
            )
        ),
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(int(max_offsets_per_trigger))
    for k, v in (extra or {}).items():
        options[k] = str(v)
    if ranges:
        # the caller reads the records itself (RANGES_SCHEMA): only this source does that
        options["emitRanges"] = "true"
        _register(spark)
        return spark.readStream.format(SOURCE_NAME).options(**options).load()
    builtin = builtin_kafka_available(spark) if use_builtin is None else use_builtin
    if builtin:
        isolation = options.pop("isolation.level", None)
        lowered = {k.lower() for k in options}
        builtin_options = {k: v for k, v in options.items() if k.lower() not in _OWN_OPTIONS}
        if "kafka.isolation.level" not in lowered:
            builtin_options["kafka.isolation.level"] = isolation or "read_committed"
        builtin_options["includeHeaders"] = "true"
        df = spark.readStream.format("kafka").options(**builtin_options).load()
        return df.select(*KAFKA_COLUMNS)
    _register(spark)
    return spark.readStream.format(SOURCE_NAME).options(**options).load()


def kafka_end_offsets(
    bootstrap: str,
    topics: Sequence[str] | str,
    *,
    isolation_level: str = "read_committed",
    extra: Mapping[str, str] | None = None,
) -> dict[str, dict[str, int]]:
    """Current end offsets ``{topic: {"partition": offset}}`` of existing ``topics``.

    Same shape as this source's offsets (so it compares directly with a query's
    ``lastProgress["sources"][0]["endOffset"]``). Under ``read_committed`` the end of a
    partition is its last stable offset. ``extra`` holds ``kafka.*`` client settings.
    """
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": ",".join(topic_list),
        "isolation.level": isolation_level,
        **(extra or {}),
    }
    reader = KafkaStreamReader(_parse_options(opts))
    try:
        return _offsets_to_json(reader._latest())
    finally:
        reader.stop()

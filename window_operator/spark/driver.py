"""The streaming job: Kafka -> Spark micro-batches -> window tasks on executors -> Kafka.

Each micro-batch is handed to ``foreachBatch``; ``mapInArrow`` runs one operator task
per Kafka partition on the executors (the source makes one Spark partition per Kafka
partition, so no shuffle is needed), and only a small report per task comes back to
the driver. Wall-clock timers must fire even when no data arrives, but Spark runs no
micro-batch without new offsets, so a driver thread runs a timer-only "tick" job over
every task when no batch has run for a trigger interval. Batches and ticks are
serialised by a lock: a task's RocksDB is opened by one process at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stores.changelog import changelog_topic
from window_operator.config import JobConfig
from window_operator.kafka_admin import KafkaAdmin, TopicSpec
from window_operator.task import InputRecords, TaskReport, TaskRunner, TaskSettings

__all__ = ["JobRun", "StreamingJob", "ensure_topics"]

REPORT_FIELDS = (
    ("task", "int"),
    ("records", "long"),
    ("applied", "long"),
    ("replayed", "long"),
    ("rejected", "long"),
    ("results", "long"),
    ("restored_records", "long"),
    ("compensated", "long"),
    ("changelog_records", "long"),
    ("watermark", "long"),
    ("seconds", "double"),
    ("location", "string"),
)
REPORT_SCHEMA = ", ".join(f"{n} {t}" for n, t in REPORT_FIELDS)


#: What to do about a missing input topic (the job does not create it: its partition
#: count is the job's parallelism, and the records must be keyed by the key field).
_INPUT_TOPIC_HINT = (
    "create it with one partition per task, keyed by the key field "
    "(`window-operator produce --config JOB --input FILE` creates it and loads a JSONL file)"
)
_KEEP_FOREVER = {"retention.ms": "-1"}
_COMPACTED = {"cleanup.policy": "compact", "retention.ms": "-1"}


def ensure_topics(config: JobConfig, bootstrap: str, *, timeout_s: float = 30.0) -> int:
    """Create the job's changelog, output and error topics if needed.

    Returns the input topic's partition count (the number of tasks); the changelog
    gets the same count (partition = task). Raises ``BrokerUnreachableError`` within
    seconds when no broker answers, and ``TopicNotFoundError`` when the input topic
    does not exist; ``timeout_s`` bounds the topic creation.
    """
    admin = KafkaAdmin(bootstrap, request_timeout_s=timeout_s)
    partitions = admin.require_topic(config.input.topic, hint=_INPUT_TOPIC_HINT, kind="input topic")
    admin.create_topics(
        [
            TopicSpec(changelog_topic(config.job), partitions, _COMPACTED),
            TopicSpec(config.output.topic, partitions, _COMPACTED),
            TopicSpec(config.output.errors_topic, partitions, _KEEP_FOREVER),
        ]
    )
    return partitions


def _report_batch(reports: list[TaskReport]) -> Any:
    import pyarrow as pa

    cols = {name: [getattr(r, name) for r in reports] for name, _ in REPORT_FIELDS}
    types = {"int": pa.int32(), "long": pa.int64(), "double": pa.float64(), "string": pa.string()}
    return pa.RecordBatch.from_arrays(
        [pa.array(cols[n], type=types[t]) for n, t in REPORT_FIELDS],
        names=[n for n, _ in REPORT_FIELDS],
    )


def run_tasks(settings: TaskSettings, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: run the task of every Kafka partition in this Spark partition."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = list(batches)
    if not tables:
        return
    table = pa.Table.from_batches(tables)
    if table.num_rows == 0:
        return
    reports = []
    parts = pc.unique(table.column("partition")).to_pylist()
    for part in sorted(parts):
        sub = table.filter(pc.equal(table.column("partition"), part))
        sub = sub.sort_by([("offset", "ascending")])
        records = InputRecords(
            topic=str(sub.column("topic")[0].as_py()),
            partition=int(part),
            offsets=sub.column("offset").to_pylist(),
            keys=sub.column("key").to_pylist(),
            values=sub.column("value").to_pylist(),
            timestamps=_timestamps_ms(sub),
        )
        reports.append(TaskRunner(settings, int(part)).run(records))
    yield _report_batch(reports)


def _timestamps_ms(table: Any) -> list[int] | None:
    """The Kafka record timestamps of Spark's Kafka rows in epoch ms (-1: none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "timestamp" not in table.column_names:
        return None
    column = table.column("timestamp")
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ms", tz=column.type.tz), safe=False)
        column = pc.cast(column, pa.int64())
    stamps: list[int] = pc.fill_null(column, -1).to_pylist()
    return stamps


def _timestamp_ms(message: Any) -> int:
    """A confluent-kafka message's timestamp in epoch ms, -1 when it has none."""
    kind, value = message.timestamp()
    return -1 if kind == 0 else int(value)  # 0: TIMESTAMP_NOT_AVAILABLE


def run_range_tasks(settings: TaskSettings, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body over offset ranges: read each range from Kafka here, run its task.

    The records never pass through the JVM: Spark plans and checkpoints the ranges,
    the executor reads exactly ``[start_offset, until_offset)`` of its partition.
    """
    from window_operator.spark.kafka_source import read_range

    reports = []
    for rb in batches:
        for row in rb.to_pylist():
            offsets: list[int] = []
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            stamps: list[int] = []
            for msgs in read_range(
                row["topic"],
                row["partition"],
                row["start_offset"],
                row["until_offset"],
                settings.consumer_config(),
            ):
                offsets += [m.offset() for m in msgs]
                keys += [m.key() for m in msgs]
                values += [m.value() for m in msgs]
                stamps += [_timestamp_ms(m) for m in msgs]
            if not offsets:
                continue
            records = InputRecords(
                row["topic"], int(row["partition"]), offsets, keys, values, timestamps=stamps
            )
            reports.append(TaskRunner(settings, int(row["partition"])).run(records))
    if reports:
        yield _report_batch(reports)


def tick_tasks(settings: TaskSettings, index: int, _rows: Iterator[Any]) -> Iterator[Any]:
    """Timer-only run of one task (``mapPartitionsWithIndex`` body)."""
    report = TaskRunner(settings, index).run(None)
    yield tuple(getattr(report, n) for n, _ in REPORT_FIELDS)


@dataclass
class JobRun:
    """Totals of a job run, accumulated from task reports."""

    batches: int = 0
    ticks: int = 0
    totals: dict[str, int] = field(default_factory=dict)

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Accumulate task report rows."""
        for row in rows:
            for name, kind in REPORT_FIELDS:
                if kind == "long" and name != "watermark":
                    self.totals[name] = self.totals.get(name, 0) + int(row[name])


class StreamingJob:
    """The Spark Structured Streaming query of one job config."""

    def __init__(
        self,
        config: JobConfig,
        *,
        bootstrap_servers: str,
        spark: Any,
        state_dir: str | None = None,
        available_now: bool | None = None,
        starting_offsets: str = "earliest",
        on_report: Any = None,
    ) -> None:
        self.config = config
        self.bootstrap = bootstrap_servers
        self.spark = spark
        self.settings = TaskSettings(
            config=config,
            bootstrap_servers=bootstrap_servers,
            state_dir=str(state_dir or config.state.dir),
        )
        sc = config.spark
        self.available_now = sc.available_now if available_now is None else available_now
        self.trigger_ms = sc.trigger_ms or 5_000
        self.starting_offsets = starting_offsets
        self.on_report = on_report
        self.run_totals = JobRun()
        self._lock = threading.Lock()
        self._last_activity = time.monotonic()
        self._stop = threading.Event()
        self._partitions = 0
        self.ranges = True
        self.query: Any = None

    # -- micro-batches -------------------------------------------------------------------

    def _process(self, batch_df: Any, batch_id: int) -> None:
        settings = self.settings
        with self._lock:
            if self.ranges:
                tasks = batch_df.mapInArrow(lambda it: run_range_tasks(settings, it), REPORT_SCHEMA)
            else:
                columns = ("key", "value", "topic", "partition", "offset", "timestamp")
                tasks = batch_df.select(*columns).mapInArrow(
                    lambda it: run_tasks(settings, it), REPORT_SCHEMA
                )
            rows = tasks.collect()
            self._last_activity = time.monotonic()
        dicts = [r.asDict() for r in rows]
        self.run_totals.batches += 1
        self.run_totals.add(dicts)
        if self.on_report is not None:
            self.on_report(batch_id, dicts)

    def tick(self) -> list[dict[str, Any]]:
        """Run the timers of every task now (what the timer thread does when idle)."""
        settings = self.settings
        n = self._partitions
        with self._lock:
            rows = (
                self.spark.sparkContext.parallelize(range(n), n)
                .mapPartitionsWithIndex(lambda i, it: tick_tasks(settings, i, it))
                .collect()
            )
            self._last_activity = time.monotonic()
        dicts = [dict(zip([f for f, _ in REPORT_FIELDS], r, strict=True)) for r in rows]
        self.run_totals.ticks += 1
        self.run_totals.add(dicts)
        if self.on_report is not None:
            self.on_report(-1, dicts)
        return dicts

    def _timer_loop(self) -> None:
        interval = self.trigger_ms / 1000.0
        while not self._stop.wait(interval / 2):
            if time.monotonic() - self._last_activity >= interval:
                try:
                    self.tick()
                except Exception:  # noqa: BLE001 - a failed tick is retried next interval
                    if self._stop.is_set():
                        return

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Any:
        """Create topics and start the streaming query."""
        from window_operator.spark.kafka_source import builtin_kafka_available, read_kafka_stream

        self._partitions = ensure_topics(self.config, self.bootstrap)
        # Spark's own connector, when present, delivers rows; otherwise Spark only plans
        # offset ranges and the tasks read their records on the executors.
        self.ranges = not builtin_kafka_available(self.spark)
        df = read_kafka_stream(
            self.spark,
            bootstrap_servers=self.bootstrap,
            topics=[self.config.input.topic],
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.config.spark.max_offsets_per_trigger,
            ranges=self.ranges,
        )
        writer = (
            df.writeStream.foreachBatch(self._process)
            .option("checkpointLocation", str(self.config.spark.checkpoint_dir))
            .queryName(f"window-operator-{self.config.job}")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_ms} milliseconds")
        self.query = writer.start()
        if not self.available_now:
            threading.Thread(target=self._timer_loop, name="window-timers", daemon=True).start()
        return self.query

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait for the query to stop (AvailableNow stops by itself)."""
        if timeout_s is None:
            self.query.awaitTermination()
            return True
        return bool(self.query.awaitTermination(timeout_s))

    def stop(self) -> None:
        """Stop the timer thread and the query."""
        self._stop.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()

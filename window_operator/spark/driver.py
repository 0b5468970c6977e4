"""The streaming job: Kafka -> Spark micro-batches -> keyed exchange -> state tasks -> Kafka.

Each micro-batch is handed to ``foreachBatch``, which runs one Spark job of two stages
(:mod:`window_operator.spark.exchange`): the map side reads and decodes the batch's
offset ranges on the executors and routes rows by a stable hash of the operator's key;
Spark's shuffle brings each state task its rows; the state tasks run on the executors
with their RocksDB stores and changelog partitions. Only small reports come back.

The driver keeps the job clock: before batch ``b`` runs it fixes the clock ``b`` runs
with (logged per batch id in the checkpoint directory, so a replay decides the same
way), and after it folds the map side's reports into the clock batch ``b + 1`` starts
from. Spark runs no micro-batch without new offsets, so a timer thread runs a
timer-only pass over every state task when no batch ran for a trigger interval. Batches
and timer passes are serialised by a lock: a task's RocksDB is opened by one process at
a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

from window_operator.config import JobConfig, JoinJobConfig
from window_operator.errors import BatchRefusedError, TimerPassError
from window_operator.kafka_admin import METADATA_TIMEOUT_S, KafkaAdmin, KafkaAdminError
from window_operator.kernel import ClockState
from window_operator.runtime.batch import (
    HISTORY,
    BatchContext,
    advance_clock,
    note_ends,
    note_origin,
    starts_after,
)
from window_operator.runtime.exchange import MapReport, kafka_reads
from window_operator.runtime.kept_shape import (
    ShapeKeeper,
    check_changelog_shape,
    check_kept_shape,
    state_shape,
)
from window_operator.runtime.plans import plan_for
from window_operator.runtime.report import TaskReport
from window_operator.runtime.settings import TaskSettings
from window_operator.runtime.starts import first_offsets, input_partitions, offsets_json
from window_operator.spark.clock_log import CLOCK_DIR, ClockLog
from window_operator.spark.exchange import map_side, reduce_side, timer_pass
from window_operator.spark.failures import root_cause
from window_operator.spark.offset_log import planned_starts
from window_operator.spark.topics import (
    check_grown_inputs,
    input_topics,
    keeps_partitions,
    prepare_topics,
    source_topics,
)
from window_operator.spark.waiting import WaitingInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "BatchReport",
    "JobOptions",
    "JobReports",
    "JobRun",
    "SparkJob",
    "StreamingJob",
    "prepare_topics",
]

log = logging.getLogger(__name__)

AnyJobConfig = JobConfig | JoinJobConfig
_COUNTED = [f.name for f in fields(TaskReport) if f.type in ("int", int) and f.name != "task"]
#: Integer report fields that are levels (state size, positions), not counts to sum.
_LEVELS = ("watermark", "batch_id", "attempts", "store_bytes", "live_keys", "live_windows")
Observer = Callable[["BatchReport"], None]


@dataclass
class BatchReport:
    """What one micro-batch (or timer pass, ``batch_id`` -1) did."""

    batch_id: int
    tasks: list[TaskReport]
    ranges: list[MapReport]
    clock: ClockState
    seconds: float


@dataclass
class JobRun:
    """Totals of a job run, accumulated from the batch reports."""

    batches: int = 0
    ticks: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    #: the input topic of each source index (see ``kafka_reads``)
    topics: Sequence[str] | None = None

    def add(self, report: BatchReport) -> None:
        """Accumulate one batch's reports."""
        t = self.totals
        for r in report.tasks:
            for name in _COUNTED:
                if name not in _LEVELS:
                    t[name] = t.get(name, 0) + int(getattr(r, name))
        t["records"] = t.get("records", 0) + sum(
            m.records for m in kafka_reads(report.ranges, self.topics)
        )


@dataclass
class JobReports:
    """Where a job's batch reports go, in order: the run's totals, the caller's
    ``on_report``, then every observer (metrics, the log line; one that fails is logged,
    it never stops the job)."""

    on_report: Observer | None = None
    observers: list[Observer] = field(default_factory=list)
    totals: JobRun = field(default_factory=JobRun)

    def publish(self, report: BatchReport) -> None:
        """Hand ``report`` to everyone (see class doc)."""
        self.totals.add(report)
        if self.on_report is not None:
            self.on_report(report)
        for observer in self.observers:
            try:
                observer(report)
            except Exception as exc:  # noqa: BLE001 - an observer never stops the job
                log.warning("batch report observer %r failed: %s", observer, exc)


class JobOptions(TypedDict, total=False):
    """The keyword options of a job on Spark (either shape), with their defaults.

    ``state_dir`` (``state.dir``) and ``available_now`` (``spark.available_now``) default
    to the config's; ``starting_offsets`` to ``"earliest"``.
    """

    bootstrap_servers: Required[str]
    spark: Required[SparkSession]
    state_dir: str | None
    available_now: bool | None
    starting_offsets: str
    on_report: Observer | None


class SparkJob:
    """What both shapes of a job on Spark share: the config, the task settings, the
    options and where the batch reports go (:class:`StreamingJob`,
    :class:`~window_operator.spark.longrun.LongRunningJob`)."""

    def __init__(self, config: AnyJobConfig, **options: Unpack[JobOptions]) -> None:
        self.config = config
        self.bootstrap = options["bootstrap_servers"]
        self.spark = options["spark"]
        # the number of state tasks is known once the topics are prepared
        state_dir = options.get("state_dir") or config.state.dir
        self.settings = TaskSettings(config, self.bootstrap, str(state_dir))
        available_now = options.get("available_now")
        self.available_now = config.spark.available_now if available_now is None else available_now
        self.starting_offsets = options.get("starting_offsets", "earliest")
        self.reports = JobReports(
            options.get("on_report"), totals=JobRun(topics=source_topics(config))
        )

    def _prepare_tasks(self) -> int:
        """Refuse a state of another shape than the config's (see
        :mod:`~window_operator.runtime.kept_shape`), create the topics and fix the number
        of state tasks in the settings."""
        checkpoint_dir = Path(str(self.config.spark.checkpoint_dir))
        shape = state_shape(self.settings)
        check_kept_shape(checkpoint_dir, self.config.job, shape)
        tasks = prepare_topics(self.config, self.bootstrap)
        self.settings = replace(self.settings, tasks=tasks)
        check_changelog_shape(self.settings, checkpoint_dir, shape)
        keeper = ShapeKeeper(checkpoint_dir, self.config.job, shape, tasks)
        self.reports.observers.append(lambda r: keeper.committed_by(t.task for t in r.tasks))
        return tasks

    @property
    def run_totals(self) -> JobRun:
        """Totals of the run so far (a long-running job's epochs count as batches)."""
        return self.reports.totals

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` with every batch report too (after ``on_report``)."""
        self.reports.observers.append(observer)


class StreamingJob(SparkJob):
    """The Spark Structured Streaming query of one job config."""

    def __init__(self, config: AnyJobConfig, **options: Unpack[JobOptions]) -> None:
        super().__init__(config, **options)
        sc = config.spark
        self.trigger_ms = sc.trigger_ms or 5_000
        self.clocks = ClockLog(Path(str(sc.checkpoint_dir)) / CLOCK_DIR)
        self._origin = self.clocks.origin()
        self._ends = self.clocks.ends()
        # a restart goes on from the logged clock (its first timer pass reports it)
        newest = self.clocks.newest()
        self._next_batch, self._clock, final = newest or (0, ClockState(), False)
        #: the newest entry is of a batch that began and may run again: until a batch
        #: ran, timer passes keep its clock as it is (moved on, by idle partitions, it
        #: could fire windows that batch must still find open when it runs again)
        self._held = final
        #: asks the broker before batches: the input partitions (offsets jobs), the ends
        #: of the partitions read (idle partitions); a batch waits: bounded as metadata
        self._admin = KafkaAdmin(
            self.bootstrap,
            client_config=config.kafka.consumer,
            request_timeout_s=METADATA_TIMEOUT_S,
        )
        self._waiting = WaitingInput(self._admin, config.watermark.idle_timeout)
        self._lock = threading.Lock()
        self._last_activity = time.monotonic()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        #: an AvailableNow run sent its last timer pass
        self._finished = False
        #: a task reported batched LATE updates waiting (in its last batch or pass)
        self._late_pending: dict[int, bool] = {}
        self.query: StreamingQuery | None = None
        #: set by :meth:`stop_before_next_batch`; the id of the batch it refused
        self._stopping = threading.Event()
        self.refused_batch: int | None = None

    # -- the job clock -------------------------------------------------------------------

    def _advance(self, state: ClockState, now: int, batch_id: int | None = None) -> ClockState:
        """The clock ``state`` moved to wall clock ``now`` before batch ``batch_id`` (None:
        the next one) or a timer pass (no new input read; the partitions with records
        waiting are active at ``now``, and those with no event time yet hold the
        watermark back: see ``WaitingInput``)."""
        waiting = self._waiting.partitions(state, self._ends)
        starts = planned_starts(
            str(self.config.spark.checkpoint_dir),
            self._next_batch if batch_id is None else batch_id,
        )
        sources = plan_for(self.settings).sources
        unread = None if starts is None else self._waiting.unread(state, sources, starts)
        return advance_clock(self.settings, state, [], now, active=waiting, unread=unread)

    def timer_clock(self, now: int) -> ClockState:
        """The clock a timer pass at wall clock ``now`` runs with: the job's, moved to
        ``now`` (held as it is after a restart until a batch ran: see ``_held``)."""
        return self._clock if self._held else self._advance(self._clock, now)

    # -- micro-batches -------------------------------------------------------------------

    @property
    def last_batch_id(self) -> int | None:
        """The id of the last micro-batch that ran, in this run or before (``None``:
        none yet): what the metrics show from the start."""
        return self._next_batch - 1 if self._next_batch > 0 else None

    @property
    def clock(self) -> ClockState:
        """The job's clock as the last batch or pass left it (the checkpoint's at start)."""
        return self._clock

    def stop_before_next_batch(self) -> None:
        """Let the running micro-batch finish, and start no other: the next one ends the
        query with :class:`BatchRefusedError` before any task of it runs (its offsets
        are planned: it runs at the next start). Ctrl-C with a backlog waited for the
        whole backlog, since the query was never found between two batches."""
        self._stopping.set()

    def _process(self, batch_df: DataFrame, batch_id: int) -> None:
        if self._stopping.is_set():
            self.refused_batch = batch_id
            raise BatchRefusedError(f"micro-batch {batch_id} not started: the job is stopping")
        started = time.perf_counter()
        self._check_inputs()
        waiting = time.perf_counter()
        with self._lock:
            started += time.perf_counter() - waiting  # not the wait for a running timer pass
            starts = starts_after(self._ends)
            clock = self.clocks.begin(
                batch_id, _now_ms(), lambda state, now: self._advance(state, now, batch_id), starts
            )
            history = self.clocks.history(batch_id, HISTORY)
            ctx = BatchContext(self.settings, batch_id, clock, self._origin, history=history)
            n = self.settings.tasks
            self._describe(f"micro-batch {batch_id}")
            out = (
                batch_df.rdd.mapPartitions(lambda rows: map_side(ctx, rows))
                .partitionBy(n + 1, lambda task: task)
                .mapPartitionsWithIndex(lambda i, pairs: reduce_side(ctx, i, pairs))
                .collect()
            )
            ranges = [o for o in out if isinstance(o, MapReport)]
            after = ctx.clock_after(ranges)
            origin = note_origin(self._origin, ranges, batch_id)
            if origin is not None and origin != self._origin:
                self.clocks.write_origin(origin)
                self._origin = origin
            ends = note_ends(self._ends, ranges)
            if ends != self._ends:
                self.clocks.write_ends(ends)
                self._ends = ends
            self.clocks.prepare(batch_id + 1, after)
            self._clock, self._next_batch, self._held = after, batch_id + 1, False
            self._last_activity = time.monotonic()
        tasks = [o for o in out if isinstance(o, TaskReport)]
        self._late_pending.update((t.task, t.late_pending) for t in tasks)
        report = BatchReport(batch_id, tasks, ranges, after, time.perf_counter() - started)
        self.run_totals.batches += 1
        self.reports.publish(report)

    def _check_inputs(self) -> None:
        """Before a batch of a job whose state keeps one input partition per task
        (offsets windows): stop the query with one line if the inputs grew past its
        tasks, instead of failing the tasks (each tried 4 times) that get the records of
        a partition they cannot hold."""
        if not keeps_partitions(self.config):
            return
        try:
            found = self._admin.partition_counts(input_topics(self.config))
        except KafkaAdminError as exc:  # the tasks still refuse such records themselves
            log.debug("could not list the input partitions before batch: %s", exc)
            return
        widest = max(found.get(t, 0) for t in input_topics(self.config))
        check_grown_inputs(self.config, self.settings.tasks, widest)

    def tick(self, *, final: bool = False) -> BatchReport:
        """Run the timers of every state task now (what the timer thread does when idle);
        ``final``: the run ends, batched LATE updates go out."""
        with self._lock:
            report = self._timer_pass(final)
        self._publish_tick(report)
        return report

    def _tick_if_idle(self, idle_s: float) -> None:
        """The timer thread's pass, where no micro-batch ran for ``idle_s`` (also after
        waiting for the one that runs: it was not idle, and the pass would have been
        timed with the batch it waited for)."""
        with self._lock:
            if time.monotonic() - self._last_activity < idle_s:
                return
            report = self._timer_pass(final=False)
        self._publish_tick(report)

    def _timer_pass(self, final: bool) -> BatchReport:
        """One timer pass over every state task (the caller holds the lock)."""
        started = time.perf_counter()
        clock = self.timer_clock(_now_ms())
        ends, history = tuple(self._ends.values()), self.clocks.history(None, HISTORY)
        ctx = BatchContext(self.settings, -1, clock, self._origin, ends, history, final)
        n = self.settings.tasks
        self._describe("timer pass")
        try:
            tasks: list[TaskReport] = (
                self.spark.sparkContext.parallelize(range(n), n)
                .mapPartitionsWithIndex(lambda i, rows: timer_pass(ctx, i, rows))
                .collect()
            )
        except Exception as exc:  # Spark's failure: screenfuls of Java and Python stack
            raise TimerPassError(f"a timer pass failed: {root_cause(exc)}") from exc
        self._clock = clock
        self.clocks.prepare(self._next_batch, clock)
        self._last_activity = time.monotonic()
        return BatchReport(-1, tasks, [], clock, time.perf_counter() - started)

    def _publish_tick(self, report: BatchReport) -> None:
        self._late_pending.update((t.task, t.late_pending) for t in report.tasks)
        self.run_totals.ticks += 1
        self.reports.publish(report)

    def _describe(self, what: str) -> None:
        """Name the Spark job that follows in Spark's UI (jobs page, event log)."""
        self.spark.sparkContext.setJobDescription(f"window-operator {self.config.job}: {what}")

    def _timer_loop(self) -> None:
        interval = self.trigger_ms / 1000.0
        while not self._stop.wait(interval / 2):
            if time.monotonic() - self._last_activity >= interval:
                try:
                    self._tick_if_idle(interval)
                except Exception as exc:  # noqa: BLE001 - a failed tick is retried next interval
                    if self._stop.is_set():
                        return
                    # one line: Spark's failure carries screenfuls of Java and Python stack
                    spark_failure = exc.__cause__ if isinstance(exc, TimerPassError) else exc
                    reason = root_cause(spark_failure or exc)
                    log.warning("timer pass failed (retried next interval): %s", reason)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> StreamingQuery:
        """Create topics, fix the number of state tasks and start the streaming query."""
        from window_operator.spark.kafka_source import read_kafka_stream

        self._prepare_tasks()
        topics: Sequence[str] = [s.topic for s in plan_for(self.settings).sources]
        # the job's first offsets, kept since its first start in either shape (Spark
        # takes them only when its checkpoint has no offsets yet)
        partitions = input_partitions(self.settings, self._admin)
        first = first_offsets(
            self._admin,
            partitions,
            Path(str(self.config.spark.checkpoint_dir)),
            self.starting_offsets,
            origin=self._origin,
        )
        df = read_kafka_stream(
            self.spark,
            bootstrap_servers=self.bootstrap,
            topics=list(dict.fromkeys(topics)),
            starting_offsets=offsets_json(partitions, first),
            max_offsets_per_trigger=self.config.spark.max_offsets_per_trigger,
            ranges=True,
            extra=_source_options(self.settings),
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
        if self._ends:
            # a restart: states that lost the last batch read it back before anything else
            self.tick()
        query: StreamingQuery = writer.start()
        self.query = query
        if not self.available_now:
            self._timer = threading.Thread(
                target=self._timer_loop, name="window-timers", daemon=True
            )
            self._timer.start()
        return query

    @property
    def started(self) -> StreamingQuery:
        """The running query (:meth:`start` starts it)."""
        if self.query is None:
            raise RuntimeError(f"job {self.config.job!r}: the query was not started")
        return self.query

    def await_termination(self, timeout_s: int | None = None) -> bool:
        """Wait for the query to stop (AvailableNow stops by itself, then sends the LATE
        updates it batched: one last timer pass)."""
        if timeout_s is None:
            self.started.awaitTermination()
        elif not self.started.awaitTermination(timeout_s):
            return False
        if self.available_now and not self._finished and self.started.exception() is None:
            self._finished = True
            if any(self._late_pending.values()):
                self.tick(final=True)
        return True

    def stop(self) -> None:
        """Stop the timer thread and the query."""
        self._stop.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self._timer is not None:
            # a timer pass still running would be cut off by spark.stop() (worker crashes)
            self._timer.join(timeout=self.settings.broker_timeout_s)


def _source_options(settings: TaskSettings) -> dict[str, str]:
    """The source's client settings (``kafka.consumer``: SASL, SSL, ...) and retries.

    The source's offset queries retry once a second for as long as a broker may be away.
    """
    seconds = max(1, int(settings.broker_timeout_s))
    options = {f"kafka.{k}": str(v) for k, v in settings.config.kafka.consumer.items()}
    options.update({"fetchOffset.numRetries": str(seconds), "fetchOffset.retryIntervalMs": "1000"})
    return options


def _now_ms() -> int:
    return int(time.time() * 1000)

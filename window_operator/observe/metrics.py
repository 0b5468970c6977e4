"""The job's Prometheus metrics, aggregated from its batch reports, served by the driver.

:class:`JobMetrics` is a batch-report observer of
:class:`~window_operator.spark.driver.StreamingJob`: every micro-batch and timer pass
updates counters, gauges and histograms in its own registry, and :meth:`JobMetrics.serve`
exposes them in the Prometheus text format (``prometheus_client``) on ``/metrics``.
Every metric is documented in the README ("Metrics"); :data:`METRICS` lists the names.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from window_operator.config import JobConfig, JoinJobConfig
from window_operator.errors import WindowOperatorError
from window_operator.observe.lag import InputLag
from window_operator.policies import NO_WATERMARK
from window_operator.results import ErrorCode
from window_operator.runtime.exchange import kafka_reads
from window_operator.spark.topics import source_topics

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from window_operator.kernel.clock import ClockState
    from window_operator.spark.driver import BatchReport
    from window_operator.spark.longrun import WorkerRestart

__all__ = ["PREFIX", "JobMetrics", "MetricsPortError", "MetricsSummary"]

log = logging.getLogger(__name__)

PREFIX = "window_operator"
#: Buckets of the duration histograms, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
PHASES = ("read", "restore", "operator", "outputs", "changelog", "commit")
_TASK_COUNTS = {
    "applied": "records_applied",
    "replayed": "records_replayed",
    "late": "records_late",
    "restored_records": "restore_records",
    "changelog_records": "changelog_records",
    "commits": "commits",
    "result_errors": "results_not_written",
}


@dataclass
class MetricsSummary:
    """Totals of a run, read back from the metrics (the demo's closing summary)."""

    read: int = 0
    applied: int = 0
    late: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    lag: int = 0
    #: whether ``lag`` was measured at the last report (False: the broker did not
    #: answer, and the gauges keep an older reading)
    lag_measured: bool = True


class MetricsPortError(WindowOperatorError):
    """The metrics port cannot be served (taken, or not allowed)."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(
            f"cannot serve metrics on {host}:{port}: {cause.strerror or cause} "
            "(choose another --metrics-port / metrics.port, or 0 for any free one)"
        )


class JobMetrics:
    """Prometheus metrics of one job (see module doc); call it with each batch report."""

    def __init__(
        self,
        config: JobConfig | JoinJobConfig,
        *,
        lag: InputLag | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.lag = lag
        self.registry = registry or CollectorRegistry()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: the input topic of each source index (a self-join's twice)
        self.topics = source_topics(config)
        #: the largest watermark (key None) and max event time per (topic, partition) set
        self._seen: dict[tuple[str, str] | None, int] = {}
        #: whether the lag gauges were measured at the last report (see summary)
        self._lag_measured = True
        self._define()

    # -- definitions ---------------------------------------------------------------------

    def _counter(self, name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
        return Counter(f"{PREFIX}_{name}", doc, list(labels), registry=self.registry)

    def _gauge(self, name: str, doc: str, labels: Iterable[str] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, list(labels), registry=self.registry)

    def _define(self) -> None:
        c, g, tp = self._counter, self._gauge, ("topic", "partition")
        self.batches = c("batches", "Micro-batches and timer passes run", ["type"])
        self.read = c("records_read", "Input records read from Kafka", tp)
        self.counts = {
            name: c(metric, f"{metric.replace('_', ' ').capitalize()} (per state task)", ["task"])
            for name, metric in _TASK_COUNTS.items()
        }
        self.rejected = c("records_rejected", "Records sent to the error topic", ["reason"])
        self.out_of_retention = c(
            "records_out_of_retention", "Events too late for retention (rejected)", ["task"]
        )
        self.results = c("results", "Results emitted to the output topic", ["kind"])
        self.restore_seconds = c("restore_seconds", "Time spent restoring stores", ["task"])
        self.retries = c("task_retries", "Batch attempts repeated (Kafka away)", ["task"])
        self.restarts = c("worker_restarts", "Starts of the long-running workers again", ["cause"])
        self.watermark = g("watermark_ms", "The job's watermark (event time, epoch ms)")
        self.max_ts = g("partition_max_event_time_ms", "Largest event time seen", tp)
        self.part_wm = g("partition_watermark_ms", "Max event time minus allowed lateness", tp)
        self.end = g("input_end_offset", "End (last stable) offset of the partition", tp)
        self.position = g("input_position_offset", "Next offset the job reads", tp)
        self.lag_records = g("input_lag_records", "End offset minus the job's position", tp)
        self.lag_time = g(
            "input_lag_timestamp_seconds",
            "When the input offsets were last measured (they keep that value until the next)",
        )
        self.store_bytes = g("state_store_bytes", "Size of the task's RocksDB on disk", ["task"])
        self.keys = g("state_keys", "Keys with an open window or session", ["task"])
        self.windows = g("state_windows", "Open windows or sessions", ["task"])
        self.messages = g("state_messages", "Messages a join holds per input", ["task", "input"])
        self.last_batch = g("last_batch_id", "Id of the last micro-batch")
        self.last_time = g("last_batch_timestamp_seconds", "When the last batch or pass ended")
        # none yet: NaN, not 0 (a watermark of 1970 and "batch 0 ran" would alert)
        for unset in (self.watermark, self.last_batch, self.last_time, self.lag_time):
            unset.set(math.nan)
        self.batch_seconds = Histogram(
            f"{PREFIX}_batch_seconds", "Duration of a micro-batch or timer pass on the driver",
            ["type"],
            buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.phase_seconds = Histogram(
            f"{PREFIX}_phase_seconds", "Duration of a batch phase in one task (read: one range)",
            ["phase"], buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.spark_seconds = Histogram(
            f"{PREFIX}_spark_duration_seconds", "Spark's own trigger durations (durationMs)",
            ["operation"], buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip

    # -- observing -----------------------------------------------------------------------

    def __call__(self, report: BatchReport) -> None:
        """Fold one batch report in (the driver calls this after every batch and pass)."""
        with self._lock:
            kind = "timer_pass" if report.batch_id < 0 else "micro_batch"
            self.batches.labels(kind).inc()
            self.batch_seconds.labels(kind).observe(report.seconds)
            if report.batch_id >= 0:
                self.last_batch.set(report.batch_id)
            self.last_time.set(time.time())
            # series appear in the exposition in the order they were first made: each
            # report's in sorted order
            self._ranges(report)
            for task in sorted(report.tasks, key=lambda t: t.task):
                self._task(task)
            self._clock(report.clock)
            self._lag(report)  # last: it asks the broker

    def _ranges(self, report: BatchReport) -> None:
        for m in sorted(
            kafka_reads(report.ranges, self.topics),
            key=lambda m: (m.range.topic, m.range.partition),
        ):
            labels = (m.range.topic, str(m.range.partition))
            self.read.labels(*labels).inc(m.records)
            self.phase_seconds.labels("read").observe(m.seconds_read + m.seconds)

    def _task(self, t: Any) -> None:
        task = str(t.task)
        for name, counter in self.counts.items():
            counter.labels(task).inc(int(getattr(t, name)))
        for code, n in t.rejected_by_code.items():
            self.rejected.labels(code).inc(n)
        self.out_of_retention.labels(task).inc(
            t.rejected_by_code.get(ErrorCode.OUT_OF_RETENTION.value, 0)
        )
        for kind, n in t.results_by_kind.items():
            self.results.labels(kind).inc(n)
        self.restore_seconds.labels(task).inc(t.seconds_restore)
        self.retries.labels(task).inc(max(0, t.attempts - 1))
        phases = {"restore": t.seconds_restore, "operator": t.seconds_operator}
        if t.commits:  # a pass that changed nothing sent, logged and committed nothing
            phases |= {
                "outputs": t.seconds_outputs,
                "changelog": t.seconds_changelog,
                "commit": t.seconds_local_commit,
            }
        for phase, seconds in phases.items():
            self.phase_seconds.labels(phase).observe(seconds)
        self.store_bytes.labels(task).set(t.store_bytes)
        if t.live_keys >= 0:
            self.keys.labels(task).set(t.live_keys)
            self.windows.labels(task).set(t.live_windows)
        for name, n in t.held_messages.items():
            self.messages.labels(task, name).set(n)

    def resume(
        self, last_batch_id: int | None, clock: ClockState, last_ended_ms: int | None = None
    ) -> None:
        """Show where a restarted job stands before its first batch: the last batch id,
        when the last batch or pass ended (``last_ended_ms``) and the clock its
        checkpoint holds (before, NaN until a batch ran: all of an idle job's run)."""
        with self._lock:
            if last_batch_id is not None:
                self.last_batch.set(last_batch_id)
            if last_ended_ms is not None:
                self.last_time.set(last_ended_ms / 1000.0)
            self._clock(clock)

    def _clock(self, clock: ClockState) -> None:
        # Event-time figures only move forward, whatever a report carries (the drivers
        # publish clocks that do not go back; an observer does not depend on it).
        seen = self._seen
        if clock.watermark > seen.get(None, NO_WATERMARK):
            seen[None] = clock.watermark
            self.watermark.set(clock.watermark)
        lateness = self.config.watermark.allowed_lateness
        for pos, ts in sorted(clock.max_ts.items()):
            if pos.source >= len(self.topics) or ts <= NO_WATERMARK:  # no event time yet
                continue
            labels = (self.topics[pos.source], str(pos.partition))
            if ts <= seen.get(labels, -(2**63)):
                continue
            seen[labels] = ts
            self.max_ts.labels(*labels).set(ts)
            self.part_wm.labels(*labels).set(ts - lateness)

    def _lag(self, report: BatchReport) -> None:
        if self.lag is None:
            return
        ranges = (m.range for m in report.ranges)
        self.lag.advance(((r.source, r.topic, r.partition), r.end) for r in ranges)
        readings = self.lag.read()
        self._lag_measured = readings is not None
        if readings is not None:  # else the broker did not answer: the gauges stand still
            self.lag_time.set(time.time())
        for r in sorted(readings or [], key=lambda r: (r.topic, r.partition)):
            labels = (r.topic, str(r.partition))
            self.read.labels(*labels)  # a series from the start: 0 until a batch reads it
            self.end.labels(*labels).set(r.end)
            self.lag_records.labels(*labels).set(r.lag)
            if r.position is not None:
                self.position.labels(*labels).set(r.position)

    def worker_restart(self, restart: WorkerRestart) -> None:
        """The long-running workers started again (``LongRunningJob`` calls this)."""
        with self._lock:
            self.restarts.labels(restart.cause).inc()

    def observe_spark_progress(self, durations_ms: dict[str, int]) -> None:
        """Spark's ``durationMs`` of one trigger (from the query listener)."""
        with self._lock:
            for operation, ms in durations_ms.items():
                self.spark_seconds.labels(operation).observe(ms / 1000.0)

    # -- reading back and serving --------------------------------------------------------

    def summary(self) -> MetricsSummary:
        """Totals read back from the registry (what a scrape would show)."""
        out = MetricsSummary()
        by_label: dict[str, dict[str, float]] = defaultdict(dict)
        for family in self.registry.collect():
            for s in family.samples:
                if s.name.endswith("_total") or s.name == f"{PREFIX}_input_lag_records":
                    key = next(iter(s.labels.values()), "") if s.labels else ""
                    prev = by_label[s.name].get(key, 0.0)
                    by_label[s.name][key] = prev + s.value
        total = {name: int(sum(v.values())) for name, v in by_label.items()}
        out.read = total.get(f"{PREFIX}_records_read_total", 0)
        out.applied = total.get(f"{PREFIX}_records_applied_total", 0)
        out.late = total.get(f"{PREFIX}_records_late_total", 0)
        out.lag = total.get(f"{PREFIX}_input_lag_records", 0)
        out.lag_measured = self._lag_measured
        out.batches = int(by_label[f"{PREFIX}_batches_total"].get("micro_batch", 0))
        out.rejected = {k: int(v) for k, v in by_label[f"{PREFIX}_records_rejected_total"].items()}
        out.results = {k: int(v) for k, v in by_label[f"{PREFIX}_results_total"].items()}
        return out

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: any free port); returns the port."""
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsPortError(host, port, exc) from None
        bound = int(self._server.server_port)
        log.info("metrics: serving http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

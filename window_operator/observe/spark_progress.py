"""Spark's own progress of the job's query, folded into the job's metrics.

The operator's figures cannot be put into ``query.lastProgress`` honestly: the job's sink
is ``foreachBatch``, which reports no custom metrics; the Python data source API has no
custom-metric hook; and observed metrics (``DataFrame.observe``) are computed over the
rows of the micro-batch's DataFrame, which for this job are offset ranges, not the
operator's outcome. What Spark does show is kept: the source's ``startOffset``,
``endOffset`` and ``latestOffset`` (the lag, in ``lastProgress["sources"]``), and each
Spark job is named after its micro-batch (``setJobDescription``) in Spark's UI.
:class:`ProgressListener` goes the other way: it takes Spark's ``durationMs`` of every
trigger into :class:`~window_operator.observe.metrics.JobMetrics`.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from window_operator.errors import BatchRefusedError
from window_operator.observe.metrics import JobMetrics

__all__ = ["ProgressListener", "mute_cancel_warnings", "mute_trigger_lag"]

log = logging.getLogger(__name__)


class ProgressListener(StreamingQueryListener):
    """Feeds the ``durationMs`` of the named query's progress events to ``metrics``."""

    def __init__(self, metrics: JobMetrics, query_name: str) -> None:
        super().__init__()
        self.metrics = metrics
        self.query_name = query_name

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Nothing to record."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Record the trigger's durations."""
        progress = event.progress
        if progress.name != self.query_name:
            return
        durations = {str(k): int(v) for k, v in dict(progress.durationMs).items()}
        self.metrics.observe_spark_progress(durations)
        log.debug("spark progress of batch %s: %s", progress.batchId, durations)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Nothing to record (the job's timer passes run while the query is idle)."""

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Nothing to record."""


class _RefusedBatchFilter(logging.Filter):
    """Drops py4j's log of the :class:`BatchRefusedError` it hands to Spark."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but that one."""
        return not (record.exc_info and isinstance(record.exc_info[1], BatchRefusedError))


def mute_refused_batch(spark: Any) -> None:
    """Silence the logs of a query ended by the micro-batch a stopping job did not start
    (``StreamingJob.stop_before_next_batch``): py4j's traceback of it and Spark's error
    log, stack traces of a stop that went as asked. A query that fails otherwise still
    ends in the job's one line."""
    py4j = logging.getLogger("py4j.clientserver")
    if not any(isinstance(f, _RefusedBatchFilter) for f in py4j.filters):
        py4j.addFilter(_RefusedBatchFilter())
    _jvm_log_level(spark, "org.apache.spark.sql.execution.streaming", "OFF")


def mute_cancel_warnings(spark: Any) -> None:
    """Silence the ``Failed to cancel job group`` warnings of a query being stopped.

    ``StreamingQuery.stop()`` cancels the job group of the query's run whether or not a
    job of it is active; between micro-batches none is, and Spark's DAGScheduler then
    warns ``Failed to cancel job group ... Cannot find active jobs for it``. That is
    harmless at shutdown, so the DAGScheduler's warnings are muted just before stopping.
    """
    _jvm_log_level(spark, "org.apache.spark.scheduler.DAGScheduler", "ERROR")


def mute_trigger_lag(spark: Any) -> None:
    """Silence Spark's ``Current batch is falling behind`` warnings (a micro-batch that
    took longer than the trigger interval): in the demo, whose short trigger the first
    batches outlast while Spark warms up, they read as trouble to a new user."""
    for package in (
        "org.apache.spark.sql.execution.streaming.runtime",
        "org.apache.spark.sql.execution.streaming",
    ):
        _jvm_log_level(spark, f"{package}.ProcessingTimeExecutor", "ERROR")


def _jvm_log_level(spark: Any, logger: str, level: str) -> None:
    """Set the log4j ``level`` of the JVM's ``logger`` (best effort)."""
    try:
        log4j = spark.sparkContext._jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(logger, getattr(log4j.Level, level))
    except Exception as exc:  # noqa: BLE001 - py4j errors (Spark Connect has no JVM here)
        log.debug("the log level of %s not set: %s", logger, exc)

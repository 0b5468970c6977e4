"""Everything the command line attaches to a streaming job to observe it.

:func:`attach` gives a :class:`~window_operator.spark.driver.StreamingJob` its metrics
(served when a port is configured), the per-batch log line, the optional ``--report``
file and Spark's progress listener; :meth:`Observers.close` takes them down again.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import IO, TYPE_CHECKING, Any

import orjson

from window_operator.errors import TimerPassError, WindowOperatorError, exception_text
from window_operator.observe.checkpoint import read_checkpoint
from window_operator.observe.heartbeat import Heartbeat
from window_operator.observe.lag import InputLag
from window_operator.observe.logs import BatchLog
from window_operator.observe.metrics import JobMetrics
from window_operator.observe.redact import RedactingFilter, secret_values
from window_operator.runtime.plans import plan_for
from window_operator.spark.failures import root_cause

if TYPE_CHECKING:
    from window_operator.config import JobConfig, JoinJobConfig
    from window_operator.spark.driver import BatchReport, StreamingJob
    from window_operator.spark.longrun import LongRunningJob, WorkerRestart

    AnyJob = StreamingJob | LongRunningJob

__all__ = [
    "Observers",
    "QueryFailedError",
    "ReportFile",
    "attach",
    "catch_interrupts",
    "on_interrupt",
    "release_interrupts",
    "run_observed",
    "stop_between_batches",
]

log = logging.getLogger(__name__)


class ReportFile:
    """``--report FILE``: one JSON line per micro-batch or timer pass with every report."""

    def __init__(self, path: str) -> None:
        self.file: IO[bytes] = open(path, "ab")  # noqa: SIM115 - closed by close()

    def __call__(self, report: BatchReport) -> None:
        """Append the report."""
        doc = {
            "batch": report.batch_id,
            "watermark": report.clock.watermark,
            "seconds": report.seconds,
            "tasks": [t.as_dict() for t in report.tasks],
            "ranges": [
                {
                    "input": m.range.source,
                    "topic": m.range.topic,
                    "partition": m.range.partition,
                    "start": m.range.start,
                    "end": m.range.end,
                    "records": m.records,
                    "rejected": m.rejected,
                }
                for m in report.ranges
            ],
        }
        self.file.write(orjson.dumps(doc) + b"\n")
        self.file.flush()

    def close(self) -> None:
        """Close the file."""
        self.file.close()


@dataclass
class Observers:
    """What :func:`attach` set up."""

    metrics: JobMetrics
    port: int | None
    report: ReportFile | None
    listener: Any
    spark: Any

    def close(self) -> None:
        """Stop serving metrics, close the report, remove the listener."""
        self.metrics.close()
        if self.report is not None:
            self.report.close()
        if self.listener is not None:
            try:
                self.spark.streams.removeListener(self.listener)
            except Exception as exc:  # noqa: BLE001 - py4j errors once Spark is stopping
                log.debug("progress listener not removed: %s", exc)


def attach(
    job: AnyJob,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
    report_path: str | None = None,
    listen: bool = True,
) -> Observers:
    """Observe ``job`` (before its start): metrics, batch log, report, and for a
    streaming query Spark's progress events (``listen``)."""
    from window_operator.observe.spark_progress import ProgressListener
    from window_operator.spark.driver import StreamingJob
    from window_operator.spark.longrun import LongRunningJob

    config = job.config
    topics = [s.topic for s in plan_for(job.settings).sources]
    lag = InputLag(
        job.bootstrap,
        topics,
        checkpoint_dir=str(config.spark.checkpoint_dir),
        shape=config.spark.mode,  # after a switch of shape: where this one goes on from
        client_config=config.kafka.consumer,
    )
    metrics = JobMetrics(config, lag=lag)
    checkpoint = read_checkpoint(str(config.spark.checkpoint_dir), config.spark.mode)
    metrics.resume(job.last_batch_id, job.clock, checkpoint.last_activity_ms)
    job.add_observer(metrics)
    job.add_observer(BatchLog(metrics))
    if isinstance(job, LongRunningJob):
        job.add_restart_observer(metrics.worker_restart)
    report = ReportFile(report_path) if report_path else None
    if report is not None:
        job.add_observer(report)
    port = metrics.serve(metrics_port, metrics_host) if metrics_port is not None else None
    listener = None
    if listen and isinstance(job, StreamingJob):
        listener = ProgressListener(metrics, f"window-operator-{config.job}")
        job.spark.streams.addListener(listener)
    return Observers(metrics, port, report, listener, job.spark)


class QueryFailedError(WindowOperatorError):
    """The job stopped with an error (the message names the task's error)."""


def run_observed(
    job: AnyJob,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
    report_path: str | None = None,
    interrupted: threading.Event | None = None,
) -> None:
    """Start ``job`` observed, wait until it ends or Ctrl-C, then stop it and Spark.

    A failed job raises :class:`QueryFailedError` with the Python error of the task
    that failed, instead of the screenfuls of Java and Python stack Spark attaches.
    ``interrupted``: set by the Ctrl-C / SIGTERM handlers the caller installed (with
    :func:`catch_interrupts`) before Spark started; without it they are installed here.
    """
    from pyspark.errors import StreamingQueryException

    from window_operator.observe.spark_progress import mute_cancel_warnings
    from window_operator.spark.driver import StreamingJob
    from window_operator.spark.longrun import WorkersFailedError
    from window_operator.spark.topics import TaskCountError

    observers = attach(
        job, metrics_port=metrics_port, metrics_host=metrics_host, report_path=report_path
    )
    heartbeat = _heartbeat(job)
    # PySpark's own Ctrl-C handler cancels every Spark job from inside the signal handler
    # (a screenful of py4j errors, and the running batch fails); this one lets the
    # running batch finish, then stops the query. SIGTERM (systemd, Kubernetes, docker
    # stop) is a Ctrl-C too: before, it killed the job at once, in the middle of a batch
    previous: dict[int, Any] = {}
    if interrupted is None:
        interrupted = threading.Event()
        previous = catch_interrupts(interrupted)
    failure: str | None = None  # why the job failed, for `status`
    try:
        job.start()
        while not job.await_termination(1):
            if interrupted.is_set():
                if isinstance(job, StreamingJob):
                    stop_between_batches(job)
                break
    except StreamingQueryException as exc:
        failure = f"the streaming query stopped: {root_cause(exc)}"
        raise QueryFailedError(failure) from None
    except (WorkersFailedError, TaskCountError, TimerPassError) as exc:
        # TaskCountError: the inputs outgrew the job
        failure = str(exc)
        raise QueryFailedError(failure) from None
    except Exception as exc:
        failure = exception_text(exc)
        raise
    finally:
        release_interrupts(previous)
        mute_cancel_warnings(job.spark)
        job.stop()
        heartbeat.stop(None if failure is None else _scrubbed(failure, job.config))
        observers.close()
        job.spark.stop()


def _heartbeat(job: AnyJob) -> Heartbeat:
    """The running job's heartbeat (for ``status``), with its workers' failures."""
    from window_operator.spark.longrun import LongRunningJob

    heartbeat = Heartbeat(job.config.spark.checkpoint_dir, available_now=job.available_now)
    heartbeat.start()
    if isinstance(job, LongRunningJob):
        job.add_restart_observer(partial(_beat_failure, heartbeat, job.config))
    return heartbeat


def _beat_failure(
    heartbeat: Heartbeat, config: JobConfig | JoinJobConfig, r: WorkerRestart
) -> None:
    """A failure of the long-running workers, into the heartbeat (for ``status``)."""
    if r.cause == "failure":
        heartbeat.worker_failed(r.at_ms, _scrubbed(r.reason, config))


def _scrubbed(text: str, config: JobConfig | JoinJobConfig) -> str:
    """``text`` without the secrets of the job's Kafka settings (as the log has them):
    the heartbeat file is read by ``status``, anyone's."""
    kafka = config.kafka
    return RedactingFilter(secret_values(kafka.producer, kafka.consumer)).scrub(text)


def catch_interrupts(interrupted: threading.Event) -> dict[int, Any]:
    """Ctrl-C and SIGTERM set ``interrupted`` (:func:`on_interrupt`); the handlers they
    had, for :func:`release_interrupts` (none is installed off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {
        sig: signal.signal(sig, lambda *_: on_interrupt(interrupted))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }


def release_interrupts(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`catch_interrupts` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def on_interrupt(interrupted: threading.Event) -> None:
    """Ctrl-C or SIGTERM: the first lets the running batch or start-up pass finish; a
    second stops the process at once, as a crash does, which the commit protocol
    recovers from (a start-up pass can wait minutes for a broker, and the first signal
    is looked at only once it ended). A signal handler: it writes to stderr directly
    (no logging from inside one), and a KeyboardInterrupt raised in the middle of a
    py4j call would print its tracebacks."""
    if interrupted.is_set():
        os.write(2, b"window-operator: interrupted again: stopping now\n")
        os._exit(130)
    interrupted.set()
    os.write(
        2,
        b"window-operator: stopping after the running micro-batch, epoch or start-up pass "
        b"(Ctrl-C or SIGTERM again to stop at once)\n",
    )


def stop_between_batches(job: StreamingJob) -> None:
    """Let the running micro-batch finish and start no other, then return (bounded):
    once the query ran the last batch it will, a stop cancels nothing. A query that
    failed otherwise raises :class:`QueryFailedError`."""
    from window_operator.observe.spark_progress import mute_refused_batch

    mute_refused_batch(job.spark)  # the batch refused ends the query, as an error
    job.stop_before_next_batch()
    deadline = time.monotonic() + job.settings.broker_timeout_s
    query = job.started
    while time.monotonic() < deadline:
        if not query.isActive:
            failed = query.exception()
            if failed is None or job.refused_batch is not None:
                return  # ended, or by the batch after the last, which did not start
            raise QueryFailedError(f"the streaming query stopped: {root_cause(failed)}")
        if not query.status.get("isTriggerActive"):
            return  # between two batches
        time.sleep(0.1)

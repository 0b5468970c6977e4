"""The long-running shape of a job on Spark: one barrier stage of workers that stay up.

``spark.mode: long_running`` runs a job as one Spark job whose tasks never end on their
own: a *barrier* stage of ``W`` tasks (Spark starts them all together or none, and when
one fails it ends the others and runs the stage again), each a
:class:`~window_operator.runtime.longrun.worker.Worker` that reads its share of the input
partitions, exchanges rows with the other workers directly and keeps its state tasks'
stores, operators and producers open. There are no micro-batches to plan, schedule and
start: a worker commits its tasks every epoch (``spark.trigger``), one Kafka
transaction per task. What a micro-batch pays every trigger (two stages of Python tasks,
a store opened and caught up, a producer initialised, offsets planned and logged) a
long-running job pays once.

The driver (:class:`LongRunningJob`) keeps a
:class:`~window_operator.runtime.longrun.control.Coordinator` the workers report their
epochs to (metrics, the log line, ``--report``, ``status``) and that tells them to stop.
Progress lives in the state, not in a Spark checkpoint: every task's committed input
positions say where its worker starts again, so a stage that failed is simply started
again, up to :data:`MAX_RESTARTS` times in a row without progress: a start is progress
once every worker reported an epoch (a worker that fails the same way at every start
never does, however many epochs the others report).

The assignment of input partitions to workers is fixed for a start of the workers. Every
``spark.partition_discovery`` the driver counts the input topics' partitions; when a
topic has grown, it asks the workers to stop (they commit what they read, as on
``Ctrl-C``) and starts them again with the new partitions dealt in, read from their
earliest offset.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import count
from pathlib import Path
from typing import Unpack

from window_operator.config import JobConfig, JoinJobConfig
from window_operator.errors import JobSetupError, WindowOperatorError
from window_operator.kafka_admin import KafkaAdmin, KafkaAdminError
from window_operator.kernel.clock import ClockState
from window_operator.observe.logs import worker_logging
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.longrun.control import Coordinator
from window_operator.runtime.longrun.prepare import worker_spec
from window_operator.runtime.longrun.progress import Progress, read_progress, record_progress
from window_operator.runtime.longrun.wire import EpochReport, WorkerSummary
from window_operator.runtime.longrun.worker import Worker, WorkerSpec
from window_operator.runtime.plans import plan_for
from window_operator.spark.clock_log import CLOCK_DIR, ClockLog
from window_operator.spark.driver import BatchReport, JobOptions, SparkJob, StreamingJob
from window_operator.spark.failures import root_cause
from window_operator.spark.topics import TaskCountError, check_grown_inputs

__all__ = [
    "MAX_RESTARTS",
    "LongRunningJob",
    "Restarts",
    "WorkerRestart",
    "WorkerSlotsError",
    "WorkersFailedError",
    "job_for",
    "local_slots",
]

log = logging.getLogger(__name__)

AnyJobConfig = JobConfig | JoinJobConfig

#: Failed starts of the workers in a row without progress (see Restarts) before the job
#: fails.
MAX_RESTARTS = 3


class WorkersFailedError(WindowOperatorError):
    """The workers failed and could not be started again (the message says why)."""


@dataclass
class Restarts:
    """When the workers start again after a failure: 2 s after a start that made
    progress; after one that did not, a wait that doubles (2 s up to 10 s), and the job
    ends at the failure after :data:`MAX_RESTARTS` such starts in a row."""

    limit: int = MAX_RESTARTS
    #: failures in a row of starts that made no progress
    failures: int = 0

    def failed(self, progressed: bool) -> float | None:
        """One more failure (of a start that ``progressed`` or not): the seconds to wait
        before the next start, or ``None``: give up."""
        self.failures = 0 if progressed else self.failures + 1
        if self.failures > self.limit:
            return None
        return min(2.0 ** max(self.failures, 1), 10.0)


@dataclass(frozen=True, slots=True)
class WorkerRestart:
    """The workers started again: after a ``failure`` (``reason``: its root cause), or
    because ``inputs_grew`` (partitions added to an input)."""

    cause: str
    reason: str
    at_ms: int


class WorkerSlotsError(JobSetupError):
    """``spark.workers`` asks for more workers than a local Spark has task slots."""


def _last_progress(checkpoint_dir: Path) -> Progress:
    """The progress file of the last run (empty: none, or one that does not read)."""
    try:
        return read_progress(checkpoint_dir) or Progress()
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError: ValueError
        log.warning("the progress file in %s does not read (%s): starting from zero",
                    checkpoint_dir, exc)  # fmt: skip
        return Progress()


def _last_clock(checkpoint_dir: Path, progress: Progress) -> ClockState:
    """The clock the job goes on from: the furthest of the last long-running run's and
    the last micro-batch's (a job switched between the shapes: its watermark must not
    go back)."""
    wm = NO_WATERMARK if progress.watermark is None else progress.watermark
    clock = ClockState(dict(progress.max_ts), watermark=wm)
    newest = ClockLog(checkpoint_dir / CLOCK_DIR).newest()
    if newest is None:
        return clock
    micro = newest[1]
    return clock.merged(ClockState(dict(micro.max_ts), watermark=micro.watermark))


def local_slots(master: str) -> int | None:
    """The task slots of a ``local`` master (``None``: not local, the cluster decides)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    return os.cpu_count() or 1 if threads == "*" else int(threads)


def run_worker(spec: WorkerSpec, _rows: Iterator[object]) -> Iterator[WorkerSummary]:
    """A barrier task: one worker, until it is told to stop."""
    from pyspark import BarrierTaskContext

    worker_logging()
    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    host = ctx.getTaskInfos()[index].address.rpartition(":")[0] or "127.0.0.1"
    yield Worker(spec, index, host=host).run()


class LongRunningJob(SparkJob):
    """A job's workers on Spark and the driver's side of them (see module doc).

    The same surface as :class:`~window_operator.spark.driver.StreamingJob`: ``start``,
    ``await_termination``, ``stop``, observers of :class:`BatchReport` (one per epoch of
    each worker) and :attr:`run_totals`.
    """

    def __init__(
        self,
        config: AnyJobConfig,
        *,
        workers: int | None = None,
        **options: Unpack[JobOptions],
    ) -> None:
        super().__init__(config, **options)
        sc = config.spark
        self.workers = workers or sc.workers
        self.checkpoint_dir = Path(str(sc.checkpoint_dir))
        self.summaries: list[WorkerSummary] = []
        self.error: BaseException | None = None
        self._coordinator: Coordinator | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        #: held while the workers are told to stop or to run (stop, regrow, resume)
        self._control = threading.Lock()
        #: set when input topics grew: the running workers are stopping to start again
        self._regrow = threading.Event()
        self._known: dict[str, int] = {}
        self._worker_count = 0
        self._restart_observers: list[Callable[[WorkerRestart], None]] = []
        # epochs are numbered on, and the clock goes on, from the last run's progress
        progress = _last_progress(self.checkpoint_dir)
        self._epochs = progress.epochs
        #: the workers that reported an epoch since the workers last started
        self._reported: set[int] = set()
        #: the job's clock: every worker's reports joined (ClockState.merged)
        self._clock = _last_clock(self.checkpoint_dir, progress)
        self._group = f"window-operator-{config.job}"

    @property
    def last_batch_id(self) -> int | None:
        """The number of the last epoch reported, in this run or before (``None``: none
        yet): what the metrics show from the start."""
        return self._epochs - 1 if self._epochs > 0 else None

    @property
    def clock(self) -> ClockState:
        """The job's clock: the workers' reports joined (the last run's at start)."""
        return self._clock

    def add_restart_observer(self, observer: Callable[[WorkerRestart], None]) -> None:
        """Call ``observer`` each time the workers start again (metrics, heartbeat)."""
        self._restart_observers.append(observer)

    def _restarted(self, cause: str, reason: str) -> None:
        restart = WorkerRestart(cause, reason, int(time.time() * 1000))
        for observer in self._restart_observers:
            try:
                observer(restart)
            except Exception as exc:  # noqa: BLE001 - an observer never stops the job
                log.warning("restart observer %r failed: %s", observer, exc)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Create topics, fix the number of state tasks and start the workers."""
        tasks = self._prepare_tasks()
        sc = self.spark.sparkContext
        slots = local_slots(sc.master or "")
        if self.workers and slots is not None and self.workers > slots:
            # a barrier stage waits for its slots: Spark would retry it for 10 minutes
            master = re.sub(r",\s*\d+\]$", "]", sc.master or "")  # without the task retries
            raise WorkerSlotsError(
                f"spark.workers is {self.workers}, but Spark {master} has {slots} task "
                f"slots: each long-running worker holds one (set spark.workers to at most "
                f"{slots}, or leave it out)"
            )
        self._worker_count = self.workers or max(1, min(sc.defaultParallelism, tasks))
        spec = self._worker_spec()
        host = sc.getConf().get("spark.driver.host") or "127.0.0.1"
        n = spec.assignment.workers
        self._coordinator = Coordinator(spec.token, n, self._on_epoch, host=host)
        spec = replace(spec, control=self._coordinator.start())
        self._thread = threading.Thread(
            target=self._supervise, args=(spec,), name="window-workers", daemon=True
        )
        self._thread.start()
        every = self.config.spark.partition_discovery
        if every is not None and not self.available_now:
            threading.Thread(
                target=self._discover, args=(every / 1000,), name="window-discovery", daemon=True
            ).start()

    def _worker_spec(self) -> WorkerSpec:
        """The workers' spec over the input partitions there are now."""
        spec = worker_spec(
            self.settings,
            self._worker_count,
            checkpoint_dir=self.checkpoint_dir,
            starting_offsets=self.starting_offsets,
            available_now=self.available_now,
            # the first offsets of a job that ran as micro-batches before it kept them
            origin=ClockLog(self.checkpoint_dir / CLOCK_DIR).origin(),
        )
        self._known = spec.assignment.partition_counts()
        # the workers look for new partitions before every epoch where the driver looks
        watch = self.config.spark.partition_discovery is not None and not self.available_now
        return replace(spec, watch_inputs=watch)

    def _supervise(self, spec: WorkerSpec) -> None:
        """Run the workers; start them again after a failure (see module doc)."""
        restarts = Restarts()
        try:
            for attempt in count():
                with self._lock:
                    self._reported = set()
                try:
                    if self._regrow.is_set():
                        spec = self._regrown(spec)
                        if self._stopping.is_set():
                            return
                    self.summaries = self._run_stage(replace(spec, attempt=str(attempt)))
                    if any(s.inputs_grew for s in self.summaries):
                        self._workers_saw_new_partitions()
                    if self._stopping.is_set() or not self._regrow.is_set():
                        return
                except Exception as exc:  # noqa: BLE001 - decided below
                    if self._stopping.is_set():
                        return
                    cause = root_cause(exc)
                    wait = restarts.failed(self.progressed(spec.assignment.workers))
                    if wait is None:
                        self.error = WorkersFailedError(
                            f"the workers of job {self.config.job!r} failed "
                            f"{restarts.failures} times in a row: {cause}"
                        )
                        return
                    log.warning("the workers failed (%s); starting them again", cause)
                    self._restarted("failure", str(cause))
                    if self._stopping.wait(wait):
                        return
        finally:
            self._done.set()

    def progressed(self, workers: int) -> bool:
        """Whether this start of the workers made progress: each of the ``workers``
        reported an epoch since it began."""
        with self._lock:
            return len(self._reported) >= workers

    def _regrown(self, spec: WorkerSpec) -> WorkerSpec:
        """The spec of the next start after input topics grew (the workers stopped)."""
        grown = replace(self._worker_spec(), token=spec.token, control=spec.control)
        with self._control:
            if not self._stopping.is_set() and self._coordinator is not None:
                self._coordinator.resume()
            self._regrow.clear()
        return grown

    def _discover(self, every_s: float) -> None:
        """Every ``every_s``: stop the workers for a new start when an input grew."""
        cfg = self.config.kafka.consumer
        admin = KafkaAdmin(self.settings.bootstrap_servers, client_config=cfg)
        while not self._stopping.wait(every_s) and not self._done.is_set():
            if self._regrow.is_set():
                continue
            if self._inputs_grew(admin) is False:
                return

    def _workers_saw_new_partitions(self) -> None:
        """The workers ended because an input grew: start them again with its new
        partitions (also when the driver's own lookup does not answer now)."""
        cfg = self.config.kafka.consumer
        admin = KafkaAdmin(self.settings.bootstrap_servers, client_config=cfg)
        if self._inputs_grew(admin) is None and not self._stopping.is_set():
            self._restarted("inputs_grew", "the workers saw input partitions added")
            self._regrow.set()

    def _inputs_grew(self, admin: KafkaAdmin) -> bool | None:
        """If an input has partitions the workers do not read: stop the workers for a new
        start (``True``), or stop the job when its tasks cannot take them (``False``);
        ``None``: none grew (or the lookup failed)."""
        topics = sorted({s.topic for s in plan_for(self.settings).sources})
        try:
            found = admin.partition_counts(topics)
        except KafkaAdminError as exc:
            log.debug("partition discovery: %s", exc)
            return None
        known = self._known
        grown = [t for t in topics if found.get(t, 0) > known.get(t, 0)]
        if not grown:
            return None
        text = ", ".join(f"{t} {known.get(t, 0)} -> {found[t]}" for t in grown)
        try:
            check_grown_inputs(self.config, self.settings.tasks, max(found[t] for t in grown))
        except TaskCountError as exc:
            log.warning("input partitions added (%s): the job stops", text)
            with self._control:
                self.error = exc  # the workers commit what they read and end
                self._stopping.set()
                if self._coordinator is not None:
                    self._coordinator.stop_workers()
            return False
        with self._control:
            if self._stopping.is_set() or self._coordinator is None:
                return False
            if self._regrow.is_set():  # the discovery thread and the workers both saw it
                return True
            log.info("input partitions added (%s): starting the workers again", text)
            self._restarted("inputs_grew", f"input partitions added: {text}")
            self._regrow.set()
            self._coordinator.stop_workers()
        return True

    def _run_stage(self, spec: WorkerSpec) -> list[WorkerSummary]:
        sc = self.spark.sparkContext
        n = spec.assignment.workers
        sc.setJobGroup(self._group, f"window-operator {self.config.job}: {n} workers", True)
        stage = sc.parallelize(range(n), n).barrier()
        result: list[WorkerSummary] = stage.mapPartitions(partial(run_worker, spec)).collect()
        return result

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until the workers ended (``available_now``: by themselves); raises
        :class:`WorkersFailedError` when they failed for good."""
        done = self._done.wait(timeout_s)
        if done and self.error is not None:
            raise self.error
        return done

    def stop(self) -> None:
        """Ask the workers to stop (they commit what they read) and wait for them."""
        with self._control:
            self._stopping.set()
            if self._coordinator is not None:
                self._coordinator.stop_workers()
        if self._thread is not None:
            self._thread.join(self.settings.broker_timeout_s + 30.0)
            if self._thread.is_alive():
                self.spark.sparkContext.cancelJobGroup(self._group)
                self._thread.join(30.0)
        if self._coordinator is not None:
            self._coordinator.close()

    # -- reports ---------------------------------------------------------------------------

    def _on_epoch(self, epoch: EpochReport) -> None:
        """A worker's epoch (coordinator thread): published as a batch report."""
        # the workers report on threads of their own: one report at a time
        with self._lock:
            self._reported.add(epoch.worker)
            self._clock = self._clock.merged(epoch.clock)
            report = BatchReport(
                self._epochs, epoch.tasks, epoch.ranges, self._clock, epoch.seconds
            )
            self._epochs += 1
            self.run_totals.batches += 1
            self._record_progress(report)
            self.reports.publish(report)

    def _record_progress(self, report: BatchReport) -> None:
        """Keep the newest read positions and activity where ``status`` finds them."""
        ends = [((r.source, r.topic, r.partition), r.end) for r in (m.range for m in report.ranges)]
        try:
            record_progress(self.checkpoint_dir, ends, report.clock)
        except OSError as exc:
            log.warning("could not record progress in %s: %s", self.checkpoint_dir, exc)


def job_for(config: AnyJobConfig, **options: Unpack[JobOptions]) -> StreamingJob | LongRunningJob:
    """The job of ``config`` in the shape its ``spark.mode`` names (not started)."""
    if config.spark.long_running:
        return LongRunningJob(config, **options)
    return StreamingJob(config, **options)

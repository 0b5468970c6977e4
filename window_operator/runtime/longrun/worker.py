"""A worker of a long-running job: it reads, exchanges and runs state tasks until told
to stop, keeping its stores, operators and producers open the whole time.

A long-running job has no micro-batches to plan. Each worker, one long-running Spark
task (or a thread, in :mod:`~window_operator.runtime.longrun.local`), does continuously
what a micro-batch's two stages do once:

* **map side**: it reads its input partitions with one consumer, from where the state
  says (:func:`~window_operator.runtime.longrun.assignment.start_offsets`), decodes each
  chunk of records and splits it by state task exactly as the micro-batch map side does
  (:func:`~window_operator.runtime.batch.split_range`), and sends every worker its part
  of the chunk through the :class:`~window_operator.runtime.longrun.mesh.Mesh`: the rows
  of its tasks, the rejected records if the chunk's error lane is one of them, and the
  chunk's report, which every task needs (its clock and its replay positions);
* **state tasks**: every ``epoch`` (``spark.trigger``) each of its state tasks takes
  everything delivered to it since the last epoch as one
  :class:`~window_operator.runtime.exchange.TaskInput`, with the task's own clock before
  and after those chunks, and runs it through its
  :class:`~window_operator.runtime.runner.TaskRunner`, kept open: the same apply, send
  and commit protocol as a micro-batch (one Kafka transaction per task and epoch under
  exactly-once), without opening, restoring or initialising anything again. An epoch's
  tasks run in threads while the worker goes on reading and splitting the next epoch's
  input (their commits mostly wait on the broker); an epoch starts once the one before
  it committed, since its clock starts where that one's ended.

Stopping: a worker that reads no more input (asked to stop, or past the end offsets of
an ``available_now`` run) sends every worker an ``END`` after its last chunk. A worker
that has the ``END`` of every worker has everything it will get: it runs a last epoch
and returns. A worker that lost its driver runs no last epoch: the driver could not
hear of it, so its records are left for the next start, which reads and reports them.

A worker that fails takes its Spark task down; the job's driver starts all workers
again, and each continues from what its tasks committed (see
:mod:`~window_operator.runtime.longrun.assignment`).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_any
from dataclasses import dataclass, replace

from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import ClockState, InputPosition
from window_operator.runtime.batch import split_range
from window_operator.runtime.exchange import InputPartition, MapReport, TaskInput
from window_operator.runtime.faults import trace
from window_operator.runtime.longrun.assignment import Assignment, WorkerStart, start_offsets
from window_operator.runtime.longrun.control import ControlClient
from window_operator.runtime.longrun.growth import InputGrowth, Look
from window_operator.runtime.longrun.held import HeldBack
from window_operator.runtime.longrun.inbox import Delivered, Inbox, TaskClock, merge_reports
from window_operator.runtime.longrun.mesh import Mesh
from window_operator.runtime.longrun.reader import CHUNK_RECORDS, Chunked, InputReader
from window_operator.runtime.longrun.wire import Chunk, End, EpochReport, Kind, WorkerSummary
from window_operator.runtime.plans import plan_for
from window_operator.runtime.report import TaskReport
from window_operator.runtime.routing import task_of_partition
from window_operator.runtime.runner import BatchAbandonedError, BrokerUnavailableError, TaskRunner
from window_operator.runtime.settings import TaskSettings

__all__ = ["DEFAULT_EPOCH_MS", "Worker", "WorkerSpec"]

log = logging.getLogger(__name__)

#: The epoch of a long-running job without a trigger interval (``available_now``).
DEFAULT_EPOCH_MS = 1_000
_IDLE_WAIT_S = 0.05
#: how long a worker waits before it asks an unanswered growth look again
_LOOK_AGAIN_S = 1.0


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker gets from the driver (small and picklable).

    ``first``: the job's starting offset of every input partition; ``latest``: every
    partition's end when the run started (the partitions with input waiting, whose event
    times the watermark must wait for); ``ends``: where an ``available_now`` run stops
    reading (None: run until stopped); ``control``: the driver's coordinator (None: no
    driver, nobody to report to, a single worker); ``attempt``: which start of the
    workers this is (the workers of one start meet, see
    :class:`~window_operator.runtime.longrun.control.Coordinator`).
    """

    settings: TaskSettings
    assignment: Assignment
    token: str
    first: dict[InputPosition, int]
    latest: dict[InputPosition, int]
    ends: dict[InputPosition, int] | None = None
    control: str | None = None
    epoch_ms: int = DEFAULT_EPOCH_MS
    #: end an epoch early once the worker read this many records in it (None: no bound)
    epoch_records: int | None = None
    attempt: str = ""
    #: look for partitions added to the inputs before every epoch (see :mod:`.growth`)
    watch_inputs: bool = False


@dataclass
class _RunningEpoch:
    """An epoch whose state tasks run in the worker's threads."""

    inputs: dict[int, TaskInput]
    runs: list[Future[TaskReport]]
    received: dict[int, int]
    read: list[MapReport]
    started: float


class Worker:
    """One worker of a long-running job (see module doc)."""

    def __init__(self, spec: WorkerSpec, index: int, *, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.index = index
        self.settings = spec.settings
        self.assignment = spec.assignment
        self.tasks = spec.assignment.tasks[index]
        self.inbox = Inbox(self.tasks)
        self.reader = InputReader(
            f"worker {index}",
            spec.assignment.inputs[index],
            self.settings.consumer_config(),
            spec.ends,
        )
        self.mesh = Mesh(
            index,
            spec.assignment.workers,
            spec.token,
            self.inbox.deliver,
            host=host,
            timeout_s=max(60.0, self.settings.broker_timeout_s),
        )
        self._held = HeldBack.of(
            self.mesh, self.settings.config.watermark.idle_timeout, spec.epoch_ms
        )
        plan = plan_for(self.settings)
        self.runners = {
            t: TaskRunner(self.settings, plan, t, keep_open=True, stopping=self._stop_requested)
            for t in self.tasks
        }
        n = self.settings.tasks
        #: the task that keeps a partition's position, when state is keyed by partition
        self._owner = (lambda p: task_of_partition(p, n)) if plan.partition_keyed else None
        self.clocks: dict[int, TaskClock] = {}
        self.epoch = 0
        self.records = 0
        self._epoch_records = 0
        self._read: dict[InputPosition, MapReport] = {}
        #: where each partition was when every task was last told that it was read to
        #: its end (:meth:`_tell_caught_up`)
        self._told_end: dict[InputPosition, int] = {}
        self._sent_end = False
        #: an epoch was not started (its records are read again at the next start): no
        #: later one may start, or it would commit positions past them
        self._held_epochs = False
        self._running: _RunningEpoch | None = None
        self.control: ControlClient | None = None
        self._pool = ThreadPoolExecutor(max(1, len(self.tasks)), thread_name_prefix="task")
        self._growth = (
            InputGrowth(
                KafkaAdmin(
                    self.settings.bootstrap_servers,
                    client_config=self.settings.config.kafka.consumer,
                ),
                spec.assignment.partition_counts(),
            )
            if spec.watch_inputs
            else None
        )

    # -- the run ------------------------------------------------------------------------

    def run(self) -> WorkerSummary:
        """Run until stopped (or the end offsets); what the worker did."""
        trace("worker-start", -1, -1, f"worker {self.index}")
        try:
            if self.spec.control is not None:
                self.control = ControlClient(self.spec.control, self.spec.token, self.index)
            self._start()
            self._loop()
            return WorkerSummary(
                self.index, self.epoch, self.records, tuple(self.tasks), self._inputs_grew
            )
        finally:
            self._close()
            trace("worker-end", -1, self.epoch, f"worker {self.index}")

    def _start(self) -> None:
        """Open the tasks, meet the other workers, start reading where the state says."""
        positions: dict[int, dict[InputPosition, int]] = {}
        restored: dict[int, ClockState] = {}
        # each task opens its store, restores it and initialises its producer: mostly
        # waiting for the broker, so the tasks do it at the same time
        with ThreadPoolExecutor(max(1, len(self.runners))) as pool:
            tasks = pool.map(TaskRunner.open, self.runners.values())
            opened = dict(zip(self.runners, tasks, strict=True))
        for t, task in opened.items():
            positions[t], restored[t] = task.op.offsets, task.op.clock_state()
        trace("worker-opened", -1, -1, f"worker {self.index}")
        address = self.mesh.listen()
        met = self._gather(WorkerStart(address, positions).to_json())
        starts = [WorkerStart.from_json(m) for m in met]
        self.mesh.join([s.address for s in starts])
        begin = start_offsets(self.assignment.partitions, starts, self.spec.first, self._owner)
        waiting = {pos for pos, at in begin.items() if at < self.spec.latest.get(pos, 0)}
        for t, clock in restored.items():
            self.clocks[t] = TaskClock.waiting_for(self.settings, t, clock, waiting)
        self.reader.assign(begin)
        # the first report says where every partition starts, read or not (the driver's
        # lag and progress would otherwise keep a position of an earlier run)
        self._read = {
            p.position: MapReport(p.span(begin[p.position], begin[p.position]), 0, None)
            for p in self.assignment.partitions
            if p.position in begin
        }
        trace("worker-reading", -1, -1, f"worker {self.index}")

    def _gather(self, payload: str) -> list[str]:
        """Every worker's ``payload`` (through the driver's coordinator)."""
        if self.control is None:
            if self.assignment.workers > 1:
                raise ValueError("several workers meet through a coordinator: give its address")
            return [payload]
        # workers of a stage Spark runs again meet in the same round: each replaces
        # what its failed attempt sent
        return self.control.gather(self.spec.attempt, payload, self.mesh.timeout_s)

    def _loop(self) -> None:
        epoch_s = self.spec.epoch_ms / 1000.0
        next_epoch = time.monotonic() + epoch_s
        workers = self.assignment.workers
        limit = self.spec.epoch_records
        while True:
            self.mesh.check()
            if not self._sent_end and (self._stop_requested() or self._read_to_end()):
                self._send_end()
            wait = max(0.0, min(_IDLE_WAIT_S, next_epoch - time.monotonic()))
            if self.reader.reading and not self.mesh.throttled:
                chunks = self.reader.read(wait, self._read_budget(limit))
                reached = self.reader.take_caught_up()
                at_end = {p.position for p in reached}
                for chunk in chunks:
                    self._map(chunk, at_end=chunk.partition.position in at_end)
                self._tell_caught_up(reached)
            elif self.reader.reading:  # throttled by a slower receiver
                self._held_back()
                time.sleep(min(wait, 0.005))
            elif wait > 0:
                time.sleep(wait)
            ended = len(self.inbox.ended) == workers
            full = limit is not None and self._epoch_records >= limit
            if ended or full or time.monotonic() >= next_epoch:
                self._finish_epoch()
                # taken before the look: every record of the epoch, the other workers'
                # too, was read before it (one that came in after the look, read after
                # a partition was added, would be applied ahead of that partition's)
                got = self.inbox.take()
                if not self._hold_epochs():
                    self._start_epoch(got, final=ended)
                next_epoch = time.monotonic() + epoch_s
                if ended:
                    self._finish_epoch()
                    return

    @property
    def _inputs_grew(self) -> bool:
        return self._growth is not None and bool(self._growth.grown)

    def _hold_epochs(self) -> bool:
        """Whether the next epoch must not start: an input grew (:mod:`.growth`), so the
        worker ends, committing nothing more, and the driver starts the workers again with
        the new partitions; or the job stops while the broker does not answer the look,
        or did not take the last epoch; or the driver is lost: an epoch committed now
        could not be reported (the next start reads its records and reports them)."""
        if not self._held_epochs and self._driver_lost():
            log.warning(
                "worker %d: lost the driver: the epoch's records are read again at the next start",
                self.index,
            )
            self._held_epochs = True
        if not self._held_epochs:
            if self._growth is None:
                return False
            seen = self._look_for_growth(self._growth)
            if seen is Look.SAME:
                return False
            if seen is Look.GREW:
                log.info(
                    "worker %d: input partitions added (%s): it ends for a new start",
                    self.index,
                    self._growth.describe(),
                )
            else:
                log.warning(
                    "worker %d: stopped while the broker did not answer: the epoch's records "
                    "are read again at the next start",
                    self.index,
                )
            self._held_epochs = True
        if not self._sent_end:
            self._send_end()
        return True

    def _look_for_growth(self, growth: InputGrowth) -> Look:
        """The growth look, asked again while the broker does not answer it: the epoch
        waits, as its commit would, until the job stops (then :attr:`Look.UNANSWERED`)
        or ``processing.broker_timeout`` has passed."""
        started, tries = time.monotonic(), 0
        while (seen := growth.look()) is Look.UNANSWERED and not self._stop_requested():
            waited, tries = time.monotonic() - started, tries + 1
            if tries == 1:
                log.warning(
                    "worker %d: the broker did not say whether the inputs got partitions: "
                    "the epoch waits for it",
                    self.index,
                )
            if waited > self.settings.broker_timeout_s:
                raise BrokerUnavailableError(
                    f"worker {self.index}: Kafka at {self.settings.bootstrap_servers} did "
                    f"not say for {waited:.0f} s whether the inputs got partitions; the "
                    "epoch was not started: restart the job once the broker is back"
                )
            self.mesh.check()
            # the reader is not read meanwhile: its partitions with records must not go
            # idle, or those records would be late once read
            self._held_back()
            time.sleep(_LOOK_AGAIN_S)
        return seen

    def _held_back(self) -> None:
        """The reader cannot read now: its partitions must not go idle (:mod:`.held`)."""
        now = time.monotonic()
        if not self._sent_end and self._held.due(now):
            self._held.tell(self.reader.waiting(), now)

    def _read_budget(self, limit: int | None) -> int:
        """The most records the next read may take: an epoch reads at most ``limit``."""
        if limit is None:
            return CHUNK_RECORDS
        return max(1, min(CHUNK_RECORDS, limit - self._epoch_records))

    def _stop_requested(self) -> bool:
        return self.control is not None and self.control.stop_requested.is_set()

    def _driver_lost(self) -> bool:
        return self.control is not None and self.control.driver_lost.is_set()

    def _read_to_end(self) -> bool:
        """Whether an ``available_now`` run has read all of its input."""
        return self.spec.ends is not None and not self.reader.reading

    def _send_end(self) -> None:
        trace("worker-end-sent", -1, self.epoch, f"worker {self.index}")
        self._sent_end = True
        self.reader.stop()
        for w in range(self.assignment.workers):
            self.mesh.send(w, Kind.END, End(self.index))

    # -- map side -------------------------------------------------------------------------

    def _map(self, c: Chunked, *, at_end: bool = False) -> None:
        """Decode one chunk and send every worker its part (``at_end``: the reader
        reached the partition's end with it)."""
        split = split_range(self.settings, c.range, c.records, c.seconds)
        self.records += len(c.records)
        self._epoch_records += len(c.records)
        pos = c.partition.position
        self._read[pos] = merge_reports(self._read.get(pos), split.report)
        if at_end:
            self._told_end[pos] = c.range.end
        for w, tasks in enumerate(self.assignment.tasks):
            chunk = Chunk(
                split.report,
                {t: split.rows[t] for t in tasks if t in split.rows},
                {split.lane: split.errors} if split.errors and split.lane in tasks else {},
                at_end,
            )
            self.mesh.send(w, Kind.CHUNK, chunk)

    def _tell_caught_up(self, reached: list[InputPartition]) -> None:
        """Tell every task of each partition of ``reached`` (read to its end) that no chunk
        ``at_end`` told of: a task counts a partition as active until its reader reached
        its end (:class:`TaskClock`). The report spans what lies between the last record
        and the end (commit markers: no record), often nothing, and moves the positions
        over it, as a micro-batch's range does."""
        for partition in reached:
            pos = partition.position
            start = self.reader.next_offset[pos]
            at = self.reader.past_markers(pos)
            if self._told_end.get(pos) == at:
                continue
            self._told_end[pos] = at
            report = MapReport(partition.span(start, at), 0, None)
            if at > start:
                self._read[pos] = merge_reports(self._read.get(pos), report)
            for w in range(self.assignment.workers):
                self.mesh.send(w, Kind.CHUNK, Chunk(report, at_end=True))

    # -- state tasks ----------------------------------------------------------------------

    def _start_epoch(self, got: Delivered, *, final: bool = False) -> None:
        """Hand every state task what it ``got`` since the last epoch; they run in threads.

        ``final``: the workers stop after it, so batched LATE updates go out.
        """
        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        inputs = {
            t: replace(
                self.clocks[t].epoch(self.epoch, got.parts[t], now, got.held),
                origin=self.spec.first,
                final=final,
            )
            for t in self.tasks
        }
        runs = [self._pool.submit(self.runners[t].run, inputs[t]) for t in self.tasks]
        self._running = _RunningEpoch(inputs, runs, got.received, list(self._read.values()), t0)
        self._read = {}
        self._epoch_records = 0

    def _finish_epoch(self) -> None:
        """Wait for the running epoch to commit; its clocks, credits and report."""
        running, self._running = self._running, None
        if running is None:
            return
        # the reader waits too: while the epoch commits, its partitions must not go idle
        while wait_for_any(running.runs, timeout=self._held.every_s).not_done:
            self._held_back()
        # a task that failed otherwise (a record too large, a gap, a bug) fails the
        # worker, whatever another task that was given up says
        failures = [run.exception() for run in running.runs]
        for failure in failures:
            if failure is not None and not isinstance(failure, BatchAbandonedError):
                raise failure
        try:
            reports = [run.result() for run in running.runs]
        except BatchAbandonedError as exc:
            # asked to stop while Kafka did not take it: no later epoch may commit
            # positions past the records it was given
            log.warning(
                "worker %d: stopped while Kafka did not take epoch %d (%s)",
                self.index,
                self.epoch,
                exc,
            )
            self._held_epochs = True
            return
        for t, inp in running.inputs.items():
            self.clocks[t].advance(inp)
        for sender, nbytes in running.received.items():
            self.mesh.acknowledge(sender, nbytes)
        if self.control is not None:
            clock = self.clocks[self.tasks[0]].state if self.tasks else ClockState()
            seconds = time.perf_counter() - running.started
            self.control.report(
                EpochReport(self.index, self.epoch, reports, running.read, clock, seconds)
            )
        self.epoch += 1

    def _close(self) -> None:
        self._pool.shutdown()
        for runner in self.runners.values():
            runner.close()
        self.reader.close()
        self.mesh.close()
        if self.control is not None:
            self.control.close()

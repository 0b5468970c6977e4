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
  exactly-once), without opening, restoring or initialising anything again.

Stopping: a worker that reads no more input (asked to stop, or past the end offsets of
an ``available_now`` run) sends every worker an ``END`` after its last chunk. A worker
that has the ``END`` of every worker has everything it will get: it runs a last epoch
and returns.

A worker that fails takes its Spark task down; the job's driver starts all workers
again, and each continues from what its tasks committed (see
:mod:`~window_operator.runtime.longrun.assignment`).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import TYPE_CHECKING, cast

from window_operator.kafka_range import KafkaSourceError, range_consumer_config
from window_operator.kernel import ClockState, InputPosition
from window_operator.policies import NO_WATERMARK
from window_operator.results import ErrorRecord
from window_operator.runtime.batch import advance_clock, split_range
from window_operator.runtime.exchange import InputRange, MapReport, Rows, TaskInput
from window_operator.runtime.faults import trace
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.longrun.assignment import (
    Assignment,
    InputPartition,
    WorkerStart,
    start_offsets,
)
from window_operator.runtime.longrun.control import ControlClient
from window_operator.runtime.longrun.mesh import Mesh
from window_operator.runtime.longrun.wire import (
    Chunk,
    End,
    EpochReport,
    Kind,
    WorkerSummary,
)
from window_operator.runtime.plans import plan_for
from window_operator.runtime.runner import InputGapError, TaskReport, TaskRunner
from window_operator.runtime.settings import TaskSettings

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

__all__ = ["DEFAULT_EPOCH_MS", "Worker", "WorkerSpec"]

log = logging.getLogger(__name__)

#: The epoch of a long-running job without a trigger interval (``available_now``).
DEFAULT_EPOCH_MS = 1_000
#: The most records one read takes from the consumer (one chunk per partition in it).
CHUNK_RECORDS = 20_000
_IDLE_WAIT_S = 0.05


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


@dataclass
class _Part:
    """What one chunk brought one task."""

    report: MapReport
    rows: Rows | None
    errors: tuple[ErrorRecord, ...]


@dataclass
class _Inbox:
    """Chunks delivered to the worker's tasks, not yet taken (filled by mesh threads)."""

    tasks: Sequence[int]
    parts: dict[int, list[_Part]] = field(default_factory=dict)
    #: bytes of chunk frames per sending worker, not yet acknowledged
    received: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    ended: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.parts = {t: [] for t in self.tasks}

    def deliver(self, sender: int, kind: Kind, message: object, nbytes: int) -> None:
        """A message from ``sender`` (a mesh thread, or this worker itself)."""
        with self.lock:
            if kind is Kind.CHUNK and isinstance(message, Chunk):
                for t in self.tasks:
                    part = _Part(message.report, message.rows.get(t), message.errors.get(t, ()))
                    self.parts[t].append(part)
                self.received[sender] += nbytes
            elif kind is Kind.END and isinstance(message, End):
                self.ended.add(message.worker)

    def take(self) -> tuple[dict[int, list[_Part]], dict[int, int], int]:
        """Everything delivered so far; the bytes per sender; how many workers ended."""
        with self.lock:
            parts, self.parts = self.parts, {t: [] for t in self.tasks}
            received, self.received = dict(self.received), defaultdict(int)
            return parts, received, len(self.ended)


class Worker:
    """One worker of a long-running job (see module doc)."""

    def __init__(self, spec: WorkerSpec, index: int, *, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.index = index
        self.settings = spec.settings
        self.assignment = spec.assignment
        self.tasks = spec.assignment.tasks[index]
        self.inputs = {p.position: p for p in spec.assignment.inputs[index]}
        self._positions: dict[tuple[str | None, int | None], InputPosition] = {
            (p.topic, p.partition): p.position for p in self.inputs.values()
        }
        self.inbox = _Inbox(self.tasks)
        self.mesh = Mesh(
            index,
            spec.assignment.workers,
            spec.token,
            self.inbox.deliver,
            host=host,
            timeout_s=max(60.0, self.settings.broker_timeout_s),
        )
        plan = plan_for(self.settings)
        self.runners = {t: TaskRunner(self.settings, plan, t, keep_open=True) for t in self.tasks}
        self.clocks: dict[int, ClockState] = {}
        #: per task, the partitions its clock waits for until their first chunk arrives
        self.unseen: dict[int, set[InputPosition]] = {}
        self.next_offset: dict[InputPosition, int] = {}
        self.reading: set[InputPosition] = set()
        self.epoch = 0
        self.records = 0
        self._epoch_records = 0
        self._read: dict[InputPosition, MapReport] = {}
        self._sent_end = False
        self.control: ControlClient | None = None
        self.consumer: Consumer | None = None

    # -- the run ------------------------------------------------------------------------

    def run(self) -> WorkerSummary:
        """Run until stopped (or the end offsets); what the worker did."""
        trace("worker-start", -1, -1, f"worker {self.index}")
        try:
            if self.spec.control is not None:
                self.control = ControlClient(self.spec.control, self.spec.token, self.index)
            self._start()
            self._loop()
            return WorkerSummary(self.index, self.epoch, self.records, tuple(self.tasks))
        finally:
            self._close()
            trace("worker-end", -1, self.epoch, f"worker {self.index}")

    def _start(self) -> None:
        """Open the tasks, meet the other workers, start reading where the state says."""
        positions: dict[int, dict[InputPosition, int]] = {}
        for t, runner in self.runners.items():
            op = runner.open().op
            positions[t] = op.offsets
            self.clocks[t] = op.clock_state()
        trace("worker-opened", -1, -1, f"worker {self.index}")
        address = self.mesh.listen()
        starts = [
            WorkerStart.from_json(m)
            for m in self._gather(WorkerStart(address, positions).to_json())
        ]
        self.mesh.join([s.address for s in starts])
        begin = start_offsets(self.assignment.partitions, starts, self.spec.first)
        waiting = {pos for pos, at in begin.items() if at < self.spec.latest.get(pos, 0)}
        for t, clock in self.clocks.items():
            self.clocks[t], self.unseen[t] = wait_for(clock, waiting)
        self._assign({pos: begin[pos] for pos in self.inputs})
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

    def _assign(self, begin: dict[InputPosition, int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        ends = self.spec.ends
        self.next_offset = dict(begin)
        self.reading = {pos for pos, at in begin.items() if ends is None or at < ends[pos]}
        if not self.reading:
            return
        conf = range_consumer_config(self.settings.consumer_config())
        self.consumer = Consumer(conf)
        self.consumer.assign(
            [
                TopicPartition(self.inputs[pos].topic, pos.partition, begin[pos])
                for pos in sorted(self.reading)
            ]
        )

    def _loop(self) -> None:
        epoch_s = self.spec.epoch_ms / 1000.0
        next_epoch = time.monotonic() + epoch_s
        workers = self.assignment.workers
        while True:
            self.mesh.check()
            if not self._sent_end and (self._stop_requested() or self._read_to_end()):
                self._send_end()
            wait = max(0.0, min(_IDLE_WAIT_S, next_epoch - time.monotonic()))
            if self.reading and self.consumer is not None and not self.mesh.throttled:
                self._read_chunk(wait)
            elif wait > 0:
                time.sleep(min(wait, 0.005 if self.reading else wait))
            full = (
                self.spec.epoch_records is not None
                and self._epoch_records >= self.spec.epoch_records
            )
            ended = len(self.inbox.ended) == workers
            if ended or full or time.monotonic() >= next_epoch:
                self._run_epoch()
                next_epoch = time.monotonic() + epoch_s
                if ended:
                    return

    def _stop_requested(self) -> bool:
        return self.control is not None and self.control.stop_requested.is_set()

    def _read_to_end(self) -> bool:
        """Whether an ``available_now`` run has read all of its input."""
        return self.spec.ends is not None and not self.reading

    def _send_end(self) -> None:
        trace("worker-end-sent", -1, self.epoch, f"worker {self.index}")
        self._sent_end = True
        self.reading.clear()
        for w in range(self.assignment.workers):
            self.mesh.send(w, Kind.END, End(self.index))

    # -- map side -------------------------------------------------------------------------

    def _read_chunk(self, timeout_s: float) -> None:
        assert self.consumer is not None
        t0 = time.perf_counter()
        msgs: list[Message] = self.consumer.consume(CHUNK_RECORDS, timeout=timeout_s)
        if not msgs:
            return
        failed = [m for m in msgs if m.error() is not None]  # end-of-partition events mostly
        if failed:
            msgs = [m for m in msgs if m.error() is None]
        # a consume returns runs of one partition's records: group them by partition
        runs: dict[InputPosition, list[Message]] = {}
        for tp, group in groupby(msgs, key=_topic_partition):
            pos = self._positions.get(tp)
            if pos is None:
                raise KafkaSourceError(f"worker {self.index} got {tp}: not its input")
            if pos in self.reading:
                runs.setdefault(pos, []).extend(group)
        seconds = (time.perf_counter() - t0) / max(len(runs), 1)
        for pos, run in runs.items():
            self._map(pos, _records(self.inputs[pos], run), seconds)
        for m in failed:  # after the records: an end-of-partition event follows them
            self._on_error(m, cast("KafkaError", m.error()))

    def _position_of(self, m: Message) -> InputPosition:
        pos = self._positions.get((m.topic(), m.partition()))
        if pos is None:
            raise KafkaSourceError(
                f"worker {self.index} got {m.topic()}[{m.partition()}]: not its input"
            )
        return pos

    def _map(self, pos: InputPosition, records: InputRecords, read_seconds: float) -> None:
        """Decode one partition's run of records and send every worker its part."""
        ends = self.spec.ends
        if ends is not None and records.offsets[-1] >= ends[pos]:
            records = _until(records, ends[pos])
            self.reading.discard(pos)
            if not len(records):
                return
        source = self.inputs[pos]
        start, end = self.next_offset[pos], records.offsets[-1] + 1
        rng = InputRange(source.source, source.topic, pos.partition, start, end)
        split = split_range(self.settings, rng, records, read_seconds)
        self.next_offset[pos] = end
        if ends is not None and end >= ends[pos]:
            self.reading.discard(pos)
        self.records += len(records)
        self._epoch_records += len(records)
        self._read[pos] = _merge(self._read.get(pos), split.report)
        for w, tasks in enumerate(self.assignment.tasks):
            chunk = Chunk(
                split.report,
                {t: split.rows[t] for t in tasks if t in split.rows},
                {split.lane: split.errors} if split.errors and split.lane in tasks else {},
            )
            self.mesh.send(w, Kind.CHUNK, chunk)

    def _on_error(self, m: Message, err: KafkaError) -> None:
        from confluent_kafka import KafkaError

        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            pos = self._position_of(m)
            ends = self.spec.ends
            if ends is not None and (m.offset() or 0) >= ends[pos]:
                self.reading.discard(pos)
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise InputGapError(
                f"worker {self.index}: {m.topic()}[{m.partition()}] no longer holds the "
                f"records the state continues from ({err.str()}): they were deleted before "
                "they were read; restore the state from scratch to accept the loss"
            )
        elif err.fatal():
            raise KafkaSourceError(f"worker {self.index}: reading input failed: {err.str()}")
        else:
            log.warning("worker %d: reading input: %s", self.index, err.str())

    # -- state tasks ----------------------------------------------------------------------

    def _run_epoch(self) -> None:
        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        parts, received, _ = self.inbox.take()
        reports: list[TaskReport] = []
        for t in self.tasks:
            inp = self._task_input(t, parts[t], now)
            reports.append(self.runners[t].run(inp))
            self.clocks[t] = inp.clock_after
        for sender, nbytes in received.items():
            self.mesh.acknowledge(sender, nbytes)
        if self.control is not None:
            clock = self.clocks[self.tasks[0]] if self.tasks else ClockState()
            ranges = list(self._read.values())
            seconds = time.perf_counter() - t0
            self.control.report(
                EpochReport(self.index, self.epoch, reports, ranges, clock, seconds)
            )
        self._read = {}
        self._epoch_records = 0
        self.epoch += 1

    def _task_input(self, task: int, parts: list[_Part], now: int) -> TaskInput:
        """One epoch of a task: the chunks it got, between its clock before and after."""
        reports = sorted(
            (p.report for p in parts),
            key=lambda r: (r.range.source, r.range.partition, r.range.start),
        )
        before = advance_clock(self.settings, self.clocks[task], [], now)
        seen = self.unseen[task] & {r.range.position for r in reports}
        folded = before
        if seen:  # from now on they count by their chunks (not before these rows)
            self.unseen[task] -= seen
            folded = replace(before, max_ts=_without(before.max_ts, seen))
        errors = [e for p in parts for e in p.errors]
        return TaskInput(
            task=task,
            batch_id=self.epoch,
            clock_before=before,
            clock_after=advance_clock(self.settings, folded, reports, now),
            rows=[p.rows for p in parts if p.rows is not None],
            errors=sorted(errors, key=lambda e: (e.topic or "", e.partition or 0, e.offset or 0)),
            ranges=_spans(reports),
        )

    def _close(self) -> None:
        for runner in self.runners.values():
            runner.close()
        if self.consumer is not None:
            self.consumer.close()
        self.mesh.close()
        if self.control is not None:
            self.control.close()


def wait_for(
    clock: ClockState, waiting: set[InputPosition]
) -> tuple[ClockState, set[InputPosition]]:
    """``clock`` holding its watermark back for the partitions in ``waiting`` it has not
    seen yet; those partitions.

    A task learns a partition's event times from its chunks, which come from whichever
    worker reads it, some sooner than others. A partition the clock has never seen does
    not count towards the watermark, so without this the first chunks of some partitions
    would move it past the events still waiting in the others. Each such partition is
    entered at :data:`NO_WATERMARK` (it holds the watermark back, or is left out after
    the idle timeout, like any partition) and taken out again when its first chunk
    arrives, which then counts as it would in a micro-batch.
    """
    unseen = {pos for pos in waiting if clock.max_ts.get(pos, NO_WATERMARK) <= NO_WATERMARK}
    if not unseen:
        return clock, set()
    return replace(clock, max_ts={**clock.max_ts, **dict.fromkeys(unseen, NO_WATERMARK)}), unseen


def _without(
    max_ts: dict[InputPosition, int], gone: set[InputPosition]
) -> dict[InputPosition, int]:
    return {pos: t for pos, t in max_ts.items() if pos not in gone}


def _spans(reports: list[MapReport]) -> list[InputRange]:
    """The ranges of sorted chunk reports, consecutive chunks of a partition as one (a
    task checks that each partition's input continues where its state ends)."""
    out: list[InputRange] = []
    for r in reports:
        last = out[-1] if out else None
        if last is not None and last.position == r.range.position and last.end == r.range.start:
            out[-1] = replace(last, end=r.range.end)
        else:
            out.append(r.range)
    return out


def _topic_partition(m: Message) -> tuple[str | None, int | None]:
    return m.topic(), m.partition()


def _records(source: InputPartition, run: list[Message]) -> InputRecords:
    """A run of one partition's messages as input records (column by column: a list
    comprehension per column costs far less than a loop over the records)."""
    from confluent_kafka import Message

    # messages without an error always have an offset
    offsets = cast(list[int], list(map(Message.offset, run)))
    return InputRecords(
        source.topic,
        source.partition,
        offsets,
        list(map(Message.key, run)),
        list(map(Message.value, run)),
        [ts if kind else -1 for kind, ts in map(Message.timestamp, run)],
    )


def _until(records: InputRecords, end: int) -> InputRecords:
    """The records before offset ``end``."""
    n = bisect.bisect_left(records.offsets, end)
    stamps = None if records.timestamps is None else records.timestamps[:n]
    return InputRecords(
        records.topic,
        records.partition,
        records.offsets[:n],
        records.keys[:n],
        records.values[:n],
        stamps,
    )


def _merge(a: MapReport | None, b: MapReport) -> MapReport:
    """Two consecutive reports of one partition as one (for the driver's report)."""
    if a is None:
        return b
    rejected = dict(a.rejected)
    for code, n in b.rejected.items():
        rejected[code] = rejected.get(code, 0) + n
    max_ts = (
        b.max_ts if a.max_ts is None else a.max_ts if b.max_ts is None else max(a.max_ts, b.max_ts)
    )
    return MapReport(
        InputRange(a.range.source, a.range.topic, a.range.partition, a.range.start, b.range.end),
        a.records + b.records,
        max_ts,
        rejected,
        a.seconds + b.seconds,
        a.seconds_read + b.seconds_read,
    )

"""A state task's micro-batch: its rows through the operator, out to Kafka, committed.

Per batch (:meth:`TaskRunner.run`):

1. open the task's store, initialise its producer (which fences every other producer of
   the task), then catch the store up from its changelog (:class:`TaskState`);
2. check that the store's input positions meet the batch's start offsets: a store
   behind Spark's checkpoint (the broker lost the changelog's tail, together with the
   outputs of the same transactions) would skip input silently, so the task reads
   what it lacks back from Kafka (from its positions, or from the job's first offset
   of a partition it never consumed: ``TaskInput.origin``) and runs it first, each
   lost batch with the clock it first ran with (:mod:`~window_operator.runtime.gaps`,
   :mod:`~window_operator.runtime.reread`);
   then the batch itself;
3. drop replayed error records; adopt the job clock of the batch's start (lateness and
   retention are decided with it); add the rows of each source in (partition, offset)
   order (the operator drops replays); mark every range of the batch handled (when state
   is keyed by input partition, the ranges of the task's own partitions: ``_owned``);
   adopt the clock after the batch (windows fire); run the wall-clock timers;
4. send results and error records, log the changelog, commit (one transaction under
   exactly-once), then commit the local store.
   A pass that changes nothing but the wall clock (an idle task's timer pass) commits
   nothing (:meth:`~window_operator.runtime.commit.TaskState.unchanged_by`).

A failure talking to Kafka discards the producer and runs the batch again from step 1
(nothing of it was committed), until ``processing.broker_timeout`` has passed, or until
the job is asked to stop (a long-running task's ``stopping``).

A micro-batch task closes its store after the batch. A long-running task
(``keep_open=True``) keeps the store open, the operator loaded and the producer
initialised from one batch to the next: only a failure closes them, and the next batch
opens them again from the store and the changelog.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence, Sized
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, Never, TypeVar

import numpy as np
import pyarrow as pa

from stores.rocks import StoreBatch
from window_operator.arrays import IntArray
from window_operator.errors import UserCodeExitError
from window_operator.kernel import InputPosition, WindowOperator
from window_operator.results import ErrorRecord
from window_operator.runtime.attempts import (
    Attempts,
    BrokerUnavailableError,
    RecordTooLargeError,
)
from window_operator.runtime.commit import TaskState, last_writer
from window_operator.runtime.exchange import TaskInput, from_ipc
from window_operator.runtime.faults import crash_point, trace, tracing
from window_operator.runtime.gaps import InputGapError
from window_operator.runtime.guard import add_guarded, internal_error
from window_operator.runtime.kafka_failures import KAFKA_FAILURES
from window_operator.runtime.kafka_waits import BatchAbandonedError, Stopping
from window_operator.runtime.lookup import Original, read_records, with_originals
from window_operator.runtime.plan import JobPlan
from window_operator.runtime.producers import discard_producer, task_producer
from window_operator.runtime.record_limit import fit_errors, fit_results
from window_operator.runtime.report import TaskReport
from window_operator.runtime.reread import check_still_kept, lost_inputs
from window_operator.runtime.routing import task_of_partition
from window_operator.runtime.settings import TaskSettings
from window_operator.runtime.sink import OutputSink, SinkTopics
from window_operator.runtime.state_gauge import StateFigures, StateGauge

__all__ = [
    "BatchAbandonedError",
    "BrokerUnavailableError",
    "InputGapError",
    "OpenTask",
    "RecordTooLargeError",
    "TaskRunner",
]

if TYPE_CHECKING:
    from confluent_kafka import Producer

log = logging.getLogger(__name__)

B = TypeVar("B")
R = TypeVar("R", bound=Sized)


@dataclass
class OpenTask(Generic[B, R]):
    """A state task ready for a batch: its store open and caught up with the changelog,
    its operator loaded, its producer initialised (``writer``: its token, exactly-once)."""

    state: TaskState
    producer: Producer
    writer: str | None
    op: WindowOperator[B, R, object]


class TaskRunner(Generic[B, R]):
    """Runs the batches of one state task (see module doc)."""

    def __init__(
        self,
        settings: TaskSettings,
        plan: JobPlan[B, R],
        task: int,
        *,
        keep_open: bool = False,
        stopping: Stopping = None,
    ) -> None:
        self.settings = settings
        self.plan = plan
        self.task = task
        self.keep_open = keep_open
        #: whether the job was asked to stop: a batch Kafka does not take is then given
        #: up (:class:`~window_operator.runtime.kafka_waits.BatchAbandonedError`)
        self.stopping = stopping
        self.topics = SinkTopics(settings.config.output.topic, settings.config.output.errors_topic)
        self._open: OpenTask[B, R] | None = None
        #: changelog records applied and seconds taken by an :meth:`open` ahead of the
        #: task's first batch (a long-running worker opens its tasks at its start),
        #: reported with that batch
        self._unreported_restore: tuple[int, float] | None = None
        self._gauge = StateGauge()

    def open(self) -> OpenTask[B, R]:
        """The task opened for its next batch (kept from the last one when it is open)."""
        if self._open is None:
            t0 = time.perf_counter()
            # a long-running worker's start: the workers meet once every task is open,
            # so a stop asked meanwhile is taken after it (the producer waited for)
            self._open = self._open_task(stopping=None)
            restored = self._open.state.restored.applied
            self._unreported_restore = (restored, time.perf_counter() - t0)
        return self._open

    def close(self) -> None:
        """Close the task's store (a kept producer stays with the worker)."""
        if self._open is not None:
            self._open.state.close()
            self._open = None

    def run(self, inp: TaskInput) -> TaskReport:
        """Process one batch (or a timer-only pass) and commit it; retry while Kafka is away."""
        attempts = Attempts(self.settings, self.task, inp.label, self.stopping)
        while True:
            try:
                report = self._run_once(inp)
                report.attempts = attempts.made + 1
                if self._unreported_restore is not None:  # with the first batch that ran
                    records, seconds = self._unreported_restore
                    self._unreported_restore = None
                    report.restored_records += records
                    report.seconds_restore += seconds
                return report
            except BatchAbandonedError as exc:  # a wait on Kafka cut short by a stop
                raise attempts.abandoned(exc) from exc
            except KAFKA_FAILURES as exc:
                attempts.failed(exc)  # raises when another attempt cannot help

    def _open_task(self, stopping: Stopping) -> OpenTask[B, R]:
        """Open the store, initialise the producer, catch the store up, load the operator.

        The producer comes before the catch-up: under exactly-once its initialisation
        (here, or for a producer kept from an earlier batch, before that batch) fences
        every other producer of the task (a zombie attempt, a second copy of the job),
        so a commit of theirs either landed before it, and the catch-up reads it, or
        cannot land; and one that initialised since fenced ours, whose commit then
        fails. Caught up first, a commit landing between the catch-up and the
        initialisation would be missed, and the batch applied again over the state
        before it (its results sent twice).
        """
        store = TaskState.open_store(self.settings, self.task)
        try:
            producer, writer = task_producer(self.settings, self.task, last_writer(store), stopping)
        except BaseException:
            store.close()
            raise
        state = TaskState.catch_up(self.settings, self.task, store)  # closes it on failure
        try:
            op = self.plan.operator(state.store)
            state.committed_batch = op.batches
            return OpenTask(state, producer, writer, op)
        except BaseException:
            state.close()
            raise

    def _run_once(self, inp: TaskInput) -> TaskReport:
        t0 = time.perf_counter()
        inp = self._owned(inp)
        report = TaskReport(task=self.task, batch_id=inp.batch_id)
        report.location = f"{socket.gethostname()}:{self.settings.task_path(self.task)}"
        opened = self._open
        try:
            if opened is None:
                opened = self._open = self._open_task(self.stopping)
                report.restored_records = opened.state.restored.applied
            report.seconds_restore = time.perf_counter() - t0
            check_still_kept(self.settings, self.task, opened.op.offsets, inp)
            for lost in lost_inputs(self.settings, self.plan, self.task, opened.op, inp):
                self._process(opened, lost, report)
            self._process(opened, inp, report)
            self._observe_state(opened, report)
        except BaseException as exc:
            if opened is not None and isinstance(exc, (*KAFKA_FAILURES, BatchAbandonedError)):
                discard_producer(opened.producer)
            self.close()
            if isinstance(exc, SystemExit):  # only user code exits while a task runs
                raise UserCodeExitError.of(exc) from exc
            raise
        if not self.keep_open:
            self.close()
        report.seconds = time.perf_counter() - t0
        return report

    def _owned(self, inp: TaskInput) -> TaskInput:
        """``inp`` with only the ranges this task's state keeps positions of.

        State keyed by the operator's key sees every partition, so every range is its to
        check and mark handled. State keyed by input partition (offset windows, tuple
        sessions) owns only the partitions routed to it: another partition's range is
        neither its to mark (an offsets operator holds one partition) nor a gap of it.
        """
        if not self.plan.partition_keyed:
            return inp
        n = self.settings.tasks
        mine = [r for r in inp.ranges if task_of_partition(r.partition, n) == self.task]
        return inp if len(mine) == len(inp.ranges) else replace(inp, ranges=mine)

    def _process(self, opened: OpenTask[B, R], inp: TaskInput, report: TaskReport) -> None:
        """Steps 3 and 4 for one input: apply it, send, log and commit."""
        t0 = time.perf_counter()
        opened.op, errors = self._apply(opened.state, opened.op, inp, report)
        report.seconds_operator += time.perf_counter() - t0
        self._send(opened.producer, opened.writer, opened.state, opened.op, errors, inp, report)

    def _observe_state(self, opened: OpenTask[B, R], report: TaskReport) -> None:
        """Store size and live keys and windows in the report (a task kept open counts
        them now and then: :mod:`~window_operator.runtime.state_gauge`)."""
        figures = self._gauge.read(
            lambda: _state_report(opened.op, opened.state), every_time=not self.keep_open
        )
        report.store_bytes = figures.store_bytes
        report.live_keys, report.live_windows = figures.live_keys, figures.live_windows
        report.held_messages = dict(figures.held_messages)

    def _apply(
        self,
        state: TaskState,
        op: WindowOperator[B, R, object],
        inp: TaskInput,
        report: TaskReport,
    ) -> tuple[WindowOperator[B, R, object], list[ErrorRecord]]:
        """Step 3; returns the operator holding the batch (a fresh one after a failure)."""
        offsets = op.offsets
        errors = [e for e in inp.errors if not _replayed(e, offsets, self.plan)]
        report.replayed += len(inp.errors) - len(errors)  # rejected before: not again
        op.adopt_clock(inp.clock_before)
        # one batch, however many calls: a join decides its two inputs together, so a
        # late row and its late partner match without an unmatched row first (as in
        # simulate)
        op.begin_batch()
        by_source: dict[int, list[pa.RecordBatch]] = defaultdict(list)
        for rows in inp.rows:
            by_source[rows.source].append(from_ipc(rows.data))
        applied: list[B] = []
        for batch in self.plan.arrange(dict(by_source)):
            op, kept = self._add(state, op, inp, batch, applied, errors, report)
            applied.append(kept)
        op.end_batch()
        for r in inp.ranges:
            if r.end > r.start:  # a timer pass's empty ranges only check the positions
                op.mark_consumed(r.partition, r.end - 1, source=r.source)
        op.adopt_clock(inp.clock_after)
        if inp.final:
            op.end_late_period()
        op.timeout(inp.now)
        report.watermark = op.watermark
        report.late_pending = op.late_pending
        return op, errors

    def _add(
        self,
        state: TaskState,
        op: WindowOperator[B, R, object],
        inp: TaskInput,
        batch: B,
        applied: list[B],
        errors: list[ErrorRecord],
        report: TaskReport,
    ) -> tuple[WindowOperator[B, R, object], B]:
        """Add rows of one source; rows that make the operator raise become error records."""
        source = self.plan.source_of(batch)

        def reopen() -> WindowOperator[B, R, object]:
            fresh = self.plan.operator(state.store)
            fresh.adopt_clock(inp.clock_before)
            fresh.begin_batch()
            for earlier in applied:
                fresh.add_batch(earlier)
            return fresh

        parts, offs = self.plan.positions(batch)
        result = add_guarded(reopen, op, batch, self.plan.take, len(parts))
        report.rows += len(parts)
        report.applied += result.stats.applied
        report.replayed += result.stats.replayed
        report.late += result.stats.late
        if not result.failed:
            return result.operator, batch
        errors += self._internal_errors(source, parts, offs, result.failed)
        bad = {row for row, _ in result.failed}
        keep = np.asarray([i for i in range(len(parts)) if i not in bad], dtype=np.int64)
        return result.operator, self.plan.take(batch, keep)

    def _internal_errors(
        self, source: int, parts: IntArray, offs: IntArray, failed: list[tuple[int, BaseException]]
    ) -> list[ErrorRecord]:
        """Error records of rows that made the operator raise, with their original record."""
        spec = self.plan.sources[source]
        topic, name = spec.topic, spec.name if len(self.plan.sources) > 1 else None
        out = []
        for row, exc in failed:
            partition, offset = int(parts[row]), int(offs[row])
            original = read_records(self.settings.consumer_config(), topic, partition, [offset])
            got = original.get(offset, Original(None, None))
            err = internal_error(
                "the operator", exc, topic=topic, partition=partition, offset=offset, raw=got.value
            )
            out.append(replace(err, key=got.key, timestamp=got.timestamp, source=name))
        return out

    def _send(
        self,
        producer: Producer,
        writer: str | None,
        state: TaskState,
        op: WindowOperator[B, R, object],
        errors: list[ErrorRecord],
        inp: TaskInput,
        report: TaskReport,
    ) -> None:
        """Step 4: send the pass's results and error records, log, commit; a pass that
        changes nothing but the wall clock commits nothing
        (:meth:`~window_operator.runtime.commit.TaskState.unchanged_by`)."""
        batch = op.flush(commit=False)
        errors[:] = with_originals(
            errors + op.get_errors(), self.settings.consumer_config(), self.plan.sources[0].topic
        )
        report.rejected += len(errors)
        by_code = Counter(report.rejected_by_code) + Counter(e.code.value for e in errors)
        report.rejected_by_code = dict(by_code)
        results = op.take_result_batches()
        if not errors and not any(len(r) for r in results) and state.unchanged_by(batch):
            state.record_writer(writer)  # a new producer's token, in the store only
            trace("unchanged", self.task, inp.batch_id)
            return
        self._write(producer, writer, state, op, batch, results, errors, inp, report)

    def _write(
        self,
        producer: Producer,
        writer: str | None,
        state: TaskState,
        op: WindowOperator[B, R, object],
        batch: StoreBatch,
        result_batches: Sequence[R],
        errors: list[ErrorRecord],
        inp: TaskInput,
        report: TaskReport,
    ) -> None:
        """Send the results and error records, log the changelog, commit (a transaction
        under exactly-once), then commit ``batch`` to the local store."""
        t0 = time.perf_counter()
        sink = OutputSink(
            producer,
            self.topics,
            transactional=self.settings.exactly_once,
            timeout_s=self.settings.broker_timeout_s,
            stopping=self.stopping,
            attempt=uuid.uuid4().hex if tracing() else None,
        )
        trace("apply", self.task, inp.batch_id)
        sink.begin()
        unwritten: list[ErrorRecord] = []
        limit = self.settings.config.output.max_record_bytes
        sent = 0
        for results in result_batches:
            encoded = self.plan.encode_results(results)
            fitted = fit_results(encoded.records, limit)
            sent += sink.results(fitted.records)
            _count_kind(report.results_by_kind, results, len(fitted.records))
            unwritten += encoded.errors + fitted.errors
        sink.errors(fit_errors(errors + unwritten, limit))
        report.results += sent
        report.result_errors += len(unwritten)
        sink.acknowledge_outputs()
        trace("outputs", self.task, inp.batch_id)
        t_outputs = time.perf_counter()
        report.seconds_outputs += t_outputs - t0
        crash_point("after_outputs", report.rows, inp.batch_id)
        positions = [((p.source, p.partition), o) for p, o in op.offsets.items()]
        delivery = state.log(producer, batch, batch_number=op.batches, offsets=positions)
        report.compensated = len(state.restored.uncommitted)
        report.changelog_records += delivery.records
        marker = sink.commit(delivery)
        trace(
            "changelog", self.task, inp.batch_id, f"{sink.attempt} {sent}" if sink.attempt else ""
        )
        t_changelog = time.perf_counter()
        report.seconds_changelog += t_changelog - t_outputs
        crash_point("after_changelog", report.rows, inp.batch_id)
        state.commit(batch, marker, writer)
        report.commits += 1
        trace("local-commit", self.task, inp.batch_id)
        report.seconds_commit += time.perf_counter() - t0
        report.seconds_local_commit += time.perf_counter() - t_changelog


def _replayed(err: ErrorRecord, offsets: dict[InputPosition, int], plan: JobPlan[B, R]) -> bool:
    """Whether an error record was already handled (its offset is at or below the position)."""
    if err.partition is None or err.offset is None:
        return False
    by_name = [s.index for s in plan.sources if s.name == err.source]  # a self-join's
    by_topic = [s.index for s in plan.sources if s.topic == err.topic]
    source = (by_name or by_topic or [0])[0]
    return err.offset <= offsets.get(InputPosition(source, err.partition), -1)


def _count_kind(counts: dict[str, int], results: object, written: int) -> None:
    """Count a result batch's written results under its kind (a batch holds one kind)."""
    kind = str(getattr(results, "kind", "RESULT"))
    counts[kind] = counts.get(kind, 0) + written


def _state_report(op: WindowOperator[Never, object, object], state: TaskState) -> StateFigures:
    """The task's state after a batch: store size on disk, live keys and live windows
    (``-1``: the operator does not tell)."""
    live = getattr(op, "live_state", None)
    if live is None:
        return StateFigures(state.store.size_on_disk())
    counts = live()
    size = state.store.size_on_disk()
    return StateFigures(size, counts.keys, counts.windows, counts.messages)

"""The operator kernel: the plumbing every window operator composes.

Each operator (time windows, sessions, count / offset windows, the join) owns one
:class:`OperatorKernel` and keeps only its own logic. The kernel holds the task store,
the input positions (replays), the event-time clock (watermark), the wall-clock
emission timers, the output buffer and the checkpoint, and gives the record path: replay
filtering, decode-or-reject of single records, and checkpoint write / restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.arrival import future_error
from window_operator.errors import (
    InvalidArgumentError,
    JobSetupError,
    OperatorClosedError,
    OperatorFailedError,
    UnknownSourceError,
    exception_text,
)
from window_operator.events import EventBatch
from window_operator.kernel.checkpoint import (
    CHECKPOINT_KEY,
    Checkpoint,
    JsonValue,
    read_checkpoint,
)
from window_operator.kernel.clock import EventClock
from window_operator.kernel.outputs import OutputBuffer
from window_operator.kernel.positions import InputPosition, Positions, input_position
from window_operator.kernel.records import Admission, StepStats, retention_error
from window_operator.kernel.timers import TimerAction, Timers, due
from window_operator.policies import EmitPolicy
from window_operator.rejections import RecordRejected, raw_of
from window_operator.results import ErrorRecord

__all__ = ["BEFORE_CHANGE", "COMPACT_EVERY", "Decoded", "OperatorKernel", "SingleDecoder"]

#: Every this many flushes, the ranges deleted by expiry are compacted off the disk.
COMPACT_EVERY = 16

#: The errors an operator call raises before it changes anything: it stays usable.
BEFORE_CHANGE: tuple[type[BaseException], ...] = (
    InvalidArgumentError,
    JobSetupError,
    UnknownSourceError,
)

R = TypeVar("R")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class SingleDecoder(Protocol[T_co]):
    """Decodes one in-memory record or raises :class:`RecordRejected`."""

    def decode_one(
        self, record: Any, record_time: int | None = None, record_key: object = None
    ) -> T_co:
        """The decoded record (``record_time`` / ``record_key``: its Kafka timestamp and
        key, where it has them)."""
        ...


@dataclass(slots=True)  # not frozen: built once per single record, where that costs
class Decoded(Generic[T]):
    """A single record that passed the replay filter and decoding, with its input
    partition and offset."""

    value: T
    position: InputPosition
    offset: int


class OperatorKernel(Generic[R]):
    """Store, positions, clock, timers, outputs and checkpoint of one operator (see module doc).

    ``R`` is the operator's result batch type. With ``timed`` the operator runs the
    policy's EARLY / LATE periods: :attr:`timers` go into its checkpoint fields.
    """

    def __init__(
        self,
        store: TaskStore,
        *,
        shape: dict[str, JsonValue],
        policy: EmitPolicy,
        sources: int = 1,
        timed: bool = False,
        inputs: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.shape = shape
        #: the input topic of each source (empty: not known; those a restored
        #: checkpoint names are kept then)
        self.inputs = list(inputs)
        self.policy = policy
        self.timed = timed
        #: The wall-clock timers of the EARLY / LATE periods (checkpointed when ``timed``).
        self.timers = Timers()
        self.positions = Positions()
        self.clock = EventClock(
            sources=sources,
            allowed_lateness=policy.allowed_lateness,
            idle_timeout=policy.idle_timeout,
        )
        self.outputs: OutputBuffer[R] = OutputBuffer()
        #: How many flushes the store has seen (the changelog batch number).
        self.batches = 0
        #: Inside a micro-batch of several ``add_batch`` calls: the watermark stays where
        #: the batch began until it ends (see ``KernelForwarding.begin_batch``).
        self.holding = False
        #: The error of a flush that failed (see :meth:`flushing`), else ``None``.
        self.failed: str | None = None

    # -- progress -----------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The watermark (never decreasing)."""
        return self.clock.watermark

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per input partition."""
        return self.positions.as_dict()

    def admit(self, source: int, part: IntArray, off: IntArray) -> Admission:
        """Assign missing offsets and find the replays of a batch of one source."""
        off = self.positions.assign(source, part, off)
        fresh = self.positions.fresh(source, part, off)
        return Admission(off, fresh, int(len(off) - fresh.sum()))

    def admit_events(self, batch: EventBatch) -> Admission:
        """:meth:`admit` a batch of events of the only input; the arrival clock notes its
        wall clock first (a late mark starts its LATE period from it)."""
        if batch.wall_ms is not None and len(batch.wall_ms):
            self.clock.note_wall(0, batch.partition, batch.wall_ms)
        return self.admit(0, batch.partition, batch.offset)

    def applied_events(self, batch: EventBatch, adm: Admission, applied: IntArray) -> None:
        """After a batch of :meth:`admit_events`: offsets advance for every fresh record,
        rejected ones included (they were handled), and the clock sees the event times
        of the ``applied`` rows."""
        part, fresh = batch.partition, adm.fresh
        self.positions.advance(0, part[fresh], adm.offsets[fresh])
        if len(applied):
            self.clock.observe(0, part[applied], batch.ts[applied])

    def decode_one(
        self,
        decoder: SingleDecoder[T] | None,
        message: Mapping[str, Any] | object,
        *,
        source: int,
        partition: int,
        offset: int | None,
        topic: str | None = None,
        record_time: int | None = None,
        record_key: object = None,
    ) -> Decoded[T] | StepStats:
        """One record through the replay filter and the decoder (``record_time`` /
        ``record_key``: the record's Kafka timestamp and key, for a job that reads them).

        A replay gives ``StepStats(replayed=1)``; a rejected record is queued as an error,
        its offset marked handled, and gives ``StepStats(rejected=1)``.
        """
        if decoder is None:
            raise InvalidArgumentError(
                "single records need a decoder (build the operator from a job)"
            )
        pos = input_position(source, partition)
        last = self.positions.last.get(pos, -1)
        if offset is not None and offset <= last:
            return StepStats(replayed=1)
        off = last + 1 if offset is None else offset
        try:
            value = decoder.decode_one(message, record_time, record_key)
            limit = self.policy.max_future
            if limit is not None and record_time is not None and record_time >= 0:
                # the far-future guard of the input plans, for a record given with its
                # arrival time: before, the library took a year-3000 event, whose
                # watermark then rejected every later event as OUT_OF_RETENTION
                ts = getattr(value, "ts", None)  # a DecodedEvent's or a JoinRecord's
                if isinstance(ts, int) and ts - record_time > limit:
                    raise RecordRejected(*future_error(ts, record_time, limit))
        except RecordRejected as rej:
            self.positions.mark_at(pos, off)
            self.outputs.reject(
                ErrorRecord(rej.code, rej.reason, partition, off, raw_of(message), topic)
            )
            return StepStats(rejected=1)
        return Decoded(value, pos, off)

    def timers_due(self, late_pending: bool) -> TimerAction:
        """What the wall-clock timers emit at the clock's ``now`` (see :func:`.timers.due`)."""
        return due(self.policy, self.timers, self.clock.now, late_pending)

    def reject_retention(self, ts: int, key: str, what: str, partition: int, offset: int) -> None:
        """Reject an event out of retention (``what``: its window ended, ...)."""
        self.outputs.reject(
            retention_error(
                ts=ts,
                key=key,
                what=what,
                retention=self.policy.retention,
                watermark=self.watermark,
                partition=partition,
                offset=offset,
            )
        )

    # -- checkpoint ---------------------------------------------------------------------

    def restore(self) -> dict[str, JsonValue] | None:
        """Load positions, clock, timers and flush count; the operator's own fields (None:
        fresh)."""
        cp = read_checkpoint(self.store, self.shape, self.inputs)
        if cp is None:
            return None
        if not self.inputs and cp.inputs is not None:
            self.inputs = cp.inputs
        self.positions.last = dict(cp.offsets)
        self.clock.max_ts = dict(cp.max_ts)
        self.clock.watermark = cp.watermark
        if cp.now is not None:
            self.clock.now = cp.now
        self.clock.last_active = dict(cp.last_active)
        self.clock.first_wall = cp.first_wall
        self.batches = cp.batches
        if self.timed:
            self.timers.load_json(cp.operator)
        return cp.operator

    def write_checkpoint(self, batch: StoreBatch, operator: dict[str, JsonValue]) -> None:
        """Count a flush and put the checkpoint (always the last write of ``batch``).

        ``operator`` holds the operator's own fields; the timers' go first.
        """
        self.batches += 1
        if self.timed:
            operator = {**self.timers.to_json(), **operator}
        cp = Checkpoint(
            shape=self.shape,
            offsets=self.positions.last,
            max_ts=self.clock.max_ts,
            watermark=self.clock.watermark,
            batches=self.batches,
            operator=operator,
            now=self.clock.now,
            last_active=self.clock.last_active,
            first_wall=self.clock.first_wall,
            inputs=self.inputs or None,
        )
        batch.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, cp.encode())

    def commit(self, batch: StoreBatch, *, commit: bool) -> StoreBatch:
        """Apply ``batch`` to the store unless the caller commits it itself; return it."""
        if commit:
            self.store.commit(batch)
            if self.batches % COMPACT_EVERY == 0:
                self.store.compact_deleted(background=True)
        return batch

    def check_usable(self) -> None:
        """Raise if the operator cannot be used: closed (:class:`OperatorClosedError`),
        or failed (:class:`OperatorFailedError`: a flush failed, or a call that changes
        the operator raised part-way, see :func:`~window_operator.kernel.shell.changes`)."""
        if self.store.closed:
            raise OperatorClosedError(
                "this operator was closed: open the task again to go on (its store "
                "holds what its last flush committed)"
            )
        if self.failed is not None:
            raise OperatorFailedError(
                f"{self.failed}, so this operator takes and writes nothing more: reopen "
                "the task (its store holds the last committed state, and input after it "
                "is taken again)"
            )

    def fail(self, call: str, exc: BaseException) -> None:
        """``call`` raised ``exc`` part-way: the operator takes nothing more (see
        :meth:`check_usable`)."""
        self.failed = f"{call} raised {exception_text(exc)}"

    @contextmanager
    def flushing(self) -> Iterator[None]:
        """Around an operator's flush. Once one failed, memory may be ahead of what was
        written (staged writes taken, expired state dropped), so a later flush would
        commit offsets without their state: the operator refuses to write again
        (:class:`OperatorFailedError`), and :meth:`close` closes the store as the last
        commit left it."""
        if self.failed is not None or self.store.closed:
            self.check_usable()
        try:
            yield
        except BaseException as exc:
            self.failed = f"a flush of this task failed ({exception_text(exc)})"
            raise

    def close(self, flush: Callable[[], object]) -> None:
        """Run ``flush`` and close the store (a second call does nothing). The store is
        closed, its lock released, also when the flush fails (it raises then) or failed
        before (nothing is written then)."""
        if self.store.closed:
            return
        try:
            if self.failed is None:
                flush()
        finally:
            self.store.close()

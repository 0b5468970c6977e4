"""What a long-running worker's state tasks received, and one epoch of it as a batch.

The mesh threads (and the worker itself, for its own chunks) deliver chunks into the
:class:`Inbox`; every epoch the worker takes all of it and turns each task's share into
one :class:`~window_operator.runtime.exchange.TaskInput` (:class:`TaskClock`), the
input a micro-batch would give the task: its rows, the rejected records of its error
lanes, the ranges it has now handled, and its clock before and after them.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from window_operator.kernel import ClockState, InputPosition
from window_operator.policies import NO_WATERMARK
from window_operator.results import ErrorRecord
from window_operator.runtime.batch import advance_clock
from window_operator.runtime.exchange import InputRange, MapReport, Rows, TaskInput
from window_operator.runtime.longrun.wire import Chunk, End, Held, Kind
from window_operator.runtime.settings import TaskSettings

__all__ = ["Delivered", "Inbox", "Part", "TaskClock", "merge_reports"]


@dataclass(frozen=True, slots=True)
class Part:
    """What one chunk brought one task (``at_end``: see :class:`Chunk`)."""

    report: MapReport
    rows: Rows | None
    errors: tuple[ErrorRecord, ...]
    at_end: bool = False


@dataclass(frozen=True, slots=True)
class Delivered:
    """What an :class:`Inbox` got since it was last taken: each task's parts, the bytes
    of chunk frames per sender, and the partitions whose readers were held back."""

    parts: dict[int, list[Part]]
    received: dict[int, int]
    held: frozenset[InputPosition] = frozenset()


@dataclass
class Inbox:
    """Chunks delivered to a worker's tasks and not yet taken (see module doc)."""

    tasks: Sequence[int]
    parts: dict[int, list[Part]] = field(default_factory=dict)
    #: bytes of chunk frames per sending worker, not yet acknowledged
    received: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    #: the workers whose END arrived
    ended: set[int] = field(default_factory=set)
    #: partitions whose readers said they were held back (:class:`Held`)
    held: set[InputPosition] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.parts = {t: [] for t in self.tasks}

    def deliver(self, sender: int, kind: Kind, message: object, nbytes: int) -> None:
        """A message from ``sender`` (a mesh thread, or this worker itself)."""
        with self.lock:
            if kind is Kind.CHUNK and isinstance(message, Chunk):
                for t in self.tasks:
                    rows, errors = message.rows.get(t), message.errors.get(t, ())
                    part = Part(message.report, rows, errors, message.at_end)
                    self.parts[t].append(part)
                self.received[sender] += nbytes
            elif kind is Kind.HELD and isinstance(message, Held):
                self.held.update(message.positions)
            elif kind is Kind.END and isinstance(message, End):
                self.ended.add(message.worker)

    def take(self) -> Delivered:
        """Everything delivered since the last take."""
        with self.lock:
            parts, self.parts = self.parts, {t: [] for t in self.tasks}
            received, self.received = dict(self.received), defaultdict(int)
            held, self.held = frozenset(self.held), set()
            return Delivered(parts, received, held)


@dataclass
class TaskClock:
    """A task's clock between epochs, folded from the reports of the chunks it gets.

    A task learns a partition's event times from its chunks, which come from whichever
    worker reads it, some sooner than others. A partition the clock has never seen does
    not count towards the watermark, so without care the first chunks of some partitions
    would move it past the events still waiting in the others: every partition with
    input waiting when the workers started (``waiting``) is entered at
    :data:`NO_WATERMARK` (it holds the watermark back, or is left out after the idle
    timeout, like any partition) until its first chunk arrives, and counts by its chunks
    from then on, as it would in a micro-batch.

    A partition with input waiting is not idle either, however long ago its last
    records came (before a stop, say, or while its reader was busy with others): a
    partition counts as active (``pending``: not known to be read to its end) from the
    workers' start if records waited in it then, and from each of its chunks, until its
    reader tells that it reached its end (a chunk ``at_end``, or a report spanning no
    offset, which also ends the wait of a partition where only transaction markers
    waited); each epoch's partitions with records count as active at its start.
    Records written after its reader reached its end count from their chunk on. A
    reader that cannot come back to them because its worker is held back (by slower
    receivers, or waiting for its epoch to commit) names the partitions in which records
    wait (``held``, sent while it lasts: :mod:`.held`): they count as active in every
    epoch that brings that word, so their idle time does not run while their reader
    cannot look (as Flink pauses idleness under backpressure); silent ones go idle as
    before.
    """

    settings: TaskSettings
    task: int
    state: ClockState
    unseen: set[InputPosition] = field(default_factory=set)
    pending: set[InputPosition] = field(default_factory=set)

    @classmethod
    def waiting_for(
        cls, settings: TaskSettings, task: int, restored: ClockState, waiting: set[InputPosition]
    ) -> TaskClock:
        """The clock of a task that restored ``restored``, waiting for ``waiting``."""
        unseen = {p for p in waiting if restored.max_ts.get(p, NO_WATERMARK) <= NO_WATERMARK}
        held = {**restored.max_ts, **dict.fromkeys(unseen, NO_WATERMARK)}
        return cls(settings, task, replace(restored, max_ts=held), unseen, set(waiting))

    def epoch(
        self,
        epoch: int,
        parts: list[Part],
        now: int,
        held: frozenset[InputPosition] = frozenset(),
    ) -> TaskInput:
        """The task's input of one epoch: the chunks it got, between its clock before
        and after them (the clock moves on when the epoch committed: :meth:`advance`);
        ``held``: partitions whose readers were held back since the last epoch."""
        reports = sorted(
            (p.report for p in parts if not _spans_nothing(p.report)),
            key=lambda r: (r.range.source, r.range.partition, r.range.start),
        )
        # a report spanning no offset says that its partition was read to its end
        self.pending -= {p.report.range.position for p in parts if _spans_nothing(p.report)}
        # neither the epoch's partitions, nor those still waiting for records, nor those
        # whose readers were held back are idle now
        read = self.pending | held | {r.range.position for r in reports if r.records}
        before = advance_clock(self.settings, self.state, [], now, active=sorted(read))
        self.pending = _still_waiting(self.pending, parts)
        seen = self.unseen & {r.range.position for r in reports}
        # from now on they count by their chunks (not for the rows before them)
        folded = replace(before, max_ts=_without(before.max_ts, seen)) if seen else before
        errors = [e for p in parts for e in p.errors]
        return TaskInput(
            task=self.task,
            batch_id=epoch,
            clock_before=before,
            clock_after=advance_clock(self.settings, folded, reports, now),
            rows=[p.rows for p in parts if p.rows is not None],
            errors=sorted(errors, key=lambda e: (e.topic or "", e.partition or 0, e.offset or 0)),
            ranges=_spans(reports),
        )

    def advance(self, inp: TaskInput) -> None:
        """The epoch ``inp`` committed: the clock is its clock after."""
        self.state = inp.clock_after
        self.unseen -= {r.position for r in inp.ranges}


def _spans_nothing(report: MapReport) -> bool:
    """A reader's word that its partition was read to its end (no offset, no record)."""
    return report.range.end == report.range.start and not report.records


def _still_waiting(pending: set[InputPosition], parts: list[Part]) -> set[InputPosition]:
    """``pending`` after ``parts``, in the order they came (one reader's reports of a
    partition come in its order): a chunk may leave records behind it, unless it is
    ``at_end``; a report spanning no offset says that none are left."""
    waiting = set(pending)
    for p in parts:
        pos = p.report.range.position
        if p.at_end or _spans_nothing(p.report):
            waiting.discard(pos)
        elif p.report.range.end > p.report.range.start:
            waiting.add(pos)
    return waiting


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


def merge_reports(a: MapReport | None, b: MapReport) -> MapReport:
    """Two consecutive reports of one partition as one (for the driver's report)."""
    if a is None:
        return b
    rejected = dict(a.rejected)
    for code, n in b.rejected.items():
        rejected[code] = rejected.get(code, 0) + n
    stamps = [t for t in (a.max_ts, b.max_ts) if t is not None]
    return MapReport(
        replace(a.range, end=b.range.end),
        a.records + b.records,
        max(stamps) if stamps else None,
        rejected,
        a.seconds + b.seconds,
        a.seconds_read + b.seconds_read,
    )

"""What crosses the keyed exchange between the map side and the state tasks.

The map side reads one input partition range of a micro-batch, decodes it and sends
every state task (a stable hash range of the operator's key) its rows, as Arrow IPC;
rejected records go to the task of their input partition's error lane. It sends every
task, and the driver, a :class:`MapReport` of the range: every task marks every range
of the batch handled (so replays are recognised per task; when state is keyed by input
partition, only the ranges of its own partitions) and folds the same job clock from
the reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from window_operator.kernel import ClockState, InputPosition
from window_operator.kernel.clock import PartitionActivity
from window_operator.results import ErrorRecord

__all__ = [
    "BatchStart",
    "InputPartition",
    "InputRange",
    "MapReport",
    "kafka_reads",
    "Rejected",
    "Rows",
    "TaskInput",
    "from_ipc",
    "to_ipc",
]


@dataclass(frozen=True, slots=True)
class InputPartition:
    """One partition of one input topic (``source``: the topic's index in the job)."""

    source: int
    topic: str
    partition: int

    @property
    def position(self) -> InputPosition:
        """Its input position key."""
        return InputPosition(self.source, self.partition)

    def span(self, start: int, end: int) -> InputRange:
        """Its offsets ``[start, end)``."""
        return InputRange(self.source, self.topic, self.partition, start, end)


@dataclass(frozen=True, slots=True)
class InputRange(InputPartition):
    """Offsets ``[start, end)`` of one input partition in one batch."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class BatchStart:
    """How an earlier micro-batch began: the clock it ran with, and where it started
    reading every input partition read before it (a partition it does not name was
    first read by this batch or later). A task whose state lost several batches (the
    broker lost their transactions) runs each one again as it first ran."""

    batch_id: int
    clock: ClockState
    starts: dict[InputPosition, int]


@dataclass(frozen=True, slots=True)
class MapReport:
    """What the map side did with one range (to every state task and the driver).

    ``max_ts`` is the largest event time of its records that reached the exchange
    (None: none did); ``rejected`` counts error records by code. ``seconds`` is the
    decode and routing time, ``seconds_read`` the Kafka read before it.
    """

    range: InputRange
    records: int
    max_ts: int | None
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    seconds_read: float = 0.0

    def activity(self) -> PartitionActivity:
        """The range as clock input."""
        return PartitionActivity(self.range.position, self.records, self.max_ts)


def kafka_reads(
    reports: Iterable[MapReport], topics: Sequence[str] | None = None
) -> list[MapReport]:
    """One report of each Kafka range read: both inputs of a self-join report the one
    range they read (the first is kept), and it was read once.

    ``topics``: the input topic of each source index (``source_topics``). Given, only
    the reports of the first input that reads a topic count: long-running workers cut
    the two inputs' ranges of a self-join's partition apart (two workers read it, or
    one whose inputs' positions differ), so the ranges do not pair up, but each input
    reads every record of the partition once, the first one too."""
    if topics is not None:
        first = {t: topics.index(t) for t in topics}
        reports = [m for m in reports if first.get(m.range.topic, m.range.source) == m.range.source]
    seen: set[tuple[str, int, int]] = set()
    out = []
    for m in reports:
        key = (m.range.topic, m.range.partition, m.range.start)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


@dataclass(frozen=True, slots=True)
class Rows:
    """Decoded rows of one source for one state task (an Arrow IPC stream)."""

    source: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Rejected:
    """Error records of a range for the state task of its error lane."""

    errors: tuple[ErrorRecord, ...]


@dataclass
class TaskInput:
    """A state task's share of one micro-batch (or of a timer-only pass).

    ``clock_before`` decides lateness and retention; ``clock_after`` (folded from every
    range's report) is the watermark the task fires with at the end of the batch.
    ``origin``: the job's first offset of every input partition it read before this
    batch (where a task that holds no position for one would have started; ``None``:
    not known, a job whose checkpoint predates the origin);
    ``history``: the batches before this one, oldest first (the most recent ones);
    ``final``: the run ends after this batch or pass, so batched LATE updates go out.
    """

    task: int
    batch_id: int
    clock_before: ClockState
    clock_after: ClockState
    rows: list[Rows] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    ranges: list[InputRange] = field(default_factory=list)
    origin: dict[InputPosition, int] | None = field(default_factory=dict)
    history: tuple[BatchStart, ...] = ()
    final: bool = False

    @property
    def now(self) -> int:
        """The wall clock the batch runs at."""
        return self.clock_before.now

    @property
    def label(self) -> str:
        """The batch as log and error texts name it (a timer pass has no batch id)."""
        return "a timer pass" if self.batch_id < 0 else f"batch {self.batch_id}"


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """An Arrow record batch as IPC stream bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def from_ipc(data: bytes) -> pa.RecordBatch:
    """Inverse of :func:`to_ipc`."""
    batches: Sequence[pa.RecordBatch] = list(pa.ipc.open_stream(data))
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]

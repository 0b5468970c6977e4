"""The job plan: everything the runtime needs to know of a job, whatever its operator.

The task runtime, the Spark map and reduce sides and ``simulate`` handle every operator
kind (time windows, sessions, count / offset windows, the join with two inputs) through
one :class:`JobPlan`: decode an input range, route rows to state tasks, carry them
across the exchange as Arrow, open the operator, encode its results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from stores.rocks import TaskStore
from window_operator.arrays import IntArray
from window_operator.codecs import CheckedResults
from window_operator.kernel import WindowOperator
from window_operator.results import ErrorRecord
from window_operator.runtime.inputs import InputRecords

__all__ = ["DecodedInput", "JobPlan", "KafkaRecord", "SourceSpec"]

B = TypeVar("B")
R = TypeVar("R")

KafkaRecord = tuple[bytes | None, bytes | None]
"""A Kafka record's key and value."""


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One input of a job: its index in the operator, its name and topic."""

    index: int
    name: str
    topic: str


@dataclass(slots=True)
class DecodedInput(Generic[B]):
    """An input range decoded: the rows that reach the operator and the rejected records.

    ``max_ts`` is the largest event time among the rows (None: no row).
    """

    batch: B
    errors: list[ErrorRecord] = field(default_factory=list)
    max_ts: int | None = None


class JobPlan(Protocol[B, R]):
    """A job's runtime plan (see module doc); ``B`` decoded rows, ``R`` result batches."""

    @property
    def job(self) -> str:
        """The job name."""
        ...

    @property
    def sources(self) -> tuple[SourceSpec, ...]:
        """The job's inputs, by index."""
        ...

    @property
    def partition_keyed(self) -> bool:
        """Whether state is keyed by input partition (offset windows, tuple sessions)."""
        ...

    def decode(self, source: int, records: InputRecords) -> DecodedInput[B]:
        """Decode one input partition's records; bad ones become error records."""
        ...

    def route(self, batch: B, n_tasks: int) -> IntArray:
        """The state task of every row."""
        ...

    def source_of(self, batch: B) -> int:
        """The input a batch of rows comes from."""
        ...

    def take(self, batch: B, idx: IntArray) -> B:
        """The rows ``idx`` of a batch."""
        ...

    def positions(self, batch: B) -> tuple[IntArray, IntArray]:
        """Every row's input partition and offset."""
        ...

    def to_arrow(self, batch: B, idx: IntArray) -> pa.RecordBatch:
        """The rows ``idx`` as Arrow (what crosses the exchange)."""
        ...

    def arrange(self, parts: dict[int, list[pa.RecordBatch]]) -> list[B]:
        """A state task's rows of a batch (Arrow parts per source), as the batches to add
        in order: each source's rows ordered by (partition, offset)."""
        ...

    def operator(self, store: TaskStore) -> WindowOperator[B, R, object]:
        """The job's operator over a task store (restored from it)."""
        ...

    def encode_results(self, results: R) -> CheckedResults[KafkaRecord]:
        """Results as Kafka records for the output topic, and the ``RESULT_ERROR``
        records of those that cannot be written."""
        ...

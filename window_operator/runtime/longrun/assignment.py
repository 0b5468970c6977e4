"""Who does what in a long-running job, and where its input starts.

A long-running job has ``W`` workers. Worker ``w`` owns the state tasks ``t`` with
``t % W == w`` and reads the input partitions dealt to it in turn (every source's
partitions in order); the assignment is fixed for a run of the job.

Where the input starts is decided by the state, not by a separate offset store: when
the workers start, each tells every other its address and the input positions its tasks
restored (:class:`WorkerStart`, through Spark's ``allGather``). Every input partition is
then read from the lowest position any task holds for it, plus one; a task that holds
none for it (no batch of it committed yet) counts the job's starting offset, resolved
once when the job first started and kept with its checkpoint. When state is keyed by
input partition, only the task that owns a partition counts. A task whose position is
further on recognises the records in between as replays, so nothing is applied twice
and nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition

__all__ = ["Assignment", "WorkerStart", "start_offsets"]


@dataclass(frozen=True)
class Assignment:
    """The state tasks and input partitions of every worker."""

    tasks: tuple[tuple[int, ...], ...]
    inputs: tuple[tuple[InputPartition, ...], ...]

    @property
    def workers(self) -> int:
        """How many workers the job runs."""
        return len(self.tasks)

    @classmethod
    def spread(cls, workers: int, tasks: int, partitions: Sequence[InputPartition]) -> Assignment:
        """Tasks and partitions dealt to ``workers`` in turn."""
        if workers < 1:
            raise ValueError(f"a long-running job needs a worker at least, not {workers}")
        return cls(
            tuple(tuple(range(w, tasks, workers)) for w in range(workers)),
            tuple(tuple(partitions[w::workers]) for w in range(workers)),
        )

    def worker_of(self, task: int) -> int:
        """The worker that owns a state task."""
        return task % self.workers

    @property
    def partitions(self) -> tuple[InputPartition, ...]:
        """Every input partition of the job."""
        return tuple(p for per_worker in self.inputs for p in per_worker)

    def partition_counts(self) -> dict[str, int]:
        """How many partitions of each input topic the workers read."""
        counts: dict[str, int] = {}
        for p in self.partitions:
            counts[p.topic] = max(counts.get(p.topic, 0), p.partition + 1)
        return counts


@dataclass(frozen=True)
class WorkerStart:
    """What a starting worker tells the others: where to reach it, and per state task
    of its own the input positions the task restored (last applied offsets)."""

    address: str
    positions: dict[int, dict[InputPosition, int]]

    def to_json(self) -> str:
        """The message for ``allGather``."""
        doc = {
            "address": self.address,
            "positions": {
                str(t): [[p.source, p.partition, o] for p, o in sorted(pos.items())]
                for t, pos in self.positions.items()
            },
        }
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, text: str) -> WorkerStart:
        """Inverse of :meth:`to_json`."""
        doc = orjson.loads(text)
        return cls(
            str(doc["address"]),
            {
                int(t): {InputPosition(int(s), int(p)): int(o) for s, p, o in pos}
                for t, pos in doc["positions"].items()
            },
        )


def start_offsets(
    partitions: Sequence[InputPartition],
    starts: Sequence[WorkerStart],
    first: Mapping[InputPosition, int],
    owner: Callable[[int], int] | None = None,
) -> dict[InputPosition, int]:
    """The offset every input partition is read from (see module doc).

    ``first`` is the job's starting offset of every partition (where a task that holds
    no position for it starts). ``owner`` gives the one task that keeps the position of
    a partition when state is keyed by partition (offset windows, tuple sessions); the
    other tasks never see the partition and do not count.
    """
    held_by = {t: pos for start in starts for t, pos in start.positions.items()}
    out: dict[InputPosition, int] = {}
    for p in partitions:
        key = p.position
        tasks = held_by.values() if owner is None else [held_by.get(owner(key.partition), {})]
        out[key] = min(
            (held[key] + 1 if key in held else first[key] for held in tasks),
            default=first[key],
        )
    return out

"""Input lag per partition: the end offset of each input partition minus the job's position.

The job's position in a partition is the end of the last range it processed (the next
offset it reads; of a self-join's two inputs, the slower one's); before its first batch
in this process, the one its Spark checkpoint recorded. End offsets are the last stable
offsets (``read_committed``, as the job reads), asked once per batch with one
ListOffsets request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from window_operator.kafka_admin import KafkaAdmin, KafkaAdminError
from window_operator.observe.checkpoint import TopicPartition, read_checkpoint
from window_operator.runtime.longrun.progress import InputEnd, slowest_positions

__all__ = ["InputLag", "LagReading"]

log = logging.getLogger(__name__)

#: How often the partition counts of the input topics are asked again (partitions added
#: show their lag, all of their records while the job has not read them, this soon).
METADATA_EVERY_S = 10.0


@dataclass(frozen=True)
class LagReading:
    """One partition's position, end offset and lag (``end - position``, never negative)."""

    topic: str
    partition: int
    position: int | None
    end: int

    @property
    def lag(self) -> int:
        """Records (offsets) not yet processed; all of them when nothing was yet."""
        return max(0, self.end - (self.position or 0))


class InputLag:
    """Positions and end offsets of a job's input partitions (driver side)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Iterable[str],
        *,
        checkpoint_dir: str | None = None,
        shape: Literal["micro_batch", "long_running"] | None = None,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topics = list(dict.fromkeys(topics))
        self.admin = KafkaAdmin(bootstrap_servers, client_config=client_config)
        self.positions: dict[TopicPartition, int] = {}
        #: per (source, topic, partition): how far each input read
        self._inputs: dict[InputEnd, int] = {}
        #: the Spark checkpoint of a job of ``shape`` (the positions it goes on from)
        self.checkpoint_dir, self.shape = checkpoint_dir, shape
        if checkpoint_dir is not None:
            self.positions.update(read_checkpoint(checkpoint_dir, shape).committed)
        self._partitions: list[TopicPartition] = []
        self._asked = 0.0

    def advance(self, ends: Iterable[tuple[InputEnd, int]]) -> None:
        """The job processed up to ``end`` (exclusive) of each
        ``((source, topic, partition), end)``."""
        inputs = self._inputs
        for at, end in ends:
            inputs[at] = max(end, inputs.get(at, 0))
        self.positions.update(slowest_positions(inputs))

    def _input_partitions(self) -> list[TopicPartition]:
        if not self._partitions or time.monotonic() - self._asked > METADATA_EVERY_S:
            counts = self.admin.partition_counts(self.topics)
            self._partitions = [(t, p) for t in self.topics for p in range(counts.get(t, 0))]
            self._asked = time.monotonic()
        return self._partitions

    def read(self) -> list[LagReading] | None:
        """Lag of every input partition now (``None``: the broker did not answer)."""
        try:
            ends = self.admin.list_offsets(self._input_partitions(), earliest=False)
        except KafkaAdminError as exc:
            log.warning("input lag not measured this batch: %s", exc)
            return None
        if self.checkpoint_dir is not None and not ends.keys() <= self.positions.keys():
            self._positions_from_checkpoint()
        return [
            LagReading(t, p, self.positions.get((t, p)), end)
            for (t, p), end in sorted(ends.items())
        ]

    def _positions_from_checkpoint(self) -> None:
        """Where the Spark checkpoint says the job is in the partitions no batch read
        yet: a job started at the latest offsets is there, not at the earliest (before,
        its lag counted every record before its start until the partition got one)."""
        assert self.checkpoint_dir is not None
        for tp, offset in read_checkpoint(self.checkpoint_dir, self.shape).committed.items():
            self.positions.setdefault(tp, offset)

"""Input records of one partition range, as read from Kafka."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InputRecords"]


@dataclass(frozen=True, slots=True)
class InputRecords:
    """One input partition's records of a micro-batch, columnar.

    ``timestamps`` are the Kafka record timestamps in epoch ms (``-1``: the record has
    none), the arrival times the far-future guard compares event times with; ``None``:
    not known, no record is checked.
    """

    topic: str
    partition: int
    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def timestamp(self, i: int) -> int | None:
        """Record ``i``'s Kafka timestamp (``None``: not known, or it has none)."""
        if self.timestamps is None or self.timestamps[i] < 0:
            return None
        return self.timestamps[i]

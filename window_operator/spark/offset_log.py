"""Spark's offset log in a checkpoint directory, read from its files.

``<checkpoint>/offsets/<batch>`` is written when Spark plans a micro-batch, before the
batch runs: a version line, a metadata line with ``batchTimestampMs``, then one line per
source with its end offsets (the ``wo_kafka`` source and Spark's own Kafka source both
write ``{"topic": {"partition": next_offset}}``, every partition the query knows). The
end offsets of batch ``b - 1`` are where batch ``b`` begins reading.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OffsetEntry", "TopicPartition", "numbered", "planned_starts", "read_offset_entry"]

TopicPartition = tuple[str, int]
_NUMBERED = re.compile(r"^\d+$")


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """One ``offsets/<batch>`` file: when the batch was planned and its end offsets."""

    batch_time_ms: int | None = None
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


def numbered(directory: Path) -> list[int]:
    """The batch ids of the files of a log directory (``offsets``, ``commits``), sorted."""
    if not directory.is_dir():
        return []
    return sorted(int(n) for n in os.listdir(directory) if _NUMBERED.match(n))


def read_offset_entry(path: Path) -> OffsetEntry:
    """The entry of one ``offsets/<batch>`` file."""
    lines = path.read_text().splitlines()
    meta = json.loads(lines[1]) if len(lines) > 1 else {}
    offsets: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        if not line.strip() or line.strip() == "-":
            continue
        doc = json.loads(line)
        if not isinstance(doc, dict):
            continue
        for topic, parts in doc.items():
            if isinstance(parts, dict):
                for p, off in parts.items():
                    offsets[(str(topic), int(p))] = int(off)
    stamp = meta.get("batchTimestampMs")
    return OffsetEntry(int(stamp) if stamp is not None else None, offsets)


def planned_starts(checkpoint_dir: str | Path, batch_id: int) -> dict[TopicPartition, int] | None:
    """Where batch ``batch_id`` begins reading every input partition the query knew when
    it planned the batch before (its end offsets); for batch 0, where batch 0 ends (no
    partition is read before it). None: not logged (no batch planned yet, or the entry
    is gone)."""
    directory = Path(checkpoint_dir) / "offsets"
    path = directory / str(batch_id - 1 if batch_id > 0 else 0)
    try:
        return read_offset_entry(path).offsets
    except (FileNotFoundError, ValueError):  # not planned yet, or being written
        return None

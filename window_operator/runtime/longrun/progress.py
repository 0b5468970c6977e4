"""The driver's record of a long-running job's progress, in its checkpoint directory.

A long-running job has no Spark offset log: where it is in its input lives in its state
tasks' checkpoints. So that ``status`` and the lag gauge can tell without the job
running, the driver keeps one small JSON file up to date with every epoch a worker
reports: the epochs so far, the next offset read per input partition, the latest event
time per input partition, the watermark and the wall clock of the newest report.

The next offset is kept per input and partition, and a topic partition's position is
the lowest of the inputs that read it: the two inputs of a self-join read one topic,
each at its own pace (on two workers, one can fall behind), and the topic's records
after the slower one's position are still to be read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from window_operator.files import write_atomically
from window_operator.kernel import ClockState, InputPosition

__all__ = [
    "PROGRESS_FILE",
    "InputEnd",
    "Progress",
    "read_progress",
    "record_progress",
    "slowest_positions",
]

#: The file's name in the checkpoint directory.
PROGRESS_FILE = "window-operator-progress.json"


#: ``(source, topic, partition)``: one input's partition (a self-join's two inputs share
#: the topic and partition)
InputEnd = tuple[int, str, int]


def slowest_positions(by_input: Mapping[InputEnd, int]) -> dict[tuple[str, int], int]:
    """Each topic partition's position: the lowest of the inputs that read it."""
    out: dict[tuple[str, int], int] = {}
    for (_, topic, partition), offset in by_input.items():
        tp = (topic, partition)
        out[tp] = min(offset, out.get(tp, offset))
    return out


@dataclass(frozen=True)
class Progress:
    """What the file holds (see module doc)."""

    epochs: int = 0
    #: per topic partition: the lowest of ``inputs`` (a file written before them: the
    #: highest of the inputs)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    #: per input partition: the next offset that input reads
    inputs: dict[InputEnd, int] = field(default_factory=dict)
    #: per (source index, partition), as the job clock counts them
    max_ts: dict[InputPosition, int] = field(default_factory=dict)
    watermark: int | None = None
    last_activity_ms: int | None = None


def read_progress(directory: Path) -> Progress | None:
    """The progress recorded in ``directory`` (None: no long-running job ran there)."""
    path = directory / PROGRESS_FILE
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    return Progress(
        epochs=int(doc.get("epochs", 0)),
        positions={
            (str(t), int(p)): int(o)
            for t, parts in doc.get("positions", {}).items()
            for p, o in parts.items()
        },
        inputs={(int(s), str(t), int(p)): int(o) for s, t, p, o in doc.get("inputs", [])},
        max_ts={
            InputPosition(int(source), int(p)): int(t)
            for source, parts in doc.get("max_ts", {}).items()
            for p, t in parts.items()
        },
        watermark=doc.get("watermark"),
        last_activity_ms=doc.get("last_activity_ms"),
    )


def record_progress(
    directory: Path, ends: Iterable[tuple[InputEnd, int]], clock: ClockState
) -> Progress:
    """One more epoch that read up to ``end`` of each ``((source, topic, partition), end)``
    and ended at ``clock`` (a worker's: the partitions it reads); the new progress."""
    before = read_progress(directory) or Progress()
    inputs = dict(before.inputs)
    for at, end in ends:
        inputs[at] = max(end, inputs.get(at, 0))
    positions = {**before.positions, **slowest_positions(inputs)}
    max_ts = dict(before.max_ts)
    for pos, ts in clock.max_ts.items():
        max_ts[pos] = max(ts, max_ts.get(pos, ts))
    now = int(time.time() * 1000)
    after = Progress(before.epochs + 1, positions, inputs, max_ts, clock.watermark, now)
    by_source: dict[str, dict[str, int]] = {}
    for pos, ts in sorted(max_ts.items()):
        by_source.setdefault(str(pos.source), {})[str(pos.partition)] = ts
    doc = {
        "epochs": after.epochs,
        "positions": _nested(after.positions),
        "inputs": [[*at, offset] for at, offset in sorted(inputs.items())],
        "max_ts": by_source,
        "watermark": after.watermark,
        "last_activity_ms": after.last_activity_ms,
    }
    write_atomically(directory / PROGRESS_FILE, json.dumps(doc, sort_keys=True).encode())
    return after


def _nested(positions: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out

"""What a job's Spark checkpoint says, read from its files (the job need not run).

Spark's checkpoint directory holds ``offsets/<batch>`` (written when a micro-batch is
planned: a version line, a metadata line with ``batchTimestampMs``, then one line per
source with its end offsets; the ``wo_kafka`` source and Spark's own Kafka source both
write ``{"topic": {"partition": next_offset}}``) and ``commits/<batch>`` (written once
the batch's sink finished). The driver adds ``window-operator-clock/<batch>.json``, the
job clock each batch starts from (see :mod:`window_operator.spark.clock_log`). A
long-running job keeps its progress in one file of its own instead (see
:mod:`window_operator.runtime.longrun.progress`): its epochs count as batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from window_operator.kernel import ClockState
from window_operator.runtime.longrun.progress import read_progress
from window_operator.spark.clock_log import CLOCK_DIR, ClockLog
from window_operator.spark.offset_log import TopicPartition, numbered, read_offset_entry

__all__ = ["CheckpointState", "TopicPartition", "read_checkpoint"]


@dataclass(frozen=True)
class CheckpointState:
    """A job's progress as its checkpoint records it.

    ``committed`` holds the next offset to read per input partition after the newest
    committed batch ``last_committed`` (``None``: no batch committed yet);
    ``last_planned`` is the newest batch Spark planned (it may still run, or have
    failed). ``batch_time_ms`` is when Spark planned the last committed batch and
    ``committed_ms`` when it committed (for long-running workers, their last epoch).
    ``clock`` is the newest job clock entry and ``last_activity_ms`` the wall clock of
    the newest batch or timer pass.
    """

    directory: Path
    last_planned: int | None = None
    last_committed: int | None = None
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    batch_time_ms: int | None = None
    committed_ms: int | None = None
    clock: ClockState | None = None
    last_activity_ms: int | None = None
    #: what a step of the job is called: a micro-batch, or an epoch of long-running workers
    unit: str = "batch"

    @property
    def exists(self) -> bool:
        """Whether the job ever planned a micro-batch here."""
        return self.last_planned is not None


def _newest_clock(directory: Path) -> ClockState | None:
    newest = ClockLog(directory).newest()
    return None if newest is None else newest[1]


def read_checkpoint(
    directory: str | Path, shape: Literal["micro_batch", "long_running"] | None = None
) -> CheckpointState:
    """The state of the checkpoint at ``directory`` (empty when the job never ran): of
    the shape that ran last, or of ``shape`` (where a job of that shape goes on from:
    after a switch of shape, micro-batches go on from their own older offsets)."""
    root = Path(directory)
    if shape == "micro_batch":
        return _micro_batches(root)
    if shape == "long_running":
        return _long_running(root)
    micro, workers = _micro_batches(root), _long_running(root)
    # a job may have run in both shapes (``spark.mode`` changed): the newer one is where
    # it is now
    if not workers.exists or (
        micro.exists and (micro.last_activity_ms or 0) >= (workers.last_activity_ms or 0)
    ):
        return micro
    return workers


def _micro_batches(root: Path) -> CheckpointState:
    """What Spark's offset and commit logs and the driver's clock log say."""
    planned = numbered(root / "offsets")
    committed = numbered(root / "commits")
    if not planned:
        return CheckpointState(root)
    last_committed = committed[-1] if committed else None
    offsets: dict[TopicPartition, int] = {}
    stamp: int | None = None
    if last_committed is not None and (root / "offsets" / str(last_committed)).is_file():
        entry = read_offset_entry(root / "offsets" / str(last_committed))
        stamp, offsets = entry.batch_time_ms, entry.offsets
    clock = _newest_clock(root / CLOCK_DIR)
    activity = [t for t in (stamp, clock.now if clock is not None else None) if t]
    committed_ms = None
    if last_committed is not None:
        committed_ms = int((root / "commits" / str(last_committed)).stat().st_mtime * 1000)
        activity.append(committed_ms)
    return CheckpointState(
        directory=root,
        last_planned=planned[-1],
        last_committed=last_committed,
        committed=offsets,
        batch_time_ms=stamp,
        committed_ms=committed_ms,
        clock=clock,
        last_activity_ms=max(activity) if activity else None,
    )


def _long_running(root: Path) -> CheckpointState:
    """A long-running job's progress as a checkpoint state (empty when there is none)."""
    progress = read_progress(root)
    if progress is None or progress.epochs == 0:
        return CheckpointState(root)
    clock = None
    if progress.watermark is not None:
        clock = ClockState(max_ts=dict(progress.max_ts), watermark=progress.watermark)
    return CheckpointState(
        directory=root,
        last_planned=progress.epochs - 1,
        last_committed=progress.epochs - 1,
        committed=progress.positions,
        committed_ms=progress.last_activity_ms,
        clock=clock,
        last_activity_ms=progress.last_activity_ms,
        unit="epoch",
    )

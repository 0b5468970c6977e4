"""What the driver of a long-running job works out before its workers start.

* the input partitions of every source (their order decides which worker reads which);
* the job's starting offset of every partition (:mod:`~window_operator.runtime.starts`):
  a restart reads where the state says, and only a state task that never committed
  needs the starting offset, which must then be the same as the first time;
* for ``available_now``, the end offsets (the last stable offsets now).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path

from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import InputPosition
from window_operator.runtime.longrun.assignment import Assignment
from window_operator.runtime.longrun.worker import DEFAULT_EPOCH_MS, WorkerSpec
from window_operator.runtime.settings import TaskSettings
from window_operator.runtime.starts import (
    START_FILE,
    StartingOffsetsError,
    first_offsets,
    input_partitions,
    partition_offsets,
)

__all__ = ["START_FILE", "StartingOffsetsError", "input_partitions", "worker_spec"]


def worker_spec(
    settings: TaskSettings,
    workers: int,
    *,
    checkpoint_dir: Path,
    starting_offsets: str = "earliest",
    available_now: bool = False,
    control: str | None = None,
    origin: Mapping[InputPosition, int] | None = None,
) -> WorkerSpec:
    """Everything the workers of a run need (see module doc); a fresh token per run.

    ``origin``: the job's first offsets as micro-batches recorded them (a job that ran
    as micro-batches before it kept a start file: :func:`first_offsets`)."""
    admin = KafkaAdmin(settings.bootstrap_servers, client_config=settings.config.kafka.consumer)
    partitions = input_partitions(settings, admin)
    first = first_offsets(admin, partitions, checkpoint_dir, starting_offsets, origin=origin)
    latest = partition_offsets(admin, partitions, earliest=False)
    sc = settings.config.spark
    running = min(workers, settings.tasks)  # a worker runs at least one state task
    per_worker = None
    if sc.max_offsets_per_trigger is not None:
        per_worker = max(1, sc.max_offsets_per_trigger // max(1, running))
    return WorkerSpec(
        settings=settings,
        assignment=Assignment.spread(running, settings.tasks, partitions),
        token=secrets.token_hex(16),
        first=first,
        latest=latest,
        ends=latest if available_now else None,
        control=control,
        epoch_ms=sc.trigger_ms or DEFAULT_EPOCH_MS,
        epoch_records=per_worker,
    )

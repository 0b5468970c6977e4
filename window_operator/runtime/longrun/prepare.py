"""What the driver of a long-running job works out before its workers start.

* the input partitions of every source (their order decides which worker reads which);
* the job's starting offset of every partition, resolved once (``earliest``, ``latest``
  or Spark-style JSON) when the job first starts, and kept in a file in its checkpoint
  directory: a restart reads where the state says, and only a state task that never
  committed needs the starting offset, which must then be the same as the first time.
  A partition added to an input topic later starts at its earliest offset;
* for ``available_now``, the end offsets (the last stable offsets now).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path

from window_operator.errors import WindowOperatorError
from window_operator.files import write_atomically
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition
from window_operator.runtime.longrun.assignment import Assignment
from window_operator.runtime.longrun.worker import DEFAULT_EPOCH_MS, WorkerSpec
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = ["START_FILE", "StartingOffsetsError", "input_partitions", "worker_spec"]

#: The file in the checkpoint directory that keeps the resolved starting offsets.
START_FILE = "window-operator-start.json"
_EARLIEST, _LATEST = -2, -1


class StartingOffsetsError(WindowOperatorError, ValueError):
    """``--starting-offsets`` is not earliest, latest or offsets JSON of the inputs."""


def input_partitions(settings: TaskSettings, admin: KafkaAdmin) -> list[InputPartition]:
    """Every partition of every input of the job, by source and partition."""
    out: list[InputPartition] = []
    for source in plan_for(settings).sources:
        count = admin.require_topic(source.topic, hint="create it first", kind="input topic")
        out += [InputPartition(source.index, source.topic, p) for p in range(count)]
    return out


def worker_spec(
    settings: TaskSettings,
    workers: int,
    *,
    checkpoint_dir: Path,
    starting_offsets: str = "earliest",
    available_now: bool = False,
    control: str | None = None,
) -> WorkerSpec:
    """Everything the workers of a run need (see module doc); a fresh token per run."""
    admin = KafkaAdmin(settings.bootstrap_servers, client_config=settings.config.kafka.consumer)
    partitions = input_partitions(settings, admin)
    first = _starting_offsets(admin, partitions, checkpoint_dir, starting_offsets)
    latest = _offsets(admin, partitions, earliest=False)
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


def _offsets(
    admin: KafkaAdmin, partitions: list[InputPartition], *, earliest: bool
) -> dict[InputPosition, int]:
    found = admin.list_offsets([(p.topic, p.partition) for p in partitions], earliest=earliest)
    return {p.position: found[(p.topic, p.partition)] for p in partitions}


def _starting_offsets(
    admin: KafkaAdmin, partitions: list[InputPartition], checkpoint_dir: Path, starting: str
) -> dict[InputPosition, int]:
    path = checkpoint_dir / START_FILE
    kept: dict[str, dict[str, int]] = {}
    if path.exists():
        kept = json.loads(path.read_text())
    # ``starting`` is for the job's first start; a partition added to an input topic
    # after that starts at its earliest offset (as in Spark's Kafka source)
    wanted = _parse(starting, partitions)
    if kept:
        wanted = {}
    missing = [p for p in partitions if str(p.partition) not in kept.get(p.topic, {})]
    if missing:
        earliest = _offsets(admin, missing, earliest=True)
        latest = _offsets(admin, missing, earliest=False)
        for p in missing:
            want = wanted.get((p.topic, p.partition), _EARLIEST)
            at = earliest[p.position] if want == _EARLIEST else latest[p.position]
            kept.setdefault(p.topic, {})[str(p.partition)] = at if want < 0 else want
        write_atomically(path, json.dumps(kept, sort_keys=True).encode())
    return {p.position: int(kept[p.topic][str(p.partition)]) for p in partitions}


def _parse(starting: str, partitions: list[InputPartition]) -> Mapping[tuple[str, int], int]:
    """``earliest`` / ``latest`` / ``{"topic": {"0": offset}}`` per (topic, partition)."""
    if starting in ("earliest", "latest"):
        at = _EARLIEST if starting == "earliest" else _LATEST
        return {(p.topic, p.partition): at for p in partitions}
    try:
        doc = json.loads(starting)
        return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise StartingOffsetsError(
            f"starting offsets {starting!r}: expected earliest, latest or JSON such as "
            '{"topic": {"0": 42}} (-2: earliest, -1: latest)'
        ) from exc

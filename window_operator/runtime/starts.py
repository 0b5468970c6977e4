"""The job's starting offsets: resolved once, at the job's first start, whatever its shape.

``--starting-offsets`` (``earliest``, ``latest`` or Spark-style JSON) says where a job
begins the first time it runs. It is resolved against the partitions' offsets then and
kept in a file in the checkpoint directory (:data:`START_FILE`); every later start, in
either shape (micro-batches or long-running workers), begins from the kept offsets: a
job started at ``latest`` and switched to the other shape still skips what was there
before its first start, and still reads what came while it was stopped. A partition
added to an input topic later starts at its earliest offset (as in Spark's Kafka source).

A job that ran as micro-batches before the file was kept has its first offsets in its
clock log (the origin): they seed the file.

Beside it the input topics' Kafka ids are kept (:data:`TOPIC_IDS_FILE`): a topic deleted
and created again has a new id, and the job refuses to start over it, where it would
read the new topic from its old positions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from window_operator.errors import AFRESH, JobSetupError, StartingOffsetsError
from window_operator.files import write_atomically
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = [
    "START_FILE",
    "TOPIC_IDS_FILE",
    "InputRecreatedError",
    "InputTopicChangedError",
    "StartingOffsetsError",
    "check_input_topics",
    "recreated_topics",
    "first_offsets",
    "input_partitions",
    "offsets_json",
    "partition_offsets",
]

#: The file in the checkpoint directory that keeps the resolved starting offsets.
START_FILE = "window-operator-start.json"
#: The file in the checkpoint directory that keeps the input topics' Kafka ids.
TOPIC_IDS_FILE = "window-operator-topic-ids.json"
_EARLIEST, _LATEST = -2, -1


class InputRecreatedError(JobSetupError):
    """An input topic was deleted and created again since the job last ran: the job's
    positions (its checkpoint, its stores) are offsets of the old topic's records."""


class InputTopicChangedError(JobSetupError):
    """The job's config names an input topic other than the one its positions are of
    (``input.topic`` changed between runs): its state and checkpoint hold offsets of the
    old topic's records, and the new topic's records below them would be taken for
    replays and skipped."""


def _check_same_topics(kept: Mapping[str, object], topics: list[str]) -> None:
    """Raise :class:`InputTopicChangedError` when the start file (``kept``) keeps the
    starts of other topics than ``topics`` (the job's inputs now)."""
    new = sorted(set(topics) - set(kept))
    if kept and new:
        was = ", ".join(repr(t) for t in sorted(set(kept) - set(topics))) or "its other input"
        names = ", ".join(repr(t) for t in new)
        why = "its state and checkpoint hold offsets of that topic's records"
        raise InputTopicChangedError(
            f"input topic {names} is not the one this job read before ({was}): {why}, so "
            "the new topic's records below them would be skipped as replays. Go back to "
            f"the topic it read, or start the job afresh on the new one ({AFRESH})"
        )


def _kept_ids(path: Path) -> dict[str, str]:
    """The topic ids kept in ``path`` (none: no file, or one that does not read, which
    the next start writes again)."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(t): str(i) for t, i in kept.items()} if isinstance(kept, dict) else {}


def recreated_topics(checkpoint_dir: Path, ids: Mapping[str, str]) -> list[str]:
    """The topics of ``ids`` whose Kafka id is not the one the job kept (see
    :func:`check_input_topics`), sorted."""
    return _changed(_kept_ids(checkpoint_dir / TOPIC_IDS_FILE), ids)


def _changed(kept: Mapping[str, str], ids: Mapping[str, str]) -> list[str]:
    return sorted(t for t, now in ids.items() if kept.get(t, now) != now)


def check_input_topics(checkpoint_dir: Path, ids: Mapping[str, str]) -> None:
    """Compare the input topics' Kafka ids now (``ids``, from
    :meth:`~window_operator.kafka_admin.KafkaAdmin.topic_ids`) with those the job kept,
    and keep the new ones. Raises :class:`InputRecreatedError` for a topic whose id
    changed: its new records from offset 0 up to the old positions would be skipped
    without a word, and its partitions gone hold the watermark back."""
    path = checkpoint_dir / TOPIC_IDS_FILE
    kept = _kept_ids(path)
    if changed := _changed(kept, ids):
        names = ", ".join(repr(t) for t in changed)
        raise InputRecreatedError(
            f"input topic {names} was deleted and created again since the job last ran "
            f"(its Kafka topic id changed): the job's positions are offsets of the old "
            f"topic's records, so the new ones below them would be skipped. Start the job "
            f"afresh ({AFRESH}); "
            f"if the new topic holds the old one's records at the same offsets (a cluster "
            f"migrated with its offsets), delete {path} to take it as it is"
        )
    if {**kept, **ids} != kept:
        write_atomically(path, json.dumps({**kept, **ids}, sort_keys=True).encode())


def input_partitions(settings: TaskSettings, admin: KafkaAdmin) -> list[InputPartition]:
    """Every partition of every input of the job, by source and partition."""
    out: list[InputPartition] = []
    for source in plan_for(settings).sources:
        count = admin.require_topic(source.topic, hint="create it first", kind="input topic")
        out += [InputPartition(source.index, source.topic, p) for p in range(count)]
    return out


def first_offsets(
    admin: KafkaAdmin,
    partitions: list[InputPartition],
    checkpoint_dir: Path,
    starting: str,
    *,
    origin: Mapping[InputPosition, int] | None = None,
) -> dict[InputPosition, int]:
    """The job's first offset of every partition of ``partitions`` (see module doc):
    kept ones from the start file (or ``origin``), the others resolved now. First the
    input topics are checked to be those the job's positions are of
    (:func:`check_input_topics`)."""
    check_input_topics(checkpoint_dir, admin.topic_ids(sorted({p.topic for p in partitions})))
    path = checkpoint_dir / START_FILE
    kept: dict[str, dict[str, int]] = {}
    if path.exists():
        kept = json.loads(path.read_text())
        _check_same_topics(kept, sorted({p.topic for p in partitions}))
    elif origin:
        for p in partitions:
            if p.position in origin:
                kept.setdefault(p.topic, {})[str(p.partition)] = origin[p.position]
    # ``starting`` is for the job's first start; a partition added to an input topic
    # after that starts at its earliest offset (as in Spark's Kafka source)
    wanted = _parse(starting, partitions)  # checked at every start, used at the first
    if kept:
        wanted = {}
    unknown = sorted(set(wanted) - {(p.topic, p.partition) for p in partitions})
    if unknown:
        names = ", ".join(f"{t}[{p}]" for t, p in unknown)
        raise StartingOffsetsError(f"starting offsets name partitions that do not exist: {names}")
    missing = [p for p in partitions if str(p.partition) not in kept.get(p.topic, {})]
    if missing or not path.exists():
        earliest = partition_offsets(admin, missing, earliest=True)
        latest = partition_offsets(admin, missing, earliest=False)
        for p in missing:
            want = wanted.get((p.topic, p.partition), _EARLIEST)
            at = earliest[p.position] if want == _EARLIEST else latest[p.position]
            if want > latest[p.position]:
                raise StartingOffsetsError(
                    f"starting offsets give {p.topic}[{p.partition}] offset {want}, past the "
                    f"partition's end at {latest[p.position]}"
                )
            kept.setdefault(p.topic, {})[str(p.partition)] = at if want < 0 else want
        write_atomically(path, json.dumps(kept, sort_keys=True).encode())
    return {p.position: int(kept[p.topic][str(p.partition)]) for p in partitions}


def offsets_json(
    partitions: list[InputPartition], first: Mapping[InputPosition, int]
) -> dict[str, dict[str, int]]:
    """``first`` as Spark's ``startingOffsets`` JSON (``{"topic": {"0": 42}}``)."""
    out: dict[str, dict[str, int]] = {}
    for p in partitions:
        out.setdefault(p.topic, {})[str(p.partition)] = first[p.position]
    return out


def partition_offsets(
    admin: KafkaAdmin, partitions: list[InputPartition], *, earliest: bool
) -> dict[InputPosition, int]:
    """The earliest (or latest) offset of each of ``partitions``."""
    if not partitions:
        return {}
    found = admin.list_offsets([(p.topic, p.partition) for p in partitions], earliest=earliest)
    return {p.position: found[(p.topic, p.partition)] for p in partitions}


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

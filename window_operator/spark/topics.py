"""The topics of a job, and the number of its state tasks.

The input topics must exist (the job does not guess their partitioning). The changelog
topic has one partition per state task: when it exists its partition count *is* the
number of tasks (state is partitioned by a hash of the key modulo that number, so it
cannot change while the state lives); when it does not, ``state.tasks`` (default: the
largest input partition count) decides and the changelog is created with that many
partitions, as are the output and error topics.
"""

from __future__ import annotations

import logging

from stores.changelog import changelog_topic
from window_operator.config import JobConfig, JoinJobConfig, OffsetsWindow
from window_operator.errors import WindowOperatorError
from window_operator.kafka_admin import KafkaAdmin, TopicSpec
from window_operator.observe.logs import kafka_logger
from window_operator.runtime.commit import CHANGELOG_DELETE_RETENTION_MS
from window_operator.runtime.settings import MAX_STATE_RECORD_BYTES

__all__ = [
    "TaskCountError",
    "TransactionsUnsupportedError",
    "check_grown_inputs",
    "input_topics",
    "keeps_partitions",
    "prepare_topics",
    "source_topics",
]

AnyJobConfig = JobConfig | JoinJobConfig
log = logging.getLogger(__name__)

#: What to do about a missing input topic (the job does not create it).
_INPUT_TOPIC_HINT = (
    "create it, or produce to it first "
    "(`window-operator produce --config JOB --input FILE` creates it and loads a JSONL file)"
)
_KEEP_FOREVER = {"retention.ms": "-1"}
_COMPACTED = {"cleanup.policy": "compact", "retention.ms": "-1"}
#: How often the changelog starts a new segment (which compaction may then clean).
CHANGELOG_SEGMENT_MS = 3_600_000
#: The changelog takes records of up to 32 MiB: a state value longer than 512 KiB is
#: logged in parts (:mod:`stores.changelog.parts`), within Kafka's default 1 MB, but
#: changelogs written before that hold such values whole, and a restore reads them
#: (:data:`~window_operator.runtime.settings.MAX_STATE_RECORD_BYTES`).
_CHANGELOG = {
    **_COMPACTED,
    "max.message.bytes": str(MAX_STATE_RECORD_BYTES),
    # how long a delete stays readable: a store last committed longer ago than half of
    # it is rebuilt rather than caught up (window_operator.runtime.commit)
    "delete.retention.ms": str(CHANGELOG_DELETE_RETENTION_MS),
    # Kafka compacts closed segments only: with its defaults (a new segment every 7 days
    # or 1 GiB) a changelog holds every record written for a week, and a restore reads
    # them all, however few keys are live. A segment an hour bounds what is not yet
    # compacted to an hour of writes (and deletes to delete.retention.ms)
    "segment.ms": str(CHANGELOG_SEGMENT_MS),
}


class TaskCountError(WindowOperatorError):
    """``state.tasks`` disagrees with the partition count of the existing changelog."""


class TransactionsUnsupportedError(WindowOperatorError):
    """The broker does not support transactions, which exactly-once needs."""


def input_topics(config: AnyJobConfig) -> list[str]:
    """The job's input topics (two for a join, possibly the same)."""
    return list(dict.fromkeys(source_topics(config)))


def source_topics(config: AnyJobConfig) -> list[str]:
    """The input topic of each source index, as clocks and positions number the inputs
    (a join's left, then its right: one topic twice in a self-join)."""
    return [topic for _, topic in config.input_topic_fields()]


def prepare_topics(config: AnyJobConfig, bootstrap: str, *, timeout_s: float = 30.0) -> int:
    """Check the inputs, create the job's topics if needed; the number of state tasks.

    Raises ``BrokerUnreachableError`` / ``TopicNotFoundError`` (see :mod:`kafka_admin`),
    :class:`TaskCountError` and, under exactly-once, :class:`TransactionsUnsupportedError`.
    """
    admin = KafkaAdmin(bootstrap, request_timeout_s=timeout_s)
    widest = max(
        admin.require_topic(t, hint=_INPUT_TOPIC_HINT, kind="input topic")
        for t in input_topics(config)
    )
    changelog = changelog_topic(config.job)
    existing = admin.partition_count(changelog)
    wanted = config.state.tasks
    if existing is not None and wanted is not None and wanted != existing:
        raise TaskCountError(
            f"state.tasks is {wanted}, but the changelog topic {changelog!r} has {existing} "
            f"partitions (one per state task): the number of tasks is fixed when a job first "
            f"starts. Use state.tasks: {existing}, or start the job afresh (delete the "
            "changelog topic, the Spark checkpoint and the state directory)"
        )
    tasks = existing or wanted or widest
    if keeps_partitions(config):
        _check_offsets_tasks(tasks, widest, existing, changelog)
    rf = config.kafka.replication_factor or -1  # -1: the broker's default
    created = admin.create_topics(
        [
            TopicSpec(changelog, tasks, _CHANGELOG, rf),
            TopicSpec(config.output.topic, tasks, _COMPACTED, rf),
            TopicSpec(config.output.errors_topic, tasks, _KEEP_FOREVER, rf),
        ]
    )
    if existing is not None:
        for topic in sorted(set(created) - {changelog}):  # the job ran: it had made them
            log.warning(
                "topic %r of job %r did not exist and was created (a topic the config "
                "names anew, or one deleted since the job last ran): it holds none of "
                "what the job wrote before; the job goes on from its state",
                topic,
                config.job,
            )
    if config.processing.exactly_once:
        _check_transactions(bootstrap, config.job, timeout_s)
    return tasks


def keeps_partitions(config: AnyJobConfig) -> bool:
    """Whether the job's state keeps one input partition per state task (offsets
    windows), so that inputs growing past its tasks stop it."""
    return isinstance(config, JobConfig) and isinstance(config.window, OffsetsWindow)


def check_grown_inputs(config: AnyJobConfig, tasks: int, partitions: int) -> None:
    """Raise :class:`TaskCountError` when a running job's inputs grew to ``partitions``,
    more than its state can take (offsets windows: one per state task); the driver checks
    before a task gets records of a partition it cannot hold."""
    if keeps_partitions(config):
        _check_offsets_tasks(tasks, partitions, tasks, changelog_topic(config.job))


def _check_offsets_tasks(tasks: int, widest: int, existing: int | None, changelog: str) -> None:
    """Offsets windows keep one input partition per state task."""
    if tasks >= widest:
        return
    if existing is not None:
        raise TaskCountError(
            f"offsets windows keep one input partition per state task, but the input has "
            f"{widest} partitions now and the changelog topic {changelog!r} fixes the job "
            f"at {existing} tasks: its state cannot take the new partitions. Start the "
            "job afresh (delete the changelog topic, the Spark checkpoint and the state "
            f"directory) with state.tasks at least {widest}, or left out"
        )
    raise TaskCountError(
        f"offsets windows keep one input partition per state task, but the job has "
        f"{tasks} tasks for {widest} input partitions: set state.tasks to at least "
        f"{widest} (or leave it out)"
    )


#: Brokers this process found to support transactions (a probe costs a round trip or two).
_TRANSACTIONS_OK: set[str] = set()


def _check_transactions(bootstrap: str, job: str, timeout_s: float) -> None:
    from confluent_kafka import KafkaException, Producer

    if bootstrap in _TRANSACTIONS_OK:
        return

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{job}-probe",
            "linger.ms": 0,
            "logger": kafka_logger(),
        }
    )
    try:
        producer.init_transactions(min(timeout_s, 15.0))
    except KafkaException as exc:
        raise TransactionsUnsupportedError(
            f"processing.guarantee is exactly_once, but the broker at {bootstrap} does not "
            f"support transactions ({exc.args[0].str()}): use a broker that does, or set "
            "processing.guarantee: at_least_once"
        ) from None
    _TRANSACTIONS_OK.add(bootstrap)

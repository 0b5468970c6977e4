"""What a state task needs besides its input: picklable, shipped to the executors."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stores.changelog import changelog_topic
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.errors import InvalidArgumentError
from window_operator.observe.logs import kafka_logger

__all__ = [
    "MAX_STATE_RECORD_BYTES",
    "STATE_DIR_ENV",
    "KafkaConfig",
    "TaskSettings",
    "task_state_dir",
]

#: The largest changelog record (a state value) a job writes and restores: the changelog
#: topic is created with this ``max.message.bytes``, under librdkafka's consumer
#: ``fetch.max.bytes`` (50 MB), which a restore must be able to take in one record.
MAX_STATE_RECORD_BYTES = 32 * 1024 * 1024

#: Overrides ``state.dir`` on a host (set it in a Spark worker's environment).
STATE_DIR_ENV = "WINDOW_OPERATOR_STATE_DIR"

AnyJobConfig = JobConfig | JoinJobConfig

KafkaConfig = Mapping[str, object]
"""librdkafka settings: strings, numbers, booleans, and a logger or callbacks."""


def task_state_dir(state_dir: Path, job: str, task: int) -> Path:
    """Where a task's RocksDB lives (``task``: an integer >= 0, else
    :class:`InvalidArgumentError`: ``-1`` made a ``task--1``)."""
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise InvalidArgumentError(f"task must be an integer >= 0, got {task!r}")
    return Path(state_dir) / job / f"task-{task}"


@dataclass(frozen=True)
class TaskSettings:
    """Everything a task needs besides its input (see module doc).

    ``tasks`` is the number of state tasks of the job (the changelog's partition count).
    """

    config: AnyJobConfig
    bootstrap_servers: str
    state_dir: str
    tasks: int = 1
    producer: KafkaConfig = field(default_factory=dict)
    consumer: KafkaConfig = field(default_factory=dict)

    @property
    def job(self) -> str:
        """The job name."""
        return self.config.job

    @property
    def state_dir_path(self) -> Path:
        """The state directory as a path."""
        return Path(self.state_dir)

    @property
    def changelog_topic(self) -> str:
        """This job's changelog topic."""
        return changelog_topic(self.config.job)

    @property
    def exactly_once(self) -> bool:
        """Whether a task's batch goes out in one Kafka transaction."""
        return self.config.processing.exactly_once

    @property
    def broker_timeout_s(self) -> float:
        """How long a task keeps retrying while the broker is away."""
        return self.config.processing.broker_timeout / 1000.0

    def task_path(self, task: int) -> Path:
        """The task's RocksDB directory on this host."""
        # A host may keep its stores elsewhere (each Spark worker its own local disk).
        root = os.environ.get(STATE_DIR_ENV) or self.state_dir
        return task_state_dir(Path(root), self.config.job, task)

    def producer_config(self) -> dict[str, object]:
        """librdkafka producer settings (idempotent, all acks, batched; records up to
        the changelog's bound, the outputs' own being ``output.max_record_bytes``)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": MAX_STATE_RECORD_BYTES + 1_048_576,  # + headers, batch
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
            "logger": kafka_logger(),
            **self.config.kafka.producer,
            **self.producer,
        }

    def consumer_config(self) -> dict[str, object]:
        """librdkafka consumer settings for restores and range reads."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": kafka_logger(),
            **self.config.kafka.consumer,
            **self.consumer,
        }

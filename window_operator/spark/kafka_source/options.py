"""The source's options: parsed and validated once, turned into librdkafka settings.

Option names are case-insensitive (see the package documentation for the list).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from window_operator.spark.kafka_source.schema import EARLIEST

__all__ = [
    "parse_starting_offsets",
    "DEFAULT_ARROW_BATCH",
    "DEFAULT_POLL_TIMEOUT_MS",
    "SourceOptions",
    "opt",
    "parse_options",
]

DEFAULT_POLL_TIMEOUT_MS = 60_000
"""How long a task waits for the broker to deliver before failing."""
DEFAULT_ARROW_BATCH = 10_000
"""Rows per Arrow record batch handed to Spark."""

# librdkafka properties that only make sense for consumers (kept away from the admin client).
_CONSUMER_ONLY_PREFIXES = (
    "fetch.",
    "group.",
    "enable.auto.",
    "auto.",
    "isolation.level",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "queued.",
    "partition.assignment.strategy",
    "enable.partition.eof",
    "check.crcs",
    "max.partition.fetch.bytes",
    "allow.auto.create.topics",
    "coordinator.query.interval.ms",
    "consume.callback.max.messages",
)


@dataclass(frozen=True)
class SourceOptions:
    """The options of one ``readStream``, validated (see :func:`parse_options`)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    pattern: str | None
    starting_offsets: str | dict[str, dict[str, int]]
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    isolation_level: str
    fail_on_data_loss: bool
    poll_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    arrow_batch_size: int
    client_config: dict[str, str] = field(default_factory=dict)
    #: Emit one row per offset range instead of the records (see RANGES_SCHEMA).
    emit_ranges: bool = False

    def subscribed(self, topic: str) -> bool:
        """Whether ``topic`` is read: named by ``subscribe`` or matched by the pattern."""
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka settings of the executors' consumers: no commits, partition EOF."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": f"wo-kafka-source-{uuid.uuid4().hex}",
            "fetch.wait.max.ms": "10",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "500",
        }
        conf.update(self.client_config)
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "isolation.level": self.isolation_level,
                "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
            }
        )
        return conf

    def admin_config(self) -> dict[str, Any]:
        """librdkafka settings of the driver's admin client (no consumer-only ones)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        for k, v in self.client_config.items():
            if not k.startswith(_CONSUMER_ONLY_PREFIXES):
                conf[k] = v
        return conf


def opt(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` (case-insensitive), or ``None``."""
    lowered = name.lower()
    for k, v in options.items():
        if k.lower() == lowered:
            return str(v)
    return None


def _int_opt(
    options: Mapping[str, str], name: str, default: int | None, minimum: int
) -> int | None:
    raw = opt(options, name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {value}")
    return value


def parse_starting_offsets(raw: str | None) -> str | dict[str, dict[str, int]]:
    """``earliest`` / ``latest`` (any case) or ``{"topic": {"partition": offset}}``
    (-2: earliest, -1: latest); ``ValueError`` says what is wrong."""
    if raw is None or raw.strip().lower() in ("", "earliest"):
        return "earliest"
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"startingOffsets must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(f"startingOffsets JSON must be an object, got {raw!r}")
    out: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(f"startingOffsets: topic {topic!r} must map to an object")
        out[str(topic)] = {}
        for p, off in parts.items():
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise ValueError(f"startingOffsets: bad offset {off!r} for {topic}[{p}]")
            out[str(topic)][str(int(p))] = off
    return out


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the options given to ``readStream`` (``ValueError`` names the bad one)."""
    bootstrap = opt(options, "kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option kafka.bootstrap.servers is required")
    subscribe = opt(options, "subscribe")
    pattern = opt(options, "subscribePattern")
    if bool(subscribe) == bool(pattern):
        raise ValueError("exactly one of the options subscribe, subscribePattern is required")
    topics = tuple(t.strip() for t in (subscribe or "").split(",") if t.strip())
    if subscribe and not topics:
        raise ValueError(f"option subscribe names no topic: {subscribe!r}")
    if pattern:
        re.compile(pattern)
    isolation = (
        opt(options, "isolation.level") or opt(options, "kafka.isolation.level") or ""
    ).strip().lower() or "read_committed"
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation.level must be read_committed or read_uncommitted: {isolation}")
    fail_raw = (opt(options, "failOnDataLoss") or "true").strip().lower()
    if fail_raw not in ("true", "false"):
        raise ValueError(f"failOnDataLoss must be true or false, got {fail_raw!r}")
    client: dict[str, str] = {}
    for k, v in options.items():
        key = k.lower()
        if key.startswith("kafka.") and key not in (
            "kafka.bootstrap.servers",
            "kafka.isolation.level",
        ):
            client[k[len("kafka.") :]] = str(v)
    starting = parse_starting_offsets(opt(options, "startingOffsets"))
    if isinstance(starting, dict) and topics:
        unknown = sorted(set(starting) - set(topics))
        if unknown:
            raise ValueError(f"startingOffsets names topics not subscribed: {unknown}")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        pattern=pattern or None,
        starting_offsets=starting,
        max_offsets_per_trigger=_int_opt(options, "maxOffsetsPerTrigger", None, 1),
        min_partitions=_int_opt(options, "minPartitions", None, 1),
        isolation_level=isolation,
        fail_on_data_loss=fail_raw == "true",
        poll_timeout_ms=_int_opt(options, "kafkaConsumer.pollTimeoutMs", None, 1)
        or DEFAULT_POLL_TIMEOUT_MS,
        fetch_retries=_int_opt(options, "fetchOffset.numRetries", 3, 0) or 0,
        fetch_retry_interval_ms=_int_opt(options, "fetchOffset.retryIntervalMs", 1000, 0) or 0,
        arrow_batch_size=_int_opt(options, "arrowBatchSize", DEFAULT_ARROW_BATCH, 1)
        or DEFAULT_ARROW_BATCH,
        client_config=client,
        emit_ranges=(opt(options, "emitRanges") or "false").lower() == "true",
    )

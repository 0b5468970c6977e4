"""Logging of the command line: one INFO line per micro-batch, quiet otherwise.

:func:`setup_logging` sends records to stderr through a :class:`RedactingFilter` (no
``kafka.*`` secret ever reaches the log), shows the package's INFO lines and everybody
else's warnings, and keeps librdkafka's connection chatter out (see
:class:`KafkaNoiseFilter`). :class:`BatchLog` is the batch-report observer that writes
the per-batch line; ``--quiet`` turns it off.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from window_operator.observe.redact import RedactingFilter

if TYPE_CHECKING:
    from window_operator.observe.metrics import JobMetrics
    from window_operator.spark.driver import BatchReport

__all__ = [
    "BATCH_LOGGER",
    "KAFKA_LOGGER",
    "LOG_FORMAT",
    "BatchLog",
    "KafkaNoiseFilter",
    "ensure_worker_handler",
    "kafka_logger",
    "setup_logging",
    "utc_formatter",
    "worker_logging",
]

#: The logger of the per-batch line.
BATCH_LOGGER = "window_operator.batches"
#: The logger librdkafka's messages go to (``logger`` in the client settings).
KAFKA_LOGGER = "window_operator.kafka"
_OURS = "_window_operator_handler"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: librdkafka's messages about a broker connection going away: expected when a client or
#: the broker shuts down, and retried by librdkafka when not; an outage that matters
#: surfaces as an error of the request that needed the broker.
_CONNECTION_NOISE = ("Disconnected", "Connection refused", "brokers are down", "Connect to")
#: librdkafka's messages repeated several times a second while it retries: a broker
#: host name that does not resolve, and an address where something that is not Kafka
#: answers (its first bytes read as a length: "HTTP" is 1213486160).
_UNRESOLVED = re.compile(
    r"Failed to resolve '([^']*)'|(\S+): Receive failed: Invalid response size"
)


class KafkaNoiseFilter(logging.Filter):
    """Drops librdkafka's connection-state messages (see :data:`_CONNECTION_NOISE`) and
    the repeats of a host name that does not resolve or of an address that does not
    answer as Kafka: the first per host is kept where ``first_unresolved`` (a running
    job's clients: a broker that advertises a name this host cannot resolve), none
    otherwise (a start-up check says it in its one line)."""

    def __init__(self, *, first_unresolved: bool = False) -> None:
        super().__init__()
        self._unresolved: set[str] | None = set() if first_unresolved else None

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but the connection chatter."""
        message = record.getMessage()
        unresolved = _UNRESOLVED.search(message)
        if unresolved is not None:
            seen, where = self._unresolved, unresolved[1] or unresolved[2]
            if seen is None or where in seen:
                return False
            seen.add(where)
            return True
        return not any(part in message for part in _CONNECTION_NOISE)


_KAFKA = logging.getLogger(KAFKA_LOGGER)
_KAFKA.addFilter(KafkaNoiseFilter(first_unresolved=True))


def kafka_logger() -> logging.Logger:
    """The logger for librdkafka's messages (``"logger"`` of a client's settings).

    Without it librdkafka writes to stderr itself; through it, connection chatter is
    dropped and secrets are masked like every other log line. The filter is attached in
    every process that builds client settings (Spark's Python workers too).
    """
    return _KAFKA


def utc_formatter(fmt: str) -> logging.Formatter:
    """A formatter whose ``%(asctime)s`` is the UTC time of day, as every other time the
    job prints (watermarks, ``status``, ``inspect``); before, the machine's local time."""
    formatter = logging.Formatter(fmt, datefmt="%H:%M:%S")
    formatter.converter = time.gmtime
    return formatter


def ensure_worker_handler(logger: logging.Logger) -> None:
    """Give ``logger``'s lines a way to stderr, as :func:`setup_logging` formats them,
    in a process that configured no logging (a Spark Python worker: else Python's last
    resort prints the bare message, without time or level)."""
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(utc_formatter(LOG_FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        _quiet_admin_clients()


def _quiet_admin_clients() -> None:
    """KafkaAdmin's clients log librdkafka's messages to their own logger: the same
    chatter as the job's clients (a broker away: a line per connection attempt)."""
    admin = logging.getLogger("window_operator.kafka_admin")
    if not any(isinstance(f, KafkaNoiseFilter) for f in admin.filters):
        admin.addFilter(KafkaNoiseFilter())


def worker_logging() -> None:
    """The package's log lines in a Spark Python worker as the driver writes them (time,
    level, logger): else Python's last resort prints a warning's bare message."""
    ensure_worker_handler(logging.getLogger("window_operator"))


def setup_logging(*, quiet: bool = False, secrets: list[str] | None = None) -> RedactingFilter:
    """Configure logging for a command; returns the redaction filter (add secrets to it)."""
    redact = RedactingFilter(secrets or [])
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(utc_formatter(LOG_FORMAT))
    handler.addFilter(redact)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _OURS, False):  # a second call replaces the first (tests, tools)
            root.removeHandler(old)
    setattr(handler, _OURS, True)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("window_operator").setLevel(logging.INFO)
    logging.getLogger(BATCH_LOGGER).setLevel(logging.WARNING if quiet else logging.INFO)
    # (no level of its own: producers are cached by their settings, this logger's repr
    # included, so it must not change while the job runs)
    _quiet_admin_clients()
    # py4j logs every callback connection it opens or closes at INFO
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return redact


def _time(ms: int) -> str:
    if ms <= -(2**62) or ms >= 2**62:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


class BatchLog:
    """Writes one concise INFO line per micro-batch or worker epoch that did something
    (idle ones, and timer passes that emitted nothing, at DEBUG)."""

    def __init__(self, metrics: JobMetrics | None = None) -> None:
        self.log = logging.getLogger(BATCH_LOGGER)
        self.metrics = metrics

    def line(self, report: BatchReport) -> str:
        """The line of one report."""
        from window_operator.runtime.exchange import kafka_reads

        tasks = report.tasks
        kinds: dict[str, int] = {}
        for t in tasks:
            for kind, n in t.results_by_kind.items():
                kinds[kind] = kinds.get(kind, 0) + n
        results = sum(kinds.values())
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        label = "timer pass" if report.batch_id < 0 else f"batch {report.batch_id}"
        parts = [label]
        if report.batch_id >= 0:
            # a self-join's range is reported by both inputs, and was read once
            topics = None if self.metrics is None else self.metrics.topics
            parts.append(f"{sum(m.records for m in kafka_reads(report.ranges, topics))} read")
            parts.append(f"{sum(t.applied for t in tasks)} applied")
            replayed = sum(t.replayed for t in tasks)
            if replayed:
                parts.append(f"{replayed} replayed")
            parts.append(f"{sum(t.late for t in tasks)} late")
            parts.append(f"{sum(t.rejected for t in tasks)} rejected")
        parts.append(f"{results} results" + (f" ({by_kind})" if by_kind else ""))
        unwritten = sum(t.result_errors for t in tasks)
        if unwritten:
            parts.append(f"{unwritten} not written (RESULT_ERROR)")
        restored = sum(t.restored_records for t in tasks)
        if restored:  # a state rebuilt from the changelog (why a quiet pass is logged)
            parts.append(f"{restored} changelog records restored")
        parts.append(f"watermark {_time(report.clock.watermark)}")
        if self.metrics is not None:
            summary = self.metrics.summary()
            # a lag the broker did not answer for is not this batch's: the gauges keep
            # an older reading (the records this batch read among it)
            parts.append(f"lag {summary.lag}" if summary.lag_measured else "lag unknown")
        parts.append(f"{report.seconds:.2f} s")
        return ", ".join(parts)

    def __call__(self, report: BatchReport) -> None:
        """Log the line (at DEBUG when the batch, epoch or pass did nothing)."""
        idle = not any(m.records for m in report.ranges) and not any(
            t.results
            or t.result_errors
            or t.applied
            or t.replayed
            or t.rejected
            or t.restored_records
            for t in report.tasks
        )
        self.log.log(logging.DEBUG if idle else logging.INFO, "%s", self.line(report))

"""The driver's questions to the broker: which partitions exist, and their offsets.

Every question is retried (``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs``
apart) and fails as :class:`KafkaSourceError` naming the bootstrap servers. The requests
themselves go through :class:`~window_operator.kafka_admin.KafkaAdmin`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from window_operator.kafka_admin import BrokerUnreachableError, KafkaAdmin
from window_operator.observe.logs import ensure_worker_handler
from window_operator.spark.kafka_source.options import SourceOptions
from window_operator.spark.kafka_source.schema import (
    KafkaSourceError,
    OffsetMap,
    TopicPartitionKey,
)

__all__ = ["BrokerQueries"]

log = logging.getLogger(__name__)

_ADMIN_REQUEST_TIMEOUT_S = 30.0
_T = TypeVar("_T")


class BrokerQueries:
    """Partition listing and offset lookups for one source's options.

    The admin client is made on first use: the stream reader that holds this object is
    pickled to executors, where it is never needed.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: KafkaAdmin | None = None

    def _admin_client(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = KafkaAdmin(
                self.options.bootstrap_servers,
                client_config=self.options.admin_config(),
                metadata_timeout_s=_ADMIN_REQUEST_TIMEOUT_S,
                request_timeout_s=_ADMIN_REQUEST_TIMEOUT_S,
            )
        return self._admin

    def close(self) -> None:
        """Drop the admin client (a later query makes a new one)."""
        self._admin = None

    def _retrying(self, what: str, fn: Callable[[], _T]) -> _T:
        attempts = self.options.fetch_retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - KafkaAdminError, KafkaException, timeouts
                last = exc
                ensure_worker_handler(log)  # Spark's Python worker of the source
                log.warning(
                    "Kafka source: %s failed (attempt %d): %s", what, attempt + 1, _reason(exc)
                )
                if attempt + 1 < attempts:
                    time.sleep(self.options.fetch_retry_interval_ms / 1000.0)
        raise KafkaSourceError(
            f"Kafka source: {what} failed against {self.options.bootstrap_servers}: {last}"
        ) from last

    def partitions(self) -> list[TopicPartitionKey]:
        """Every partition of the subscribed topics, sorted."""

        def fetch() -> list[TopicPartitionKey]:
            admin, pattern = self._admin_client(), self.options.pattern
            topics = (
                admin.topics()
                if pattern is not None
                else admin.partition_counts(self.options.topics)
            )
            return sorted(
                (name, p)
                for name, count in topics.items()
                if self.options.subscribed(name)
                for p in range(count)
            )

        return self._retrying("topic metadata", fetch)

    def list_offsets(self, tps: Sequence[TopicPartitionKey], earliest: bool) -> OffsetMap:
        """The earliest or latest offsets of ``tps`` (latest: last stable, read_committed)."""
        if not tps:
            return {}
        read_committed = self.options.isolation_level == "read_committed"

        def fetch() -> OffsetMap:
            return self._admin_client().list_offsets(
                tps, earliest=earliest, read_committed=read_committed
            )

        return self._retrying("earliest" if earliest else "latest offsets", fetch)

    def latest(self) -> OffsetMap:
        """The latest offsets of every subscribed partition."""
        return self.list_offsets(self.partitions(), earliest=False)


def _reason(exc: Exception) -> str:
    """A failed query's reason: a running job's broker that went away is not told to
    start a local one, as a command that never reached one is."""
    if isinstance(exc, BrokerUnreachableError):
        return f"no Kafka broker answered within {exc.timeout_s:g}s ({exc.cause})"
    return str(exc)

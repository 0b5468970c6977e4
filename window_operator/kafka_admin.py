"""Kafka administration in one place: reachability, topic metadata, idempotent creation.

Everything in the project that checks or creates topics (the command line, the demo,
the streaming driver, the tests and the benchmarks) goes through :class:`KafkaAdmin`,
so that:

* creating a topic is create-if-missing: a topic that already exists, or that a
  concurrent creator made first (``TOPIC_ALREADY_EXISTS``), is not an error;
* a cluster that does not answer is one :class:`BrokerUnreachableError` after a bounded
  metadata request (seconds, not the minutes of librdkafka's own retries), naming the
  bootstrap servers and the reason of the last failed connection;
* a topic the caller needs but cannot create is a :class:`TopicNotFoundError` naming it.

librdkafka logs every failed connection attempt to stderr by default. The clients made
here log through the ``window_operator.kafka_admin`` Python logger instead (silent
unless the application configures logging), so a command line that cannot reach its
broker prints one line, not a screenful.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from window_operator.errors import WindowOperatorError

__all__ = [
    "METADATA_TIMEOUT_S",
    "BrokerUnreachableError",
    "KafkaAdmin",
    "KafkaAdminError",
    "OffsetQueryError",
    "TopicCreationError",
    "TopicNotFoundError",
    "TopicSpec",
    "wait_for_broker",
]

log = logging.getLogger(__name__)
# librdkafka's messages go to this logger; without a handler of the application's they
# would reach logging's last-resort stderr handler, the very noise this module avoids.
log.addHandler(logging.NullHandler())

METADATA_TIMEOUT_S = 5.0
"""How long a metadata request may take before the cluster counts as unreachable."""
REQUEST_TIMEOUT_S = 30.0
"""How long a topic creation may take."""
TOPIC_WAIT_S = 2.0
"""How long a required topic may take to appear (metadata propagation after creation)."""
_POLL_S = 0.25


class KafkaAdminError(WindowOperatorError):
    """Base of this module's errors: the cluster cannot do what was asked."""


class BrokerUnreachableError(KafkaAdminError):
    """No broker of ``bootstrap_servers`` answered a metadata request in time."""

    def __init__(self, bootstrap_servers: str, timeout_s: float, cause: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.cause = cause
        if "Invalid response size 1213486160 " in cause:  # "HTTP" read as a length
            cause = (
                "something answers there, but not as Kafka does (an HTTP server, say): "
                "is it the broker's host and port?"
            )
        super().__init__(
            f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:g}s ({cause}); "
            "check that it is running and that the bootstrap servers are right "
            "(KAFKA_BOOTSTRAP_SERVERS, --bootstrap-servers or kafka.bootstrap_servers), "
            "or start a local one with `window-operator broker`"
        )


class TopicNotFoundError(KafkaAdminError):
    """A topic the caller needs does not exist (and is not the caller's to create)."""

    def __init__(self, topic: str, bootstrap_servers: str, hint: str, kind: str = "topic") -> None:
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        super().__init__(f"{kind} {topic!r} does not exist on {bootstrap_servers}: {hint}")


class TopicCreationError(KafkaAdminError):
    """The cluster refused to create a topic (invalid name or settings, no permission)."""

    def __init__(self, topic: str, reason: str, code: int | None = None) -> None:
        self.topic = topic
        self.code = code
        super().__init__(f"cannot create topic {topic!r}: {reason}")


class OffsetQueryError(KafkaAdminError):
    """The cluster did not tell the offsets of some partitions."""

    def __init__(self, bootstrap_servers: str, reason: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        super().__init__(f"listing offsets on {bootstrap_servers} failed: {reason}")


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count and topic-level settings;
    ``replication_factor`` ``-1``: the broker's ``default.replication.factor``."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1


class _LastError:
    """Keeps the last client error librdkafka reported (the reason a request failed)."""

    def __init__(self) -> None:
        self.text: str | None = None
        self._summary = False

    def reset(self) -> None:
        """Forget the errors of earlier requests."""
        self.text, self._summary = None, False

    def __call__(self, error: Any) -> None:
        # the first error after a reset says why, unless it is only the summary "1/1
        # brokers are down", which librdkafka may report before the connection's error
        from confluent_kafka import KafkaError

        summary = error.code() == KafkaError._ALL_BROKERS_DOWN
        if self.text is None or (self._summary and not summary):
            self.text, self._summary = str(error.str()), summary


class KafkaAdmin:
    """Topic administration against one cluster, over one confluent-kafka AdminClient.

    The client lives as long as this object, so every future it hands out resolves
    (an AdminClient collected early leaves its futures hanging).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_config: Mapping[str, Any] | None = None,
        metadata_timeout_s: float = METADATA_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap_servers = bootstrap_servers
        self.metadata_timeout_s = metadata_timeout_s
        self.request_timeout_s = request_timeout_s
        self._last_error = _LastError()
        conf: dict[str, Any] = {
            **(client_config or {}),
            "bootstrap.servers": bootstrap_servers,
            "logger": log,
            "error_cb": self._last_error,
        }
        self._client = AdminClient(conf)

    # -- metadata ------------------------------------------------------------------------

    def topics(self, timeout_s: float | None = None) -> dict[str, int]:
        """Partition count of every topic the cluster reports without error.

        Lists all topics rather than asking for one by name: a metadata request naming
        a missing topic may create it on a cluster with ``auto.create.topics.enable``.
        Raises :class:`BrokerUnreachableError` if no broker answers within
        ``timeout_s`` (default: the ``metadata_timeout_s`` given to the constructor).
        """
        from confluent_kafka import KafkaException

        wait = self.metadata_timeout_s if timeout_s is None else timeout_s
        self._client.poll(0)  # drop errors of earlier requests
        self._last_error.reset()
        try:
            meta = self._client.list_topics(timeout=wait)
        except KafkaException as exc:
            self._client.poll(0)  # delivers the connection errors to _last_error
            cause = self._last_error.text or str(exc.args[0].str())
            raise BrokerUnreachableError(self.bootstrap_servers, wait, cause) from None
        return {
            name: len(t.partitions)
            for name, t in meta.topics.items()
            if t.error is None and t.partitions
        }

    def partition_counts(
        self, names: Collection[str], timeout_s: float | None = None
    ) -> dict[str, int]:
        """Partition count of each topic of ``names`` that exists (a missing one is left
        out), asked for by name: unlike :meth:`topics`, the answer does not grow with the
        cluster, for the checks a running job makes every batch. The request (Kafka's
        DescribeTopics) creates no topic. Raises :class:`BrokerUnreachableError` as
        :meth:`topics` does (and for any error Kafka calls retriable), and
        :class:`KafkaAdminError` if the cluster refuses to describe a topic (for example,
        no permission).
        """
        from concurrent.futures import TimeoutError as FutureTimeout

        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        if not names:
            return {}
        wait = self.metadata_timeout_s if timeout_s is None else timeout_s
        unanswered = (
            KafkaError._TIMED_OUT,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._RESOLVE,
            KafkaError.REQUEST_TIMED_OUT,
        )
        self._client.poll(0)
        self._last_error.reset()
        futures = self._client.describe_topics(
            TopicCollection(sorted(set(names))), request_timeout=wait
        )
        counts: dict[str, int] = {}
        for name, future in futures.items():
            try:
                counts[name] = len(future.result(timeout=wait + 1.0).partitions)
            except FutureTimeout:
                raise BrokerUnreachableError(self.bootstrap_servers, wait, "no answer") from None
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                self._client.poll(0)
                if error.code() in unanswered or error.retriable():  # asked again, it may
                    cause = self._last_error.text or str(error.str())
                    raise BrokerUnreachableError(self.bootstrap_servers, wait, cause) from None
                raise KafkaAdminError(f"describing topic {name!r} failed: {error.str()}") from None
        return counts

    def wait_until_reachable(self, timeout_s: float) -> None:
        """Block until a broker answers a metadata request, for at most ``timeout_s``.

        Unlike :meth:`topics` this keeps asking, for a broker that is still starting.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                self.topics(timeout_s=max(0.1, min(remaining, 2.0)))
                return
            except BrokerUnreachableError as exc:
                if time.monotonic() + 0.05 >= deadline:
                    raise BrokerUnreachableError(
                        self.bootstrap_servers, timeout_s, exc.cause
                    ) from None
                time.sleep(0.05)

    def partition_count(self, topic: str) -> int | None:
        """The number of partitions of ``topic``, or ``None`` if it does not exist."""
        return self.partition_counts([topic]).get(topic)

    def require_topic(
        self, topic: str, *, hint: str, kind: str = "topic", wait_s: float = TOPIC_WAIT_S
    ) -> int:
        """The partition count of ``topic``, which must exist.

        Waits up to ``wait_s`` for a topic created a moment ago to show up, then raises
        :class:`TopicNotFoundError` naming it as ``kind`` (``"input topic"``), with
        ``hint`` (what the user should do) in its message.
        """
        deadline = time.monotonic() + wait_s
        while True:
            count = self.partition_count(topic)
            if count is not None:
                return count
            if time.monotonic() >= deadline:
                raise TopicNotFoundError(topic, self.bootstrap_servers, hint, kind)
            time.sleep(_POLL_S)

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """Kafka's id of each of ``topics`` (a topic deleted and created again has a new
        one), as text; a topic is left out where the broker keeps no ids (Kafka before
        2.8 answers the zero id), or the request fails or is not answered in time."""
        from confluent_kafka import KafkaException, TopicCollection

        if not topics:
            return {}
        try:
            futures = self._client.describe_topics(
                TopicCollection(list(topics)), request_timeout=self.request_timeout_s
            )
        except (KafkaException, ValueError, TypeError):
            return {}
        found: dict[str, str] = {}
        for name, future in futures.items():
            try:
                topic_id = future.result(
                    timeout=self.request_timeout_s + METADATA_TIMEOUT_S
                ).topic_id
            except (KafkaException, TimeoutError, ValueError):
                continue
            text = "" if topic_id is None else str(topic_id)
            if text.strip("A="):  # not the zero id ("AAAA..." in base 64): none kept
                found[name] = text
        return found

    def topic_config(self, topic: str) -> dict[str, str]:
        """The settings of ``topic`` as the broker reports them (its defaults included);
        ``{}`` when it does not answer in time or refuses (no permission, say)."""
        import confluent_kafka.admin as kafka_admin
        from confluent_kafka import KafkaException

        config_resource: Any = getattr(kafka_admin, "ConfigResource")  # noqa: B009 - untyped
        resource = config_resource("topic", topic)
        try:
            future = self._client.describe_configs([resource])[resource]
            entries = future.result(timeout=self.request_timeout_s + METADATA_TIMEOUT_S)
        except (KafkaException, TimeoutError, ValueError):
            return {}
        return {name: str(e.value) for name, e in entries.items() if e.value is not None}

    def list_offsets(
        self,
        partitions: Sequence[tuple[str, int]],
        *,
        earliest: bool,
        read_committed: bool = True,
    ) -> dict[tuple[str, int], int]:
        """The earliest or the latest offset of each ``(topic, partition)``.

        Under ``read_committed`` the latest offset is the last stable offset (an open
        transaction's records are not counted yet). Raises :class:`OffsetQueryError`.
        """
        if not partitions:
            return {}
        import confluent_kafka.admin as kafka_admin
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition

        offset_spec: Any = getattr(kafka_admin, "OffsetSpec")  # noqa: B009 - untyped export
        spec = offset_spec.earliest() if earliest else offset_spec.latest()
        isolation = (
            IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self._client.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions},
            isolation_level=isolation,
            request_timeout=self.request_timeout_s,
        )
        try:
            return {
                (tp.topic, tp.partition): int(f.result(timeout=self.request_timeout_s).offset)
                for tp, f in futures.items()
            }
        except KafkaException as exc:
            raise OffsetQueryError(self.bootstrap_servers, str(exc.args[0].str())) from None
        except TimeoutError:
            raise OffsetQueryError(
                self.bootstrap_servers, f"no answer in {self.request_timeout_s:g}s"
            ) from None

    # -- creation ------------------------------------------------------------------------

    def create_topics(self, specs: Sequence[TopicSpec]) -> list[str]:
        """Create the topics of ``specs`` that do not exist yet; returns the ones it created.

        A topic that exists already is left as it is (its partition count and settings
        are not compared). Safe against a concurrent creator: a topic another client
        creates between the metadata check and the request counts as existing.
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewTopic

        existing = self.topics()
        missing = [s for s in specs if s.name not in existing]
        if not missing:
            return []
        futures = self._client.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config))
                for s in missing
            ],
            request_timeout=self.request_timeout_s,
        )
        created: list[str] = []
        for name, future in futures.items():
            try:
                future.result(timeout=self.request_timeout_s + METADATA_TIMEOUT_S)
            except TimeoutError:
                raise TopicCreationError(
                    name, f"no answer from {self.bootstrap_servers} in {self.request_timeout_s:g}s"
                ) from None
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                reason = str(error.str())
                if error.code() in (
                    KafkaError.INVALID_REPLICATION_FACTOR,
                    KafkaError.UNSUPPORTED_VERSION,
                ):
                    reason += (
                        " (kafka.replication_factor in the job config sets it, at most the "
                        "number of brokers; without it the broker's default.replication."
                        "factor is used, which brokers before Kafka 2.4 cannot)"
                    )
                raise TopicCreationError(name, reason, int(error.code())) from None
            created.append(name)
        return sorted(created)

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
    ) -> bool:
        """Create one topic if it does not exist; returns whether this call created it
        (``replication_factor`` ``None``: the broker's default)."""
        rf = -1 if replication_factor is None else replication_factor
        return bool(self.create_topics([TopicSpec(name, partitions, dict(config or {}), rf)]))


def wait_for_broker(bootstrap_servers: str, timeout_s: float = 20.0) -> None:
    """Block until a broker answers a metadata request (or raise BrokerUnreachableError)."""
    KafkaAdmin(bootstrap_servers).wait_until_reachable(timeout_s)

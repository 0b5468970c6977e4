"""Where a state task's micro-batch goes: results, error records and changelog records.

Exactly-once: everything of the batch (results, error records, the changelog records
with the commit marker last) is produced inside one Kafka transaction, committed
together. At-least-once: results and error records are sent and acknowledged first,
then the changelog; a crash in between re-sends identical results after a restart.

A transaction is never aborted here: on any failure the producer is discarded, and the
next producer of the task resolves what was left open when it is initialised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stores.changelog import ChangelogDelivery
from stores.changelog.writer import produce
from window_operator.codecs import encode_error
from window_operator.errors import OutputSendError
from window_operator.results import ErrorRecord

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

__all__ = ["OutputSink", "SinkTopics"]

KafkaRecord = tuple[bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class SinkTopics:
    """The topics a job writes besides its changelog."""

    results: str
    errors: str


@dataclass
class _Deliveries:
    errors: list[str] = field(default_factory=list)

    def __call__(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))


class OutputSink:
    """Produces one state task's batch to Kafka (see module doc)."""

    def __init__(
        self,
        producer: Producer,
        topics: SinkTopics,
        *,
        transactional: bool,
        timeout_s: float,
        attempt: str | None = None,
    ) -> None:
        self.producer = producer
        self.topics = topics
        self.transactional = transactional
        self.timeout_s = timeout_s
        #: an id of this attempt at the batch, put in an ``attempt`` header of every
        #: result (audits: which attempt a result came from)
        self.attempt = attempt
        self._headers = None if attempt is None else [("attempt", attempt.encode())]
        self._deliveries = _Deliveries()
        self.sent = 0

    def begin(self) -> None:
        """Start the batch (a transaction under exactly-once)."""
        if self.transactional:
            self.producer.begin_transaction()

    def results(self, records: Iterable[KafkaRecord]) -> int:
        """Produce encoded window results; how many."""
        n = 0
        for key, value in records:
            produce(
                self.producer,
                self.topics.results,
                key,
                value,
                headers=self._headers,
                on_delivery=self._deliveries,
            )
            n += 1
        self.sent += n
        return n

    def errors(self, errors: Sequence[ErrorRecord]) -> int:
        """Produce rejected input records to the errors topic (dead-letter convention)."""
        for err in errors:
            key, value, headers = encode_error(err, key=err.key)
            produce(
                self.producer,
                self.topics.errors,
                key,
                value,
                headers=headers,
                on_delivery=self._deliveries,
            )
        self.sent += len(errors)
        return len(errors)

    def acknowledge_outputs(self) -> None:
        """At-least-once: wait until results and errors are acknowledged (before the log)."""
        if not self.transactional:
            self._check(self.producer.flush(self.timeout_s))

    def changelog(self, write: Callable[[], ChangelogDelivery]) -> ChangelogDelivery:
        """Produce the changelog records of the batch (``write`` does it)."""
        return write()

    def commit(self, changelog: ChangelogDelivery) -> int:
        """Finish the batch; the offset of the changelog's commit marker."""
        if self.transactional:
            try:
                self.producer.commit_transaction(self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - KafkaException of any kind
                raise OutputSendError(
                    f"the transaction of the batch did not commit: {exc}"
                ) from exc
            self._check(0)
            return changelog.marker_offset(0)
        unacknowledged = self.producer.flush(self.timeout_s)
        self._check(0)
        return changelog.marker_offset(unacknowledged)

    def _check(self, unacknowledged: int) -> None:
        if unacknowledged or self._deliveries.errors:
            raise OutputSendError(
                f"{unacknowledged} output records unacknowledged, "
                f"errors: {self._deliveries.errors[:3]}"
            )

"""Where a state task's micro-batch goes: results, error records and changelog records.

Exactly-once: everything of the batch (results, error records, the changelog records
with the commit marker last) is produced inside one Kafka transaction, committed
together. At-least-once: results and error records are sent and acknowledged first,
then the changelog; a crash in between re-sends identical results after a restart.

A transaction is never aborted here: on any failure the producer is discarded, and the
next producer of the task resolves what was left open when it is initialised. A wait on
the broker that a stop of the job cuts short (:mod:`.kafka_waits`) is such a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, cast

from stores.changelog import ChangelogDelivery
from stores.changelog.writer import Headers, produce, produce_many
from stores.errors import ProduceError
from window_operator.codecs import encode_error
from window_operator.errors import OutputSendError
from window_operator.results import ErrorRecord
from window_operator.runtime.kafka_waits import BatchAbandonedError, Stopping, flush, until_done

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

__all__ = ["OutputSink", "SinkTopics"]

KafkaRecord = tuple[bytes | None, bytes | None]
#: Headers as confluent-kafka's ``produce`` declares them (ours are a narrower list).
_KafkaHeaders = list[tuple[str, str | bytes | None]] | None


@dataclass(frozen=True, slots=True)
class SinkTopics:
    """The topics a job writes besides its changelog."""

    results: str
    errors: str


def _codes(exc: BaseException) -> tuple[int, ...]:
    """The ``KafkaError`` code a ``KafkaException`` carries (``()``: none)."""
    error = exc.args[0] if exc.args else None
    code = getattr(error, "code", None)
    return (int(code()),) if callable(code) else ()


@dataclass
class _Deliveries:
    errors: list[str] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)

    def __call__(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
            self.codes.append(int(err.code()))


@dataclass
class OutputSink:
    """Produces one state task's batch to Kafka (see module doc).

    ``attempt`` is an id of this attempt at the batch, put in an ``attempt`` header of
    every result (audits: which attempt a result came from).
    """

    producer: Producer
    topics: SinkTopics
    _: KW_ONLY
    transactional: bool
    timeout_s: float
    #: whether the job was asked to stop: a wait on the broker then gives the batch up
    stopping: Stopping = None
    attempt: str | None = None
    #: records produced so far
    sent: int = field(default=0, init=False)
    _deliveries: _Deliveries = field(default_factory=_Deliveries, init=False)

    @property
    def _headers(self) -> Headers | None:
        return None if self.attempt is None else [("attempt", self.attempt.encode())]

    def begin(self) -> None:
        """Start the batch (a transaction under exactly-once)."""
        if self.transactional:
            self.producer.begin_transaction()

    def results(self, records: Sequence[KafkaRecord]) -> int:
        """Produce encoded window results; how many."""
        headers = self._headers
        if headers is not None:  # produce_batch takes no headers
            return self._produce(self.topics.results, ((k, v, headers) for k, v in records))
        callback = None if self.transactional else self._deliveries
        try:
            batch = [{"key": k, "value": v} for k, v in records]
            produce_many(self.producer, self.topics.results, batch, on_delivery=callback)
        except ProduceError as exc:
            raise OutputSendError(str(exc), exc.kafka_codes) from exc
        self.sent += len(records)
        return len(records)

    def errors(self, errors: Sequence[ErrorRecord]) -> int:
        """Produce rejected input records to the errors topic (dead-letter convention)."""
        records = (encode_error(e, key=e.key) for e in errors)
        extra = self._headers
        if extra is not None:  # traced: the attempt, as on results
            records = ((k, v, [*(h or []), *extra]) for k, v, h in records)
        return self._produce(self.topics.errors, records)

    def _produce(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes | None, Headers | None]]
    ) -> int:
        # a transaction commits only if every record was written: no report per record
        callback = None if self.transactional else self._deliveries
        raw = self.producer.produce
        n = 0
        for key, value, headers in records:
            try:
                raw(
                    topic,
                    value=value,
                    key=key,
                    headers=cast(_KafkaHeaders, headers),
                    on_delivery=callback,
                )
            except BufferError:  # the queue is full: wait for room (rare)
                produce(self.producer, topic, key, value, headers=headers, on_delivery=callback)
            n += 1
        self.sent += n
        return n

    def acknowledge_outputs(self) -> None:
        """At-least-once: wait until results and errors are acknowledged (before the log)."""
        if not self.transactional:
            self._check(flush(self.producer, self.timeout_s, self.stopping))

    def changelog(self, write: Callable[[], ChangelogDelivery]) -> ChangelogDelivery:
        """Produce the changelog records of the batch (``write`` does it)."""
        return write()

    def commit(self, changelog: ChangelogDelivery) -> int:
        """Finish the batch; the offset of the changelog's commit marker."""
        if self.transactional:
            try:
                until_done(
                    self.producer.commit_transaction, self.timeout_s, self.stopping, "the commit"
                )
            except BatchAbandonedError:
                raise
            except Exception as exc:  # noqa: BLE001 - KafkaException of any kind
                raise OutputSendError(
                    f"the transaction of the batch did not commit: {exc}", _codes(exc)
                ) from exc
            self._check(0)
            return changelog.marker_offset(0)
        unacknowledged = flush(self.producer, self.timeout_s, self.stopping)
        self._check(0)
        return changelog.marker_offset(unacknowledged)

    def _check(self, unacknowledged: int) -> None:
        if unacknowledged or self._deliveries.errors:
            raise OutputSendError(
                f"{unacknowledged} output records unacknowledged, "
                f"errors: {self._deliveries.errors[:3]}",
                tuple(self._deliveries.codes),
            )

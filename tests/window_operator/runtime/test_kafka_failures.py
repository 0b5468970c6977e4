"""What a state task's Kafka failure says (:mod:`window_operator.runtime.kafka_failures`)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from window_operator.errors import OutputSendError
from window_operator.runtime.kafka_failures import (
    failed_fatally,
    fenced,
    refused_as_too_large,
)


def test_a_refusal_for_size_is_told_by_its_kafka_code_through_the_chain() -> None:
    from stores.errors import ProduceError

    refused = ProduceError("producing failed", (KafkaError.MSG_SIZE_TOO_LARGE,))
    try:
        raise OutputSendError(str(refused), ()) from refused
    except OutputSendError as wrapped:
        assert refused_as_too_large(wrapped)
    assert refused_as_too_large(OutputSendError("list", (KafkaError.RECORD_LIST_TOO_LARGE,)))
    # a broker away, or a message that only names the code, is not a refusal for size
    assert not refused_as_too_large(OutputSendError("x", (KafkaError._TRANSPORT,)))
    assert not refused_as_too_large(OutputSendError("KafkaError{code=MSG_SIZE_TOO_LARGE}"))


def test_a_fence_is_told_by_its_kafka_code_on_every_path() -> None:
    """A producer fenced by another of its transactional id: the commit's error (kept as
    ``kafka_codes``) and a ``KafkaException`` raised as it is both say so."""
    assert fenced(OutputSendError("commit", (KafkaError._FENCED,)))
    assert fenced(KafkaException(KafkaError(KafkaError.PRODUCER_FENCED)))
    try:
        raise OutputSendError("wrapped", ()) from KafkaException(
            KafkaError(KafkaError.INVALID_PRODUCER_EPOCH)
        )
    except OutputSendError as wrapped:
        assert fenced(wrapped)
    assert not fenced(OutputSendError("away", (KafkaError._TRANSPORT,)))
    assert not fenced(KafkaException(KafkaError(KafkaError._TIMED_OUT)))


def test_a_producer_failed_fatally_is_told_by_the_code_or_the_errors_fatal_mark() -> None:
    """librdkafka's ``_FATAL`` (a produce after a fence it learnt), and any error it marks
    fatal (an idempotent producer's sequence out of order): only a new producer goes on;
    a broker away is waited for with the same one."""
    assert failed_fatally(OutputSendError("produce", (KafkaError._FATAL,)))
    out_of_order = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "desync", fatal=True)
    try:
        raise OutputSendError("the transaction did not commit", ()) from KafkaException(
            out_of_order
        )
    except OutputSendError as wrapped:
        assert failed_fatally(wrapped)
        assert not fenced(wrapped)
    assert not failed_fatally(OutputSendError("away", (KafkaError._TRANSPORT,)))
    assert not failed_fatally(KafkaException(KafkaError(KafkaError._TIMED_OUT, "t")))

"""What a state task's Kafka failure says: whether another attempt can help, and why.

The sink, the changelog writer and the producer raise different exceptions; each keeps
the ``KafkaError`` codes of its refusals (``kafka_codes``, or a ``KafkaException``'s
error), also through the exceptions raised from it.
"""

from __future__ import annotations

__all__ = ["KAFKA_FAILURES", "failed_fatally", "fenced", "kafka_codes", "refused_as_too_large"]


def _kafka_failures() -> tuple[type[BaseException], ...]:
    from confluent_kafka import KafkaException

    from stores.changelog import ChangelogError
    from window_operator.errors import OutputSendError

    return (OutputSendError, ChangelogError, KafkaException)


#: What a batch's attempt raises when Kafka did not take it (tried again, within bounds).
KAFKA_FAILURES = _kafka_failures()


def kafka_codes(exc: BaseException) -> set[int]:
    """The ``KafkaError`` codes ``exc`` and what it was raised from carry."""
    codes: set[int] = set()
    seen: BaseException | None = exc
    while seen is not None:
        codes.update(getattr(seen, "kafka_codes", ()))
        error = seen.args[0] if seen.args else None
        code = getattr(error, "code", None)  # a KafkaException's KafkaError
        if callable(code):
            codes.add(int(code()))
        seen = seen.__cause__
    return codes


def _said_fatal(exc: BaseException) -> bool:
    """Whether a ``KafkaError`` ``exc`` or what it was raised from carries is fatal."""
    seen: BaseException | None = exc
    while seen is not None:
        error = seen.args[0] if seen.args else None
        fatal = getattr(error, "fatal", None)  # a KafkaException's KafkaError
        if callable(fatal) and fatal():
            return True
        seen = seen.__cause__
    return False


def refused_as_too_large(exc: BaseException) -> bool:
    """Kafka refused a record for its size: the same batch would be refused again."""
    from confluent_kafka import KafkaError

    return bool(
        {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE} & kafka_codes(exc)
    )


def fenced(exc: BaseException) -> bool:
    """Another producer of the task's transactional id fenced this one (it initialised
    after it): a zombie attempt, or a second copy of the job."""
    from confluent_kafka import KafkaError

    codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    return bool(codes & kafka_codes(exc))


def failed_fatally(exc: BaseException) -> bool:
    """The producer failed fatally: librdkafka says so (``_FATAL``) on every produce
    after it learnt, asynchronously, that another producer of its transactional id
    fenced it (the commit says ``_FENCED``); or another unrecoverable error (a
    ``KafkaError`` marked fatal, such as ``OUT_OF_ORDER_SEQUENCE_NUMBER`` from an
    idempotent producer): only a new producer can go on."""
    from confluent_kafka import KafkaError

    return KafkaError._FATAL in kafka_codes(exc) or _said_fatal(exc)

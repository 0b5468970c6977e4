"""The exceptions of the store layer, under one base class."""

from __future__ import annotations

__all__ = ["ProduceError", "StateCorruptError", "StoreError", "StoreLockedError"]


class StoreError(Exception):
    """Base class of the errors raised by :mod:`stores`."""


class StoreLockedError(StoreError):
    """The store is held by another process, or already open in this one."""


class StateCorruptError(StoreError, ValueError):
    """Stored bytes do not decode: a key or value of an unexpected layout or version.

    The store (or the changelog it was restored from) was written by another version
    or another job, or it is damaged; rebuild it from the changelog or start afresh.
    """


class ProduceError(StoreError):
    """Kafka did not take records handed to a producer (rejected, not only a full queue).

    A Kafka failure: the caller discards the producer and runs its batch again.
    ``kafka_codes`` are the ``KafkaError`` codes of the refusals.
    """

    def __init__(self, message: str, kafka_codes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.kafka_codes = kafka_codes

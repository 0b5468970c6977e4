"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[Producer]:
    """An idempotent producer of the test broker (flushed at the end)."""
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5})
    yield p
    p.flush(10)

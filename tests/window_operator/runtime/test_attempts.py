"""A state task's attempts at a batch Kafka does not take
(:mod:`window_operator.runtime.attempts`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from helpers import runtime_for

from window_operator.errors import OutputSendError
from window_operator.runtime.attempts import (
    Attempts,
    BatchAbandonedError,
    BrokerUnavailableError,
)
from window_operator.runtime.settings import TaskSettings

AWAY = OutputSendError("the batch was not delivered", (KafkaError._TRANSPORT,))


def settings(tmp_path: Path, broker_timeout: str) -> TaskSettings:
    config = runtime_for(processing={"broker_timeout": broker_timeout}).config
    return TaskSettings(config, "127.0.0.1:9", str(tmp_path), tasks=1)


def test_a_broker_away_is_waited_for_until_the_broker_timeout(tmp_path: Path) -> None:
    attempts = Attempts(settings(tmp_path, "1s"), 0, "batch 3")
    attempts.failed(AWAY)  # the first pause is none: the next attempt runs at once
    attempts.failed(AWAY)  # then 1 s
    with pytest.raises(BrokerUnavailableError, match="task 0: Kafka at 127.0.0.1:9 did not take"):
        attempts.failed(AWAY)
    assert attempts.made == 3


def test_a_job_asked_to_stop_gives_the_batch_up_instead_of_waiting(tmp_path: Path) -> None:
    """A long-running worker asked to stop while the broker is away: the batch's pause
    ends when the stop comes, not after ``processing.broker_timeout`` (a stopped job
    waited 5 minutes for a broker that was not coming back)."""
    stop = threading.Event()
    attempts = Attempts(settings(tmp_path, "5m"), 1, "epoch 7", stop.is_set)
    attempts.failed(AWAY)
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(BatchAbandonedError) as raised:
        attempts.failed(AWAY)  # a pause of 2 s, cut short by the stop
    timer.join()
    assert time.monotonic() - started < 1.9
    assert str(raised.value).startswith("task 1: stopped while Kafka did not take epoch 7")
    assert "given up uncommitted; its records are read again at the next start" in str(raised.value)
    assert raised.value.__cause__ is AWAY


def test_a_stop_asked_before_a_failure_gives_the_batch_up_at_once(tmp_path: Path) -> None:
    attempts = Attempts(settings(tmp_path, "5m"), 0, "epoch 2", lambda: True)
    with pytest.raises(BatchAbandonedError):
        attempts.failed(AWAY)
    assert attempts.made == 1

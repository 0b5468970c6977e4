"""Waits on a broker that is not there, cut short by a stop
(:mod:`window_operator.runtime.kafka_waits`)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer

from window_operator.broker import free_port
from window_operator.runtime.kafka_waits import BatchAbandonedError, flush, until_done


def nowhere(**config: object) -> Producer:
    """A producer of a broker that does not answer (nothing listens at its port)."""
    return Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", **config})


def test_a_flush_waits_its_time_in_steps_and_says_what_is_unacknowledged() -> None:
    producer = nowhere()
    producer.produce("t", b"v")
    started = time.monotonic()
    assert flush(producer, 1.5, lambda: False) == 1
    assert 1.4 < time.monotonic() - started < 5.0


def test_a_stop_cuts_a_flush_short() -> None:
    producer = nowhere()
    producer.produce("t", b"v")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(BatchAbandonedError, match="acknowledgement of the batch's records"):
        flush(producer, 300.0, stop.is_set)
    assert time.monotonic() - started < 30


def test_a_transactional_call_that_timed_out_is_called_again_until_its_time_is_up() -> None:
    producer = nowhere(**{"transactional.id": "waits"})
    calls: list[float] = []

    def init(seconds: float) -> None:
        calls.append(seconds)
        producer.init_transactions(seconds)

    with pytest.raises(KafkaException):  # its own timeout once the time is up
        until_done(init, 2.5, lambda: False, "the initialisation")
    assert calls[:2] == [1.0, 1.0] and len(calls) == 3
    assert calls[-1] <= 0.5 + 0.1


def test_a_stop_cuts_a_transactional_call_short() -> None:
    producer = nowhere(**{"transactional.id": "waits-stop"})
    with pytest.raises(BatchAbandonedError, match=r"initialisation waited \d+ s for the broker"):
        until_done(producer.init_transactions, 300.0, lambda: True, "the initialisation")


def test_without_a_stop_to_look_at_a_wait_is_one_call() -> None:
    calls: list[float] = []
    until_done(calls.append, 7.0, None, "a call")
    assert calls == [pytest.approx(7.0, abs=0.5)]

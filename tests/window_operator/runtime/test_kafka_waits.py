"""Waits on a broker that is not there, cut short by a stop
(:mod:`window_operator.runtime.kafka_waits`)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from window_operator.broker import free_port
from window_operator.runtime import kafka_waits
from window_operator.runtime.kafka_waits import BatchAbandonedError, flush, until_done


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop gives a wait up after 0.5 s of it, not 10 s (the tests' time)."""
    monkeypatch.setattr(kafka_waits, "STOP_GRACE_S", 0.5)


def nowhere(**config: object) -> Producer:
    """A producer of a broker that does not answer (nothing listens at its port)."""
    return Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", **config})


def test_a_flush_waits_its_time_in_steps_and_says_what_is_unacknowledged() -> None:
    producer = nowhere()
    producer.produce("t", b"v")
    started = time.monotonic()
    assert flush(producer, 1.5, lambda: False) == 1
    assert 1.4 < time.monotonic() - started < 5.0


@pytest.mark.usefixtures("short_grace")
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


@pytest.mark.usefixtures("short_grace")
def test_a_stop_cuts_a_transactional_call_short() -> None:
    producer = nowhere(**{"transactional.id": "waits-stop"})
    with pytest.raises(BatchAbandonedError, match=r"initialisation waited \d+ s for the broker"):
        until_done(producer.init_transactions, 300.0, lambda: True, "the initialisation")


def test_without_a_stop_to_look_at_a_wait_is_one_call() -> None:
    calls: list[float] = []
    until_done(calls.append, 7.0, None, "a call")
    assert calls == [pytest.approx(7.0, abs=0.5)]


def test_a_retriable_error_of_any_code_is_called_again() -> None:
    """librdkafka 2.x says why an ``init_transactions`` timed out: a retriable error with
    the coordinator's code (``COORDINATOR_LOAD_IN_PROGRESS`` after a broker restart on
    Kafka), not ``_TIMED_OUT``; the next call goes on (a review found it raised)."""
    loading = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True)
    errors = [loading, loading]
    calls: list[float] = []

    def init(seconds: float) -> None:
        calls.append(seconds)
        if errors:
            raise KafkaException(errors.pop())

    until_done(init, 60.0, lambda: False, "the producer's initialisation")
    assert len(calls) == 3


def test_an_error_that_needs_an_abort_is_not_called_again() -> None:
    abortable = KafkaError(KafkaError._TIMED_OUT, "timed out", txn_requires_abort=True)
    calls = 0

    def commit(seconds: float) -> None:
        nonlocal calls
        calls += 1
        raise KafkaException(abortable)

    with pytest.raises(KafkaException):
        until_done(commit, 30.0, lambda: False, "the commit")
    assert calls == 1


def test_a_call_that_fails_at_once_waits_out_its_step_before_the_next() -> None:
    """An error that comes back at once is not called again in a spin (a review counted
    2.5 million calls in 2 s)."""
    calls = 0

    def commit(seconds: float) -> None:
        nonlocal calls
        calls += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "t", retriable=True))

    with pytest.raises(KafkaException):
        until_done(commit, 2.5, lambda: False, "the commit")
    assert calls == 3  # steps of 1 s, 1 s and the last 0.5 s


def test_a_stop_does_not_give_up_a_commit_a_broker_takes_within_the_grace() -> None:
    """A graceful stop's last epoch, committed slowly by a broker that answers: taken,
    not given up at the first step."""
    done_at = time.monotonic() + 1.5

    def commit(seconds: float) -> None:  # resumable, as librdkafka's commit is
        if time.monotonic() + seconds < done_at:
            time.sleep(seconds)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "t", retriable=True))
        time.sleep(max(0.0, done_at - time.monotonic()))

    until_done(commit, 60.0, lambda: True, "the commit")

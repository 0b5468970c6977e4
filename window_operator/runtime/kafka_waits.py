"""Waits on the broker that a stop of the job cuts short.

A commit, a flush or a producer's initialisation waits for the broker up to
``processing.broker_timeout``. A long-running worker asked to stop meanwhile must not
wait that long for a broker that may not come back: these waits go in steps of a second
and look between steps whether the job was asked to stop (``stopping``); then they
raise :class:`BatchAbandonedError` (nothing of the batch was committed, and its records
are read again at the next start, as after a crash). Without ``stopping`` a wait is one
call. librdkafka lets a transactional call that timed out be called again, so the steps
wait exactly as one call would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from window_operator.errors import WindowOperatorError

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["BatchAbandonedError", "Stopping", "flush", "until_done"]

#: whether the job was asked to stop (None: a stop does not cut the wait short)
Stopping = Callable[[], bool] | None

#: how long one step of a wait lasts before it looks whether the job was asked to stop
STEP_S = 1.0


class BatchAbandonedError(WindowOperatorError):
    """The job was asked to stop while Kafka did not take a batch: nothing of it was
    committed, and it runs again at the next start."""


def until_done(
    call: Callable[[float], None], timeout_s: float, stopping: Stopping, what: str
) -> None:
    """``call(seconds)`` (``commit_transaction``, ``init_transactions``) until it returns
    within ``timeout_s`` in all; its last error once the time is up."""
    from confluent_kafka import KafkaError, KafkaException

    started = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - started)
        step = left if stopping is None else max(0.0, min(left, STEP_S))
        try:
            call(step)
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            timed_out = getattr(error, "code", lambda: None)() == KafkaError._TIMED_OUT
            if step >= left or not timed_out:
                raise
        _look(stopping, what, started)


def flush(producer: Producer, timeout_s: float, stopping: Stopping) -> int:
    """Wait for ``producer``'s records to be acknowledged, up to ``timeout_s``; how many
    are still not."""
    started = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - started)
        step = left if stopping is None else max(0.0, min(left, STEP_S))
        unacknowledged: int = producer.flush(step)
        if not unacknowledged or step >= left:
            return unacknowledged
        _look(stopping, "the acknowledgement of the batch's records", started)


def _look(stopping: Stopping, what: str, started: float) -> None:
    if stopping is not None and stopping():
        raise BatchAbandonedError(
            f"{what} waited {time.monotonic() - started:.0f} s for the broker"
        )

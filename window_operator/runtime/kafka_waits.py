"""Waits on the broker that a stop of the job cuts short.

A commit, a flush or a producer's initialisation waits for the broker up to
``processing.broker_timeout``. A long-running worker asked to stop meanwhile must not
wait that long for a broker that may not come back: these waits go in steps of a second
and look between steps whether the job was asked to stop (``stopping``); then they
raise :class:`BatchAbandonedError`: the batch is given up as a crash would leave it (its
records are read again at the next start, which also finds a commit the broker still
completed). A stop gives the batch up only once the wait has lasted
:data:`STOP_GRACE_S`: a broker that answers, slowly (a big epoch's flush), still takes
the last epoch of a graceful stop. Without ``stopping`` a wait is one call.

librdkafka lets a transactional call that timed out be called again, so the steps wait
as one call would: a call is made again only when its error says it may be
(``retriable()``, neither fatal nor requiring an abort), whatever its code (an
``init_transactions`` that timed out says why, as ``COORDINATOR_LOAD_IN_PROGRESS`` or
``CONCURRENT_TRANSACTIONS``), and never before its step is up.
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
#: how long a wait must have lasted before a stop gives its batch up
STOP_GRACE_S = 10.0


class BatchAbandonedError(WindowOperatorError):
    """The job was asked to stop while Kafka did not take a batch: it was given up as a
    crash would leave it, and runs again at the next start."""


def until_done(
    call: Callable[[float], None], timeout_s: float, stopping: Stopping, what: str
) -> None:
    """``call(seconds)`` (``commit_transaction``, ``init_transactions``) until it returns
    within ``timeout_s`` in all; its last error once the time is up."""
    from confluent_kafka import KafkaException

    started = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - started)
        step = left if stopping is None else max(0.0, min(left, STEP_S))
        step_ends = time.monotonic() + step
        try:
            call(step)
            return
        except KafkaException as exc:
            if step >= left or not _may_call_again(exc):
                raise
        # an error that came before the step was up: wait the rest, never spin
        while (rest := step_ends - time.monotonic()) > 0:
            _look(stopping, what, started)
            time.sleep(min(rest, 0.1))
        _look(stopping, what, started)


def _may_call_again(exc: BaseException) -> bool:
    """Whether librdkafka lets the transactional call that raised ``exc`` be called again
    (a retriable error, neither fatal nor one whose transaction must be aborted)."""
    error = exc.args[0] if exc.args else None

    def said(what: str) -> bool:
        method = getattr(error, what, None)
        return bool(callable(method) and method())

    return said("retriable") and not said("fatal") and not said("txn_requires_abort")


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
    """Raise :class:`BatchAbandonedError` when the job was asked to stop and the wait
    begun at ``started`` has lasted :data:`STOP_GRACE_S`."""
    waited = time.monotonic() - started
    if stopping is not None and waited >= STOP_GRACE_S and stopping():
        raise BatchAbandonedError(f"{what} waited {waited:.0f} s for the broker")

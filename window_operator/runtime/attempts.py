"""A state task's attempts at one batch while Kafka does not take it.

Another attempt runs at once after a fence (a new producer, the store caught up with
what the other one committed) and after a growing pause while the broker is away, until
``processing.broker_timeout``. A record Kafka refuses for its size would be refused
again: that stops the batch at once. Each fence is logged, and the first failure of a
broker away. A job asked to stop meanwhile (``stopping``) does not wait for the broker:
the batch is given up (:class:`BatchAbandonedError`) as a crash would leave it, and
runs again at the next start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from window_operator.errors import WindowOperatorError
from window_operator.runtime.kafka_failures import failed_fatally, fenced, refused_as_too_large
from window_operator.runtime.kafka_waits import BatchAbandonedError, Stopping
from window_operator.runtime.settings import TaskSettings

__all__ = ["Attempts", "BatchAbandonedError", "BrokerUnavailableError", "RecordTooLargeError"]

log = logging.getLogger(__name__)

#: how often a pause between attempts looks whether the job was asked to stop
_STOP_LOOK_S = 0.1


class BrokerUnavailableError(WindowOperatorError):
    """Kafka stayed unreachable for longer than ``processing.broker_timeout``."""


class RecordTooLargeError(WindowOperatorError):
    """Kafka refused a record of the batch as larger than it takes: retrying cannot help."""


@dataclass
class Attempts:
    """The failed attempts of state task ``task`` at the batch ``label`` names
    (``stopping``: whether the job was asked to stop; None: it is not asked here)."""

    settings: TaskSettings
    task: int
    label: str
    stopping: Stopping = None
    made: int = 0
    started: float = field(default_factory=time.monotonic)
    told_away: bool = False

    def failed(self, exc: BaseException) -> None:
        """An attempt failed with ``exc`` (Kafka did not take it): raise when another
        cannot help or the time is up; else say why and wait before the next."""
        self.made += 1
        if refused_as_too_large(exc):  # the same batch would be refused again
            raise RecordTooLargeError(
                f"task {self.task}: Kafka refused a record of {self.label} as too large "
                f"({exc}): a state value over the changelog's max.message.bytes, or an "
                "output over its topic's or the producer's message.max.bytes (see "
                "output.max_record_bytes); the batch was not committed and runs again at "
                "the next start"
            ) from exc
        replaced = fenced(exc) or failed_fatally(exc)
        waited = time.monotonic() - self.started
        if waited > self.settings.broker_timeout_s:
            raise BrokerUnavailableError(self._gave_up(exc, waited, replaced)) from exc
        if replaced:
            self._tell_replaced(exc)
        elif not self.told_away:
            self.told_away = True
            log.warning(
                "task %d: Kafka did not take %s (%s); trying again for up to %.0f s "
                "(processing.broker_timeout)",
                self.task,
                self.label,
                exc,
                self.settings.broker_timeout_s,
            )
        # a fenced producer is replaced at once; a broker away is waited for
        self._pause(0.0 if self.made == 1 else min(2.0 ** (self.made - 1), 10.0), exc)

    def _pause(self, seconds: float, exc: BaseException) -> None:
        """Wait ``seconds`` before the next attempt, unless the job is asked to stop."""
        until = time.monotonic() + seconds
        while True:
            if self.stopping is not None and self.stopping():
                raise self.abandoned(exc) from exc
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, _STOP_LOOK_S))

    def abandoned(self, why: BaseException) -> BatchAbandonedError:
        """The batch given up, uncommitted, as the job was asked to stop while Kafka did
        not take it (``why``: the last failure, or the wait that the stop cut short)."""
        return BatchAbandonedError(
            f"task {self.task}: stopped while Kafka did not take {self.label} ({why}): "
            "given up uncommitted; its records are read again at the next start"
        )

    def _tell_replaced(self, exc: BaseException) -> None:
        """A producer fenced by another of the task's transactional id, or failed
        fatally otherwise (librdkafka's word, while producing, for a fence it learnt):
        the batch runs again with a new one, caught up with what the other committed."""
        why = "fenced this one" if fenced(exc) else "fenced this one, or it failed fatally"
        log.warning(
            "task %d: another producer of its transactional id %s (%s; a zombie attempt, "
            "or a second copy of job %r, with other state.dir or spark.checkpoint_dir): "
            "%s runs again with a new one, caught up with what the other committed",
            self.task,
            why,
            exc,
            self.settings.job,
            self.label,
        )

    def _gave_up(self, exc: BaseException, waited: float, replaced: bool) -> str:
        """Why the task stops after ``processing.broker_timeout`` of failed attempts."""
        if replaced:  # the last attempt was fenced: a broker away would not say so
            return (
                f"task {self.task}: {self.label}: its producer was fenced ({exc}) when "
                f"{self.made} attempt(s) had taken {waited:.0f} s, past "
                "processing.broker_timeout: if another copy of job "
                f"{self.settings.job!r} runs with the same transactional ids (other "
                "state.dir or spark.checkpoint_dir), stop it; nothing of the batch was "
                "committed here, and it runs again at the next start"
            )
        return (
            f"task {self.task}: Kafka at {self.settings.bootstrap_servers} did not take "
            f"{self.label} for {waited:.0f} s ({exc}); nothing of it was committed: "
            "restart the job once the broker is back"
        )

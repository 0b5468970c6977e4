"""The exceptions of the window operator package, under one base class.

Bad *input* is never an exception: a record that cannot be processed becomes an
:class:`~window_operator.results.ErrorRecord` with a code. These are for the cases a
caller must act on: a store written by another job shape, a source name that does not
exist, outputs the broker did not acknowledge. Store-level failures (corrupt bytes, a
closed store, a changelog that cannot be read) are :class:`stores.errors.StoreError`.

Every public exception the package defines, wherever it lives (``ConfigError``,
``KafkaAdminError``, ``CliError`` ...), derives from :class:`WindowOperatorError`, so a
library caller catches them all in one clause (``tests/window_operator/test_errors.py``
walks the package to check it). Inside a job, a bad record still becomes an error
record, never one of these.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping

# The store's errors a library caller meets (README "Library use": a task store already
# open in this process is refused with ``StoreLockedError``, "all in
# window_operator.errors"); they stay under :class:`stores.errors.StoreError`.
from stores.errors import StateCorruptError, StoreError, StoreLockedError

__all__ = [
    "AFRESH",
    "BatchRefusedError",
    "IncompatibleStateError",
    "InvalidArgumentError",
    "JobSetupError",
    "OperatorClosedError",
    "OperatorFailedError",
    "USER_CODE_ERRORS",
    "OutputSendError",
    "StartingOffsetsError",
    "StateCorruptError",
    "StoreError",
    "StoreLockedError",
    "TimerPassError",
    "UnknownSourceError",
    "UserCodeExitError",
    "UserOpError",
    "WindowOperatorError",
    "exception_text",
    "show",
]

#: How a job is started afresh, for the messages that tell a user to. The changelog
#: topic is named after the job (``<job>-state-changelog``), and a state task restores
#: an empty store from it: another state.dir and spark.checkpoint_dir alone continue the
#: old state (and write to the old job's changelog), they do not start afresh.
AFRESH = (
    "another job name, or delete the job's changelog topic <job>-state-changelog "
    "together with its state.dir and spark.checkpoint_dir: another state.dir and "
    "spark.checkpoint_dir alone are restored from that changelog"
)


class WindowOperatorError(Exception):
    """Base class of the errors raised by :mod:`window_operator`."""


class IncompatibleStateError(WindowOperatorError, ValueError):
    """A store holds state of another window shape or job: it cannot be continued."""


class JobSetupError(WindowOperatorError):
    """The job cannot run as it is set up, whatever the records: an operator raising it
    fails its task instead of sending the records it was given to the error output."""


class OperatorFailedError(WindowOperatorError):
    """An operator whose flush failed, or whose input or timer call raised part-way: its
    memory may be ahead of what it wrote, or half-updated, so it takes and writes
    nothing more. Reopen the task: its store holds the last committed state, and the
    input since then is read again (replays are recognised)."""


class OperatorClosedError(WindowOperatorError):
    """An operator used after :meth:`close`: open the task again to go on."""


class InvalidArgumentError(WindowOperatorError, ValueError):
    """An operator call given arguments it cannot take (a position that is not a
    non-negative integer, columns of different lengths): raised before any change."""


class BatchRefusedError(WindowOperatorError):
    """A micro-batch the stopping job did not start (``StreamingJob.stop_before_next_batch``:
    it runs at the next start)."""


class StartingOffsetsError(WindowOperatorError, ValueError):
    """``--starting-offsets`` is not earliest, latest or offsets JSON of the inputs."""


class TimerPassError(WindowOperatorError):
    """A timer pass over the state tasks failed (the message names the task's error):
    the one a restarted job runs before its query starts, or the last one of an
    ``available_now`` run; the idle-time passes are retried instead."""


class UnknownSourceError(WindowOperatorError, ValueError):
    """A record names an input the operator does not have."""


class OutputSendError(WindowOperatorError):
    """Results, error records or changelog records were not acknowledged by Kafka
    (``kafka_codes``: the ``KafkaError`` codes of its refusals, when it said)."""

    def __init__(self, message: str, kafka_codes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.kafka_codes = kafka_codes


class UserCodeExitError(WindowOperatorError):
    """User code run by the job (a user-defined operation) called ``sys.exit``: an
    error of that code, never the end of the job with the exit status it chose."""

    @classmethod
    def of(cls, exc: SystemExit) -> UserCodeExitError:
        """The error of ``exc``, the ``SystemExit`` user code raised (naming the line
        that raised it)."""
        where = _raised_at(exc)
        return cls(f"a user-defined operation called sys.exit({exc.code!r}){where}")


class UserOpError(WindowOperatorError):
    """A user-defined operation raised where no record nor window can take the blame
    (``combine`` of two accumulators): the job stops, naming the operation, the method
    and the line that raised (before, a traceback from inside the engine)."""

    @classmethod
    def of(cls, name: str, method: str, exc: Exception, what: str = "aggregation") -> UserOpError:
        """The error of ``exc``, raised by ``method`` of aggregation ``name`` (or of
        ``what`` else: an ``operation`` named by its op)."""
        where = _raised_at(exc, function=False)
        return cls(f"{what} {name!r}: {method} raised {exception_text(exc)}{where}")


def _raised_at(exc: BaseException, *, function: bool = True) -> str:
    """`` in combine (ops.py, line 12)``: where ``exc`` was raised (its function's name
    unless not ``function``; empty without a traceback)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    name = f" in {last.name}" if function else ""
    return f"{name} ({last.filename}, line {last.lineno})"


#: What user code may raise where the job blames a record or a window on it: any
#: exception, and ``SystemExit`` (``sys.exit`` in an operation). KeyboardInterrupt
#: still stops the job.
USER_CODE_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit)


def exception_text(exc: BaseException) -> str:
    """``ValueError: the message`` (the name alone when the message is empty): how an
    error record's reason names an exception that user code or a codec raised."""
    try:
        detail = str(exc)
    except Exception:  # noqa: BLE001 - user code's exception may fail to print itself
        detail = "<its message could not be printed>"
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def show(value: object) -> str:
    """A short YAML-flavoured rendering of an input value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            text = str(value)
        except ValueError:  # an int of more digits than str() converts
            return f"an integer of about {int(abs(int(value)).bit_length() * 0.30103)} digits"
        digits = len(text.lstrip("-"))
        return text if len(text) <= 60 else f"{text[:20]}... ({digits} digits)"
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "...'"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__

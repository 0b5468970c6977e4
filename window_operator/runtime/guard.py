"""Keeping a task alive through records it cannot handle.

Bad input is data: the decoders turn every payload they cannot use into an error record
with a code. This module covers what is left, an unexpected exception while decoding
or inside the operator (a bug, or a user-defined operation that fails on some value).
Spark would retry the task on the same micro-batch forever, so instead the task finds
the records that cause it and sends each to the error topic as ``INTERNAL_ERROR`` with
its source position, and processes the rest:

* decoding: when decoding a batch raises, each payload is decoded on its own, and a
  payload whose decoding raises becomes an error record;
* the operator: an operator whose ``add_batch`` raised is in an unknown state, so it is
  dropped and a fresh one opened from the store (nothing is written to the store before
  the flush after ``add_batch``). The batch is then bisected: a part that raises is
  split, a part that succeeds stays applied, and after every failure the operator is
  rebuilt and the rows applied so far are applied again as one batch. A single row
  that raises alone is the culprit.

Both searches are deterministic, so a replay of the batch gives the same verdicts and
state. Failures that are not about a record propagate: ``MemoryError``, ``OSError``, a
store failure, a :class:`~window_operator.errors.JobSetupError` (e.g. an offsets window
given a second partition), and a batch of more than :data:`ALL_FAILED_ROWS` rows in
which every row fails on its own: the operation fails whatever it is given (a bug), and
the job stops rather than send all its input to the error topic (Kafka Streams and
Flink fail alike). A smaller batch whose rows all fail has each rejected, with a
warning: failing the task there made a batch of two bad records, and no good one, fail
at every retry and every restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from stores.errors import StoreError
from window_operator.arrays import IntArray
from window_operator.codecs.inputs import InputDecoder
from window_operator.errors import USER_CODE_ERRORS, JobSetupError, exception_text
from window_operator.events import DecodeResult, EventBatch
from window_operator.kernel import StepStats, WindowOperator
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "ALL_FAILED_ROWS",
    "FATAL_ERRORS",
    "Applied",
    "add_guarded",
    "decode_guarded",
    "internal_error",
]

_log = logging.getLogger(__name__)

#: The most rows of a batch that may all fail on their own and be rejected: beyond,
#: the operation is taken to fail whatever it is given, and the task fails.
ALL_FAILED_ROWS = 16

#: Exceptions never blamed on a record: the task fails and Spark retries it.
FATAL_ERRORS: tuple[type[BaseException], ...] = (MemoryError, OSError, StoreError, JobSetupError)


def internal_error(
    stage: str,
    exc: BaseException,
    *,
    topic: str | None,
    partition: int,
    offset: int,
    raw: bytes | None,
) -> ErrorRecord:
    """The error record of a record whose ``stage`` raised ``exc`` (also logged)."""
    where = f"{topic}/{partition}@{offset}" if topic else f"partition {partition} offset {offset}"
    _log.warning("%s raised on %s; the record goes to the error output", stage, where, exc_info=exc)
    return ErrorRecord(
        code=ErrorCode.INTERNAL_ERROR,
        reason=f"{stage} raised {exception_text(exc)}",
        partition=partition,
        offset=offset,
        raw=raw,
        topic=topic,
    )


def decode_guarded(
    decoder: InputDecoder,
    payloads: Sequence[bytes | None],
    *,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    record_times: Sequence[int] | None = None,
    record_keys: Sequence[bytes | None] | None = None,
) -> DecodeResult:
    """``decoder.decode`` of the payloads (with their Kafka timestamps and keys); a
    payload whose decoding raises is an error."""
    try:
        return decoder.decode(
            payloads,
            partition=partition,
            offsets=offsets,
            topic=topic,
            record_times=record_times,
            record_keys=record_keys,
        )
    except FATAL_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - narrowed down to the payloads below
        pass
    parts: list[DecodeResult] = []
    for i, (payload, offset) in enumerate(zip(payloads, offsets, strict=True)):
        try:
            parts.append(
                decoder.decode(
                    [payload],
                    partition=partition,
                    offsets=[offset],
                    topic=topic,
                    record_times=None if record_times is None else [record_times[i]],
                    record_keys=None if record_keys is None else [record_keys[i]],
                )
            )
        except FATAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - the record goes to the error output
            err = internal_error(
                "decoding", exc, topic=topic, partition=partition, offset=offset, raw=payload
            )
            parts.append(DecodeResult(decoder.record_decoder.decode_records([]).batch, [err], []))
    return DecodeResult(
        EventBatch.concat([p.batch for p in parts]),
        [err for p in parts for err in p.errors],
        [i for i, p in enumerate(parts) for _ in p.kept],
    )


B = TypeVar("B")
R = TypeVar("R")


@dataclass
class Applied(Generic[B, R]):
    """The outcome of :func:`add_guarded`."""

    #: The operator holding the applied rows (a fresh one if the first raised).
    operator: WindowOperator[B, R, object]
    #: What the operator's ``add_batch`` calls that stuck did.
    stats: StepStats = field(default_factory=StepStats)

    @property
    def applied(self) -> int:
        """Rows the operator applied."""
        return self.stats.applied

    #: Batch rows that raised on their own, with the exception.
    failed: list[tuple[int, BaseException]] = field(default_factory=list)


def add_guarded(
    open_operator: Callable[[], WindowOperator[B, R, object]],
    operator: WindowOperator[B, R, object],
    batch: B,
    take: Callable[[B, IntArray], B],
    rows: int,
) -> Applied[B, R]:
    """``operator.add_batch(batch)``; rows that make it raise are isolated (module docstring).

    ``take(batch, idx)`` selects rows of the batch, ``rows`` is its length.
    """
    try:
        return Applied(operator, operator.add_batch(batch))
    except FATAL_ERRORS:
        raise
    except USER_CODE_ERRORS as exc:  # narrowed down to rows below
        first = exc
    result = _bisect(open_operator, batch, take, rows)
    if rows > ALL_FAILED_ROWS and len(result.failed) == rows:
        raise first  # not about the records: the operation fails whatever it is given
    if rows > 1 and len(result.failed) == rows:
        _log.warning(
            "every record of a batch of %d made the operator raise (%s): each is rejected "
            "as INTERNAL_ERROR (a batch of more than %d would fail the task)",
            rows,
            exception_text(result.failed[0][1]),
            ALL_FAILED_ROWS,
        )
    return result


def _bisect(
    open_operator: Callable[[], WindowOperator[B, R, object]],
    batch: B,
    take: Callable[[B, IntArray], B],
    rows: int,
) -> Applied[B, R]:
    result: Applied[B, R] = Applied(open_operator())
    good: list[int] = []
    pending = [(0, rows)]
    while pending:
        lo, hi = pending.pop()
        try:
            part = take(batch, np.arange(lo, hi, dtype=np.int64))
            result.stats += result.operator.add_batch(part)
            good.extend(range(lo, hi))
            continue
        except FATAL_ERRORS:
            raise
        except USER_CODE_ERRORS as exc:  # narrowed down below
            error = exc
        result.operator = open_operator()
        result.stats = StepStats()
        if good:
            result.stats = result.operator.add_batch(take(batch, np.asarray(good)))
        if hi - lo == 1:
            result.failed.append((lo, error))
        else:
            mid = (lo + hi) // 2
            pending += [(mid, hi), (lo, mid)]
    return result

"""Window results that cannot be written go to the errors, not through the job.

A result cannot be written when a user-defined operation's ``finish`` raised for its
window (its value is a :class:`~window_operator.results.FailedValue`), or when the
output format cannot hold one of its values (a Python set in JSON, a string where the
Avro schema wants a number). :func:`encode_checked` writes the rest of the batch and
makes each such result a ``RESULT_ERROR`` record naming the key, the window and why
(keyed by the window's output key): a job is not stopped, nor its other results held
back, by one window a user function cannot finish. The fast path is one encode of the
whole batch and a scan of its value types; only a batch that fails either is encoded
row by row to find the rows at fault.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from window_operator.codecs.result_json import result_key
from window_operator.errors import exception_text
from window_operator.results import ErrorCode, ErrorRecord, FailedValue, ResultBatch

__all__ = ["CheckedResults", "encode_checked"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: What an encoder raises for a value it cannot write (fastavro: ``struct.error`` for a
#: non-number in a double field).
_REFUSED = (TypeError, ValueError, OverflowError, struct.error)


@dataclass(frozen=True, slots=True)
class CheckedResults(Generic[T]):
    """A result batch's encoded rows, and the error records of those not written."""

    records: list[T]
    errors: list[ErrorRecord]


def encode_checked(
    batch: ResultBatch, encode: Callable[[ResultBatch], Sequence[T]]
) -> CheckedResults[T]:
    """``encode(batch)`` but the rows that hold a ``FailedValue`` (which an encoder may
    not write, nor silently drop, as an Avro schema without that field would) or that the
    encoder refuses: a ``RESULT_ERROR`` record for each of those (also logged, and the
    first ``finish`` that raised with its traceback). An encoder raising anything but a
    refusal of a value (``TypeError``, ``ValueError``, ``OverflowError``,
    ``struct.error``) is a bug, and raises."""
    try:
        records = list(encode(batch))
    except _REFUSED:
        pass
    else:
        if not _has_failed(batch):
            return CheckedResults(records, [])
    good: list[int] = []
    errors: list[ErrorRecord] = []
    raised: tuple[ErrorRecord, BaseException] | None = None  # the first finish that raised
    for i in range(len(batch)):
        row = batch.take([i])
        failed = next(
            (v for col in row.values.values() if isinstance(v := col[0], FailedValue)), None
        )
        if failed is not None:
            errors.append(_error(row, failed.reason))
            if raised is None and failed.error is not None:
                raised = (errors[-1], failed.error)
            continue
        try:
            encode(row)
        except _REFUSED as error:
            errors.append(_error(row, _refused(row, encode, error)))
        else:
            good.append(i)
    if errors:
        _log.warning(
            "%d window result(s) not written (RESULT_ERROR in the error output), the first: %s",
            len(errors),
            errors[0].reason,
        )
    if raised is not None:
        _log.warning("a user finish raised: %s", raised[0].reason, exc_info=raised[1])
    return CheckedResults(list(encode(batch.take(good))) if good else [], errors)


def _refused(row: ResultBatch, encode: Callable[[ResultBatch], object], error: Exception) -> str:
    """Why the encoder refused a one-row batch, naming the aggregation whose value it is
    when the row can be written with that value alone left out (as null)."""
    why = f"cannot be written: {exception_text(error)}"
    for name in row.values:
        try:
            encode(replace(row, values={**row.values, name: [None]}))
        except _REFUSED:
            continue
        return f"aggregation {name!r}: its value {why}"
    return why


def _has_failed(batch: ResultBatch) -> bool:
    """Whether a value of ``batch`` is a FailedValue (a scan of the value types, in C)."""
    return any(FailedValue in map(type, col) for col in batch.values.values())


def _error(row: ResultBatch, why: str) -> ErrorRecord:
    """The RESULT_ERROR record of a one-row batch, keyed by its window's output key; its
    reason begins ``the ON_TIME result of key 'k', window [0, 10000): ``."""
    key, start, end = row.keys[0], int(row.window_start[0]), int(row.window_end[0])
    part = None if row.partition is None else int(row.partition[0])
    of_part = "" if part is None else f" of partition {part}"
    return ErrorRecord(
        code=ErrorCode.RESULT_ERROR,
        reason=f"the {row.kind.value} result of key {key!r}, window [{start}, {end}){of_part}: "
        + why,
        key=result_key(key, start, end, part),
    )

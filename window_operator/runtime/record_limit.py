"""Records larger than the output topics take (``output.max_record_bytes``).

Kafka refuses a record over its topic's ``max.message.bytes`` (1 MB by default), and
librdkafka one over the producer's ``message.max.bytes``. Such a record cannot be sent
however often the batch is retried, so one large input record the job rejects, or one
large window result, would stop every batch after it. They are written smaller instead:

- a window result over the bound is a ``RESULT_ERROR`` record (keyed by its window's
  output key) in the errors topic, as a result the output format cannot hold is;
- a rejected input record over the bound goes to the errors topic without its copy
  (key and value left out, the reason says so): its source topic, partition and offset
  name it in the input.

An error record's reason (a header) is cut to :data:`MAX_REASON_BYTES` first: a user
operation's exception may quote a whole value. The bound counts the headers too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "MAX_REASON_BYTES",
    "FittedResults",
    "KafkaRecord",
    "fit_errors",
    "fit_results",
    "too_large",
]

KafkaRecord = tuple[bytes | None, bytes | None]
#: The longest reason an error record carries (UTF-8 bytes); a longer one is cut.
MAX_REASON_BYTES = 8192
#: Room for an error record's other headers (code, source topic, partition, offset).
_HEADER_ROOM = 512


def _size(data: bytes | None) -> int:
    return 0 if data is None else len(data)


@dataclass(frozen=True, slots=True)
class FittedResults:
    """The results to send, and the error records of those over the bound."""

    records: Sequence[KafkaRecord]
    errors: list[ErrorRecord]


def fit_results(records: Sequence[KafkaRecord], max_bytes: int) -> FittedResults:
    """Split off the encoded results whose key and value exceed ``max_bytes``."""
    if all(_size(k) + _size(v) <= max_bytes for k, v in records):
        return FittedResults(records, [])
    kept: list[KafkaRecord] = []
    errors: list[ErrorRecord] = []
    for record in records:
        error = too_large(record, max_bytes)
        if error is None:
            kept.append(record)
        else:
            errors.append(error)
    return FittedResults(kept, errors)


def too_large(record: KafkaRecord, max_bytes: int) -> ErrorRecord | None:
    """The ``RESULT_ERROR`` of an encoded result whose key and value exceed
    ``max_bytes`` (``None``: it fits)."""
    key, value = record
    size = _size(key) + _size(value)
    if size <= max_bytes:
        return None
    shown = (key or b"")[:200].decode("utf-8", "replace")
    reason = (
        f"the result keyed {shown} is {size} bytes, more than output.max_record_bytes "
        f"({max_bytes}) lets the job write"
    )
    fits = key is not None and len(key) <= max_bytes
    return ErrorRecord(ErrorCode.RESULT_ERROR, reason, key=key if fits else None)


def fit_errors(errors: Sequence[ErrorRecord], max_bytes: int) -> list[ErrorRecord]:
    """``errors``, reasons cut to :data:`MAX_REASON_BYTES`, each whose copy (key and
    value) with its headers exceeds ``max_bytes`` without it."""
    out: list[ErrorRecord] = []
    for err in errors:
        err = _short_reason(err)
        copy = _size(err.key) + _size(err.raw)
        if copy + len(err.reason.encode()) + _HEADER_ROOM <= max_bytes:
            out.append(err)
            continue
        reason = (
            f"{err.reason} (the record is not copied here: its key and value are {copy} "
            f"bytes, more than output.max_record_bytes ({max_bytes}) lets the job write "
            "with its headers; its source position names it)"
        )
        out.append(replace(err, reason=reason, key=None, raw=None))
    return out


def _short_reason(err: ErrorRecord) -> ErrorRecord:
    """``err`` with its reason cut to :data:`MAX_REASON_BYTES` (saying so)."""
    data = err.reason.encode()
    if len(data) <= MAX_REASON_BYTES:
        return err
    kept = data[:MAX_REASON_BYTES].decode("utf-8", "ignore")
    return replace(err, reason=f"{kept}... ({len(data) - len(kept.encode())} bytes cut)")

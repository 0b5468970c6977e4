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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from window_operator.results import ErrorCode, ErrorRecord

__all__ = ["FittedResults", "fit_errors", "fit_results"]

KafkaRecord = tuple[bytes | None, bytes | None]


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
    for key, value in records:
        size = _size(key) + _size(value)
        if size <= max_bytes:
            kept.append((key, value))
            continue
        shown = (key or b"")[:200].decode("utf-8", "replace")
        reason = (
            f"the result keyed {shown} is {size} bytes, more than output.max_record_bytes "
            f"({max_bytes}) lets the job write"
        )
        fits = key is not None and len(key) <= max_bytes
        errors.append(ErrorRecord(ErrorCode.RESULT_ERROR, reason, key=key if fits else None))
    return FittedResults(kept, errors)


def fit_errors(errors: Sequence[ErrorRecord], max_bytes: int) -> list[ErrorRecord]:
    """``errors``, each whose copy (key and value) exceeds ``max_bytes`` without it."""
    out: list[ErrorRecord] = []
    for err in errors:
        size = _size(err.key) + _size(err.raw)
        if size <= max_bytes:
            out.append(err)
            continue
        reason = (
            f"{err.reason} (the record is not copied here: its key and value are {size} "
            f"bytes, more than output.max_record_bytes ({max_bytes}); its source position "
            "names it)"
        )
        out.append(replace(err, reason=reason, key=None, raw=None))
    return out

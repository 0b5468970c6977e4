"""What the operators emit: window results and error records."""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ErrorCode", "ErrorRecord", "FailedValue", "Kind", "ResultBatch", "WindowResult"]


class Kind(enum.StrEnum):
    """Why a window result was emitted (the seed's three emission policies, plus retraction)."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
    #: The window no longer exists (a session merged or moved): drop what was emitted for it.
    RETRACT = "RETRACT"


class FailedValue:
    """The value of an aggregation whose ``finish`` raised for this window.

    It stands in the window's values where the value would be; such a result is not
    written to the output: it goes to the errors as ``RESULT_ERROR`` with ``reason``.
    Not a dataclass: orjson writes dataclasses as JSON objects, and no encoder may
    write this one.
    """

    __slots__ = ("error", "reason")

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        self.reason = reason
        #: what ``finish`` raised (for the log's traceback)
        self.error = error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FailedValue) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(self.reason)

    def __repr__(self) -> str:
        return f"FailedValue({self.reason!r})"


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One window result; the latest record per window is the answer.

    A window is ``(key, window_start, window_end)``; windows bounded by offsets
    (``offsets`` windows, tuple sessions) belong to one input partition, which
    ``partition`` names (``None`` for every other window).
    """

    key: str
    window_start: int
    window_end: int
    kind: Kind
    update_seq: int
    values: dict[str, Any]
    partition: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``simulate`` and the output topic (``partition`` after
        ``window_end``, only for windows of one partition)."""
        doc: dict[str, Any] = {
            "key": self.key,
            "window_start": self.window_start,
            "window_end": self.window_end,
        }
        if self.partition is not None:
            doc["partition"] = self.partition
        doc["kind"] = self.kind.value
        doc["update_seq"] = self.update_seq
        doc["values"] = self.values
        return doc


@dataclass(slots=True)
class ResultBatch:
    """Columnar window results of one kind, as produced on the hot path.

    ``values`` maps each aggregation name to a list aligned with ``keys``;
    ``partition`` is every row's input partition for windows bounded by offsets, and
    ``None`` for every other window (see :class:`WindowResult`).
    """

    kind: Kind
    keys: list[str]
    window_start: npt.NDArray[np.int64]
    window_end: npt.NDArray[np.int64]
    update_seq: npt.NDArray[np.int64]
    values: dict[str, list[Any]] = field(default_factory=dict)
    partition: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, idx: list[int]) -> ResultBatch:
        """The rows ``idx``, in that order."""
        rows = np.asarray(idx, dtype=np.int64)
        return ResultBatch(
            kind=self.kind,
            keys=[self.keys[i] for i in idx],
            window_start=self.window_start[rows],
            window_end=self.window_end[rows],
            update_seq=self.update_seq[rows],
            values={name: [col[i] for i in idx] for name, col in self.values.items()},
            partition=None if self.partition is None else self.partition[rows],
        )

    def to_results(self) -> list[WindowResult]:
        """Materialize one :class:`WindowResult` per row."""
        names = list(self.values)
        cols = [self.values[n] for n in names]
        starts = self.window_start.tolist()
        ends = self.window_end.tolist()
        seqs = self.update_seq.tolist()
        parts = [None] * len(self) if self.partition is None else self.partition.tolist()
        return [
            WindowResult(
                key=k,
                window_start=starts[i],
                window_end=ends[i],
                kind=self.kind,
                update_seq=seqs[i],
                values={n: c[i] for n, c in zip(names, cols, strict=True)},
                partition=parts[i],
            )
            for i, k in enumerate(self.keys)
        ]


class ErrorCode(enum.StrEnum):
    """Why an input record was rejected, or a result not written (the README lists the
    rules behind each code)."""

    #: Not one JSON document: broken or empty text, invalid UTF-8, data after the
    #: document, nesting deeper than 1024 levels, or a null payload (a tombstone).
    BAD_JSON = "BAD_JSON"
    #: Not one Avro record of the job's schema (or bad Confluent framing).
    BAD_AVRO = "BAD_AVRO"
    NOT_AN_OBJECT = "NOT_AN_OBJECT"
    MISSING_TIMESTAMP = "MISSING_TIMESTAMP"
    #: Not a number (or ISO-8601 string) of the configured unit, non-finite, out of range.
    BAD_TIMESTAMP = "BAD_TIMESTAMP"
    MISSING_KEY = "MISSING_KEY"
    BAD_KEY = "BAD_KEY"
    MISSING_FIELD = "MISSING_FIELD"
    WRONG_TYPE = "WRONG_TYPE"
    #: A value field read by the job holds NaN or an infinity.
    NON_FINITE_VALUE = "NON_FINITE_VALUE"
    #: The event time is further ahead of the record's arrival than ``watermark.max_future``.
    FUTURE_TIMESTAMP = "FUTURE_TIMESTAMP"
    OUT_OF_RETENTION = "OUT_OF_RETENTION"
    UNKNOWN_SOURCE = "UNKNOWN_SOURCE"
    #: Processing the record raised an unexpected exception (a bug, or a user-defined
    #: operation that fails on it); the reason names the exception.
    INTERNAL_ERROR = "INTERNAL_ERROR"
    #: Not an input record: a window result that could not be made (a user-defined
    #: operation's ``finish`` raised) or written (the output format cannot hold a value);
    #: the reason names the key, the window and the exception.
    RESULT_ERROR = "RESULT_ERROR"


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """A rejected input record, with the reason and where it came from (or, as
    ``RESULT_ERROR``, a window result that was not written: no position, no bytes)."""

    code: ErrorCode
    reason: str
    partition: int | None = None
    offset: int | None = None
    raw: bytes | None = None
    topic: str | None = None
    #: The original Kafka record key, when the record came from Kafka.
    key: bytes | None = None
    #: The job's name of the input (a join's ``left`` / ``right`` name), when it has several:
    #: set by the job and ``simulate`` (a join's operator alone names the ``topic``).
    source: str | None = None
    #: The original Kafka record timestamp (epoch ms), when the record came from Kafka
    #: with one (the event time of an input with ``timestamp_from: kafka``).
    timestamp: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``raw`` is the raw bytes read as UTF-8, with replacement
        characters where they are not UTF-8; then ``raw_base64`` holds them exactly."""
        doc: dict[str, Any] = {
            "code": self.code.value,
            "reason": self.reason,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "raw": None,
        }
        if self.raw is not None:
            try:
                doc["raw"] = self.raw.decode("utf-8")
            except UnicodeDecodeError:
                doc["raw"] = self.raw.decode("utf-8", "replace")
                doc["raw_base64"] = base64.b64encode(self.raw).decode("ascii")
        return doc

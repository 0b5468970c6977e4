"""The event time of a record: a time field read in its unit, or the Kafka record timestamp.

A time that cannot be one is a :class:`~window_operator.rejections.RecordRejected` with
its reason (``MISSING_TIMESTAMP``, ``BAD_TIMESTAMP``), never an exception past the
decoder. Event times stay within ``±2^61`` ms, so that window arithmetic never overflows.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import numpy as np

from window_operator.rejections import RecordRejected, show
from window_operator.results import ErrorCode
from window_operator.timeunits import number_to_ms

__all__ = [
    "MAX_ABS_TS",
    "NO_RECORD_TIME",
    "TimestampUnit",
    "field_time_ms",
    "record_time_ms",
]

TimestampUnit = Literal["ms", "s", "us", "ns", "iso8601"]

#: Event times must fit comfortably in a signed 64-bit millisecond count.
MAX_ABS_TS: Final = 2**61
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
#: Why a record is rejected when the job reads the Kafka record timestamp and it has none.
NO_RECORD_TIME: Final = (
    "the record has no Kafka timestamp, which is its event time with timestamp_from: kafka "
    "(in simulate: the line's wall_ms, an integer from 0 to 2^62)"
)


def field_time_ms(raw: Any, unit: TimestampUnit, name: str | None) -> int:
    """Event time in ms from the value ``raw`` of the time field ``name``, read in
    ``unit``, or raise a rejection."""
    if raw.__class__ is int and unit == "ms" and -MAX_ABS_TS < raw < MAX_ABS_TS:
        return int(raw)  # the usual case, first
    if unit == "iso8601":
        return _iso_time_ms(raw, name)
    if isinstance(raw, np.number):  # a NumPy scalar (a row of an array): its value
        raw = raw.item()
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP,
            f"timestamp field {name!r} must be a number ({unit}), got {show(raw)}"
            + _text_hint(raw),
        )
    if isinstance(raw, float) and not math.isfinite(raw):
        raise RecordRejected(ErrorCode.BAD_TIMESTAMP, f"timestamp field {name!r} is {raw}")
    ts = number_to_ms(raw, unit)
    if not -MAX_ABS_TS < ts < MAX_ABS_TS:
        raise RecordRejected(ErrorCode.BAD_TIMESTAMP, f"timestamp {raw!r} ({unit}) is out of range")
    return int(ts)


def _text_hint(raw: Any) -> str:
    """What a time written as text needs, for a job that reads numbers."""
    if not isinstance(raw, str):
        return ""
    text = raw.strip()
    if text.lstrip("+-").isdigit():
        return " (a number written as text is not read: write it as a JSON number)"
    if len(text) >= 10 and text[4:5] == "-" and text[7:8] == "-":
        return " (for ISO-8601 times, set the job's timestamp_unit: iso8601)"
    return ""


def _iso_time_ms(raw: Any, name: str | None) -> int:
    """An ISO-8601 time with a time zone, in epoch ms (exact: no float seconds)."""
    if not isinstance(raw, str):
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP,
            f"timestamp field {name!r} must be an ISO-8601 string, got {show(raw)}",
        )
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP,
            f"timestamp field {name!r} is not an ISO-8601 time: {show(raw)}",
        ) from None
    if dt.tzinfo is None:
        date_only = raw[10:11] in ("", "Z", "z", "+", "-")
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP,
            f"timestamp {raw!r} is a date without a time of day"
            if date_only
            else f"timestamp {raw!r} has no time zone (add Z or an offset like +00:00)",
        )
    return (dt - _EPOCH) // _ONE_MS


def record_time_ms(stamp: int | None) -> int:
    """The Kafka record timestamp ``stamp`` (epoch ms; ``-1`` or ``None``: none) as the
    event time, or raise a rejection."""
    if stamp is None or stamp == -1:
        raise RecordRejected(ErrorCode.MISSING_TIMESTAMP, NO_RECORD_TIME)
    if stamp < 0:
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP, f"the Kafka record timestamp {stamp} is negative"
        )
    if stamp >= MAX_ABS_TS:
        raise RecordRejected(
            ErrorCode.BAD_TIMESTAMP, f"the Kafka record timestamp {stamp} is out of range"
        )
    return int(stamp)

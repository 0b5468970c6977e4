"""Decoded input: columnar event batches, and the decoder that builds them from records.

The decoder is the boundary where bad input becomes an :class:`ErrorRecord` with a
reason instead of an exception: broken JSON, a record that is not an object, a missing
or non-numeric timestamp, a missing key, a value of the wrong type, a non-finite number
(NaN, an infinity) where the job reads it. Everything past it works on clean columns:
finite numbers, keys that encode as UTF-8, object values that serialize.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.columns import (
    MAX_KEY_BYTES,
    check_column_lengths,
    check_column_values,
    check_keys,
    position_columns,
    time_column,
)
from window_operator.errors import InvalidArgumentError
from window_operator.eventkey import KEY_FORMATS, KeyFormat, kafka_key_text
from window_operator.eventtime import TimestampUnit, field_time_ms, record_time_ms
from window_operator.rejections import (
    MISSING,
    RecordRejected,
    check_object_value,
    non_finite,
    raw_of,
    show,
)
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "DecodeResult",
    "DecodedEvent",
    "EventBatch",
    "RecordDecoder",
    "TimestampUnit",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Integers of at least this magnitude do not fit a float64.
_MAX_FLOAT_INT = 2**1024 - 2**970  # float() of anything larger overflows
_CONTAINERS = (dict, list)


def _python_values(column: Sequence[Any] | Any) -> list[Any]:
    """An ``objects`` column as the Python values a decoder yields: an Arrow array's
    ``to_pylist()`` and a NumPy array's ``tolist()`` (before, ``list()`` kept Arrow and
    NumPy scalars, which reached the results, and the next flush failed on them:
    ``TypeError: Object of type DoubleScalar is not JSON serializable``)."""
    if hasattr(column, "to_pylist"):
        values: list[Any] = column.to_pylist()
        return values
    if isinstance(column, np.ndarray):
        return list(column.tolist())
    return [v.item() if isinstance(v, np.generic) else v for v in column]


def _numpy_number(name: str, v: np.number[Any]) -> float:
    """A NumPy scalar field's value as the columns hold it (off the per-record fast path,
    which takes Python floats and ints)."""
    x = v.item()
    if not isinstance(x, int | float):  # a complex number
        raise RecordRejected(
            ErrorCode.WRONG_TYPE, f"field {name!r} must be a number, got {show(v)}"
        )
    if x - x == 0.0:
        return float(x)
    raise RecordRejected(ErrorCode.NON_FINITE_VALUE, non_finite(name, x))


@dataclass(slots=True)
class EventBatch:
    """Decoded events in arrival order, one column per attribute.

    ``offset`` may hold ``-1`` for "assign the next offset of the partition" (library
    use without a log). ``numeric`` holds float64 columns for the fields read by numeric
    operations (``NaN`` = null); ``objects`` the raw JSON values for the other fields.
    """

    keys: list[str]
    ts: IntArray
    partition: IntArray
    offset: IntArray
    numeric: dict[str, FloatArray] = field(default_factory=dict)
    objects: dict[str, list[Any]] = field(default_factory=dict)
    wall_ms: IntArray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_columns(
        cls,
        keys: Sequence[str] | Any,
        ts: Sequence[int] | IntArray,
        *,
        numeric: Mapping[str, Sequence[float] | FloatArray] | None = None,
        objects: Mapping[str, Sequence[Any]] | None = None,
        partition: int | Sequence[int] | IntArray = 0,
        offset: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
    ) -> EventBatch:
        """Build a batch from already-decoded columns (lists, NumPy or Arrow arrays).

        Raises :class:`InvalidArgumentError` (a ``ValueError``) for columns of other
        lengths, and for a value the job's decoders would reject: a key that is not text
        or is over 4096 UTF-8 bytes, a time beyond +-2^61 ms, an infinite number, a
        negative partition or offset."""
        if hasattr(keys, "to_pylist"):
            keys = keys.to_pylist()
        key_list = list(keys) if not isinstance(keys, list) else keys
        check_keys(key_list)
        ts_arr = time_column(ts)
        part, off, wall = position_columns(len(key_list), partition, offset, wall_ms)
        num = {k: np.asarray(v, dtype=np.float64) for k, v in (numeric or {}).items()}
        obj = {k: _python_values(v) for k, v in (objects or {}).items()}
        batch = cls(key_list, ts_arr, part, off, num, obj, wall)
        batch.check()
        check_column_values(ts_arr, part, off)
        for name, column in num.items():
            if np.isinf(column).any():
                i = int(np.flatnonzero(np.isinf(column))[0])
                raise InvalidArgumentError(
                    f"numeric[{name!r}][{i}] is {column[i]}: an infinite number is no value "
                    "(NaN is null; add_message rejects it as NON_FINITE_VALUE)"
                )
        return batch

    def check(self) -> None:
        """Raise ``ValueError`` if the columns do not all have the batch's length."""
        cols: list[tuple[str, int]] = [
            ("ts", len(self.ts)),
            ("partition", len(self.partition)),
            ("offset", len(self.offset)),
        ]
        cols += [(f"numeric[{k}]", len(v)) for k, v in self.numeric.items()]
        cols += [(f"objects[{k}]", len(v)) for k, v in self.objects.items()]
        if self.wall_ms is not None:
            cols.append(("wall_ms", len(self.wall_ms)))
        check_column_lengths(len(self.keys), cols)

    @classmethod
    def concat(cls, batches: Sequence[EventBatch]) -> EventBatch:
        """The rows of ``batches`` one after the other (they must have the same columns)."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        first = batches[0]
        walls = [b.wall_ms for b in batches]
        return cls(
            keys=[k for b in batches for k in b.keys],
            ts=np.concatenate([b.ts for b in batches]),
            partition=np.concatenate([b.partition for b in batches]),
            offset=np.concatenate([b.offset for b in batches]),
            numeric={f: np.concatenate([b.numeric[f] for b in batches]) for f in first.numeric},
            objects={f: [v for b in batches for v in b.objects[f]] for f in first.objects},
            wall_ms=None if any(w is None for w in walls) else np.concatenate(walls),  # type: ignore[arg-type]
        )

    def take(self, idx: IntArray) -> EventBatch:
        """The rows at ``idx`` (in that order)."""
        il = idx.tolist()
        return EventBatch(
            keys=[self.keys[i] for i in il],
            ts=self.ts[idx],
            partition=self.partition[idx],
            offset=self.offset[idx],
            numeric={k: v[idx] for k, v in self.numeric.items()},
            objects={k: [v[i] for i in il] for k, v in self.objects.items()},
            wall_ms=None if self.wall_ms is None else self.wall_ms[idx],
        )


@dataclass(slots=True)
class DecodeResult:
    """A decoded batch, the rejected records, and for each kept row its input index."""

    batch: EventBatch
    errors: list[ErrorRecord]
    kept: list[int]


@dataclass(frozen=True, slots=True)
class DecodedEvent:
    """One decoded record (the one-by-one path)."""

    key: str
    ts: int
    numeric: dict[str, float]
    objects: dict[str, Any]


class RecordDecoder:
    """Turns input records (dicts or JSON bytes) into an :class:`EventBatch`.

    ``timestamp_field`` ``None``: the event time is each record's Kafka timestamp, given
    beside the records (``record_times``; :func:`record_time_ms` judges it). ``kafka_key``:
    the key is each record's Kafka key (``record_keys``), read as ``key_format``
    (:func:`kafka_key_text` judges it), and there are no key fields.
    """

    def __init__(
        self,
        *,
        key_field: str | Sequence[str] | None,
        timestamp_field: str | None,
        timestamp_unit: TimestampUnit = "ms",
        numeric_fields: Sequence[str] = (),
        object_fields: Sequence[str] = (),
        counted_fields: Sequence[str] = (),
        max_key_bytes: int = MAX_KEY_BYTES,
        kafka_key: bool = False,
        key_format: KeyFormat = "string",
    ) -> None:
        if kafka_key and key_field not in (None, (), []):
            raise InvalidArgumentError("key fields and the Kafka key cannot both be the key")
        if key_format not in KEY_FORMATS:
            raise InvalidArgumentError(
                f"key_format must be one of {', '.join(KEY_FORMATS)} (got {key_format!r})"
            )
        self.kafka_key = kafka_key
        self.key_format: KeyFormat = key_format
        #: The grouping fields: none (one global key ``""``), one, or several.
        if key_field is None:
            self.key_fields: tuple[str, ...] = ()
        elif isinstance(key_field, str):
            self.key_fields = (key_field,)
        else:
            self.key_fields = tuple(key_field)
        self.timestamp_field = timestamp_field
        self.timestamp_unit = timestamp_unit
        self.numeric_fields = tuple(dict.fromkeys(numeric_fields))
        self.object_fields = tuple(dict.fromkeys(object_fields))
        #: Fields only counted (``count`` with a field): any non-null value is 1.0 in its
        #: column, a null NaN; a field that is also numeric must be a number.
        self.counted_fields = tuple(
            f for f in dict.fromkeys(counted_fields) if f not in self.numeric_fields
        )
        #: The float columns of a batch: the numeric fields, then the counted ones.
        self.float_fields = self.numeric_fields + self.counted_fields
        self.max_key_bytes = max_key_bytes

    # -- single fields ------------------------------------------------------------------

    def timestamp_ms(self, raw: Any) -> int:
        """Event time in ms from the raw timestamp value, or raise a rejection."""
        return field_time_ms(raw, self.timestamp_unit, self.timestamp_field)

    def time_of(self, record: Mapping[str, Any], record_time: int | None = None) -> int:
        """The event time of ``record`` (a dict) whose Kafka timestamp is ``record_time``,
        or raise a rejection (:meth:`_decode` writes it out: the hot path)."""
        ts_field = self.timestamp_field
        if ts_field is None:
            return record_time_ms(record_time)
        if ts_field in record:
            return field_time_ms(record[ts_field], self.timestamp_unit, ts_field)
        raise RecordRejected(ErrorCode.MISSING_TIMESTAMP, f"missing timestamp field {ts_field!r}")

    def key_of(self, record: Mapping[str, Any]) -> str:
        """The grouping key as a string, or raise a rejection: the key field's text, or
        for several key fields the JSON array of their texts (``["US","7"]``)."""
        fields = self.key_fields
        if len(fields) == 1:
            return self._key_text(record, fields[0])
        if not fields:
            return ""
        key = orjson.dumps([self._key_text(record, f) for f in fields]).decode()
        size = len(key) if key.isascii() else len(key.encode())
        if size > self.max_key_bytes:
            names = ", ".join(map(repr, fields))
            raise RecordRejected(
                ErrorCode.BAD_KEY,
                f"key fields {names} make a key of {size} bytes; the limit is {self.max_key_bytes}",
            )
        return key

    def key_or_none(self, record: object) -> str | None:
        """:meth:`key_of` a record, ``None`` for one that is not an object or whose key
        is rejected (the tools that route or look up by the job's key)."""
        if not isinstance(record, dict):
            return None
        try:
            return self.key_of(record)
        except RecordRejected:
            return None

    def _key_text(self, record: Mapping[str, Any], kf: str) -> str:
        """The text of key field ``kf`` of ``record``, or raise a rejection."""
        if kf not in record:
            raise RecordRejected(ErrorCode.MISSING_KEY, f"missing key field {kf!r}")
        raw = record[kf]
        if isinstance(raw, np.generic):  # a NumPy scalar (a row of an array): its value
            raw = raw.item()
        if isinstance(raw, str):
            key = raw
        elif raw is None:
            raise RecordRejected(ErrorCode.MISSING_KEY, f"key field {kf!r} is null")
        elif isinstance(raw, bool):
            key = "true" if raw else "false"
        elif isinstance(raw, int):
            key = str(raw)
        elif isinstance(raw, float) and math.isfinite(raw):
            key = orjson.dumps(raw).decode()
        elif isinstance(raw, float):
            raise RecordRejected(
                ErrorCode.BAD_KEY, f"key field {kf!r} is {raw}, not a finite number"
            )
        else:
            raise RecordRejected(
                ErrorCode.BAD_KEY,
                f"key field {kf!r} must be a string, a number or a boolean, got {show(raw)}",
            )
        if key.isascii():
            size = len(key)
        else:
            try:
                size = len(key.encode())
            except UnicodeEncodeError:
                raise RecordRejected(
                    ErrorCode.BAD_KEY, f"key field {kf!r} is not valid Unicode (a lone surrogate)"
                ) from None
        if size > self.max_key_bytes:
            raise RecordRejected(
                ErrorCode.BAD_KEY,
                f"key field {kf!r} is {size} bytes; the limit is {self.max_key_bytes}",
            )
        return key

    def _decode(self, rec: Any) -> tuple[str, int, list[float], list[Any]]:
        if not isinstance(rec, dict):
            raise RecordRejected(
                ErrorCode.NOT_AN_OBJECT, f"record must be a JSON object, got {show(rec)}"
            )
        key = self.key_of(rec)
        ts_field = self.timestamp_field
        if ts_field is None:
            ts = -1  # the record's Kafka timestamp: the caller's
        elif ts_field in rec:
            ts = field_time_ms(rec[ts_field], self.timestamp_unit, ts_field)
        else:
            raise RecordRejected(
                ErrorCode.MISSING_TIMESTAMP, f"missing timestamp field {ts_field!r}"
            )
        nums: list[float] = []
        for f in self.numeric_fields:
            v = rec.get(f, MISSING)
            cls = v.__class__
            # v - v is 0.0 for every finite float, NaN for NaN and the infinities
            if cls is float and v - v == 0.0:
                nums.append(v)
            elif cls is int and -_MAX_FLOAT_INT < v < _MAX_FLOAT_INT:
                nums.append(float(v))
            elif v is None:
                nums.append(math.nan)  # NaN is null inside the columns
            elif cls is float or cls is int:
                raise RecordRejected(ErrorCode.NON_FINITE_VALUE, non_finite(f, v))
            elif v is MISSING:
                raise RecordRejected(ErrorCode.MISSING_FIELD, f"missing field {f!r}")
            elif isinstance(v, np.number):  # a NumPy scalar (a row of an array): its value
                nums.append(_numpy_number(f, v))
            else:
                raise RecordRejected(
                    ErrorCode.WRONG_TYPE, f"field {f!r} must be a number, got {show(v)}"
                )
        for f in self.counted_fields:
            v = rec.get(f, MISSING)
            if v is None:
                nums.append(math.nan)
            elif v is MISSING:
                raise RecordRejected(ErrorCode.MISSING_FIELD, f"missing field {f!r}")
            elif v.__class__ is float and v - v != 0.0:
                raise RecordRejected(ErrorCode.NON_FINITE_VALUE, non_finite(f, v))
            else:
                nums.append(1.0)
        objs: list[Any] = []
        for f in self.object_fields:
            v = rec.get(f, MISSING)
            if v is MISSING:
                raise RecordRejected(ErrorCode.MISSING_FIELD, f"missing field {f!r}")
            if isinstance(v, np.number):
                v = v.item()
            if v.__class__ in _CONTAINERS or v.__class__ is float:
                check_object_value(f, v)
            objs.append(v)
        return key, ts, nums, objs

    def decode_one(
        self, record: Any, record_time: int | None = None, record_key: object = None
    ) -> DecodedEvent:
        """Decode one record or raise :class:`RecordRejected` with the reason
        (``record_time`` / ``record_key``: its Kafka timestamp and key, the event time
        without a timestamp field and the key with ``kafka_key``)."""
        key, ts, nums, objs = self._decode(record)
        if self.timestamp_field is None:
            ts = record_time_ms(record_time)
        if self.kafka_key:
            key = kafka_key_text(record_key, self.max_key_bytes, self.key_format)
        # _decode gives one value per field, in field order
        return DecodedEvent(
            key=key,
            ts=ts,
            numeric=dict(zip(self.float_fields, nums, strict=False)),
            objects=dict(zip(self.object_fields, objs, strict=False)) if objs else {},
        )

    # -- batches ------------------------------------------------------------------------

    def _kafka_columns(
        self, n: int, record_times: Sequence[int] | None, record_keys: Sequence[object] | None
    ) -> tuple[Sequence[int | None] | None, Sequence[object] | None]:
        """The Kafka timestamps and keys that :meth:`decode_records` reads (``None``:
        the decoder reads a field instead; ``None`` each: they were not given)."""
        none = [None] * n
        times: Sequence[int | None] | None = None
        if self.timestamp_field is None:
            times = none if record_times is None else record_times
        keys = (none if record_keys is None else record_keys) if self.kafka_key else None
        return times, keys

    def decode_records(
        self,
        records: Sequence[Any],
        *,
        partitions: Sequence[int] | None = None,
        offsets: Sequence[int] | None = None,
        raws: Sequence[bytes | None] | None = None,
        wall_ms: Sequence[int] | None = None,
        record_times: Sequence[int] | None = None,
        record_keys: Sequence[object] | None = None,
        default_partition: int = 0,
    ) -> DecodeResult:
        """Decode already-parsed records; bad ones become error records.

        ``record_times`` are the records' Kafka timestamps (``-1``: none), the event times
        when the decoder has no timestamp field; ``record_keys`` their Kafka keys
        (``None``: none), the keys with ``kafka_key`` (either not given where it is read:
        every record is rejected).
        """
        keys: list[str] = []
        tss: list[int] = []
        kept: list[int] = []
        errors: list[ErrorRecord] = []
        num_cols: dict[str, list[float]] = {f: [] for f in self.float_fields}
        obj_cols: dict[str, list[Any]] = {f: [] for f in self.object_fields}
        num_items = [(f, num_cols[f]) for f in self.float_fields]
        obj_items = [(f, obj_cols[f]) for f in self.object_fields]
        decode = self._decode
        times, kafka_keys = self._kafka_columns(len(records), record_times, record_keys)
        for i, rec in enumerate(records):
            try:
                key, ts, nums, objs = decode(rec)
                if times is not None:
                    ts = record_time_ms(times[i])
                if kafka_keys is not None:
                    key = kafka_key_text(kafka_keys[i], self.max_key_bytes, self.key_format)
            except RecordRejected as rej:
                partition = partitions[i] if partitions is not None else default_partition
                offset = offsets[i] if offsets is not None else None
                raw = raws[i] if raws is not None else raw_of(rec)
                errors.append(ErrorRecord(rej.code, rej.reason, partition, offset, raw))
                continue
            keys.append(key)
            tss.append(ts)
            kept.append(i)
            for (_, col), v in zip(num_items, nums, strict=True):
                col.append(v)
            for (_, ocol), o in zip(obj_items, objs, strict=True):
                ocol.append(o)
        batch = EventBatch(
            keys=keys,
            ts=np.asarray(tss, dtype=np.int64),
            partition=_column_of(kept, partitions, default_partition),
            offset=_column_of(kept, offsets, -1),
            numeric={f: np.asarray(c, dtype=np.float64) for f, c in num_cols.items()},
            objects=obj_cols,
            wall_ms=None if wall_ms is None else _column_of(kept, wall_ms, -1),
        )
        return DecodeResult(batch, errors, kept)


def _column_of(kept: list[int], values: Sequence[int] | None, default: int) -> IntArray:
    """The int64 column of the kept rows (``default`` everywhere when ``values`` is None)."""
    if values is None:
        return np.full(len(kept), default, dtype=np.int64)
    return np.asarray([values[i] for i in kept], dtype=np.int64)

"""Join input: decoding one input's records into columns of join key, event time and the
JSON of the record carried into results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import orjson

from stores.keys import MAX_I64, MIN_I64, FieldValue
from window_operator.arrays import IntArray, one
from window_operator.columns import (
    MAX_KEY_BYTES,
    check_column_lengths,
    check_column_values,
    position_columns,
    time_column,
)
from window_operator.config import JoinInputConfig
from window_operator.errors import InvalidArgumentError
from window_operator.events import RecordDecoder
from window_operator.eventtime import MAX_ABS_TS
from window_operator.join.common import JoinKey
from window_operator.jsonbytes import json_bytes, loads_as
from window_operator.rejections import RecordRejected, raw_of, show
from window_operator.results import ErrorCode, ErrorRecord

__all__ = ["JoinDecodeResult", "JoinDecoder", "JoinRecord", "JoinRows", "check_join_keys"]


@dataclass(slots=True)
class JoinRows:
    """Decoded messages of one input, in arrival order, one column per attribute.

    ``source`` is the input: :data:`~window_operator.join.common.LEFT` (0) or
    :data:`~window_operator.join.common.RIGHT` (1). ``keys[i]`` is the join key: the
    value of the single ``on`` field, else the tuple of the values (``()`` without
    equal fields); values are ``int`` or ``str``. ``records[i]`` is the JSON of the
    record carried into results. ``offset`` ``-1`` means "the next offset of the
    partition". ``wall_ms`` is the arrival wall clock (``None``: not known; a negative
    entry: the event time stands in, as in ``simulate``).
    """

    source: int
    keys: list[JoinKey]
    ts: IntArray
    records: list[bytes]
    partition: IntArray
    offset: IntArray
    wall_ms: IntArray | None = None
    #: Whether ``keys`` are known to be of the form a decoder yields (rows the package
    #: builds); :meth:`from_columns` leaves it to the operator, which knows ``on``.
    keys_checked: bool = True

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_columns(
        cls,
        keys: Sequence[JoinKey],
        ts: Sequence[int] | IntArray,
        records: Sequence[bytes | str],
        *,
        source: int,
        partition: int | Sequence[int] | IntArray = 0,
        offset: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
    ) -> JoinRows:
        """Build rows of input ``source`` from columns; ``records`` are the JSON of
        objects (bytes, or text). ``ValueError`` when lengths differ or a record is not
        the JSON of an object: checked here, since the operator stores the records as
        they are and reads them back only to write results."""
        n = len(keys)
        part, off, wall = position_columns(n, partition, offset, wall_ms)
        recs = [_record_json(i, r) for i, r in enumerate(records)]
        rows = cls(source, list(keys), time_column(ts), recs, part, off, wall, False)
        lengths = {"ts": len(rows.ts), "records": len(rows.records), "partition": len(part)}
        lengths["offset"] = len(off)
        if wall is not None:
            lengths["wall_ms"] = len(wall)
        check_column_lengths(n, lengths.items())
        check_column_values(rows.ts, part, off)
        return rows

    @classmethod
    def one(
        cls, source: int, record: JoinRecord, partition: int, offset: int, wall_ms: int | None
    ) -> JoinRows:
        """Rows holding one decoded record."""
        wall = None if wall_ms is None else np.array([wall_ms], dtype=np.int64)
        return cls(
            source, [record.key], one(record.ts), [record.json], one(partition), one(offset), wall
        )


def _record_json(index: int, record: object) -> bytes:
    """``record`` as the bytes of a JSON object (see :meth:`JoinRows.from_columns`)."""
    if isinstance(record, str):
        record = record.encode("utf-8", "surrogatepass")
    elif isinstance(record, bytearray | memoryview):
        record = bytes(record)
    if not isinstance(record, bytes):
        raise ValueError(
            f"records[{index}] is a {type(record).__name__}, not the JSON of an object "
            "(bytes or str): pass dicts to add_records instead"
        )
    loads_as(record, dict, f"records[{index}]", ValueError)  # an object (a dict)
    return record


@dataclass(frozen=True, slots=True)
class JoinRecord:
    """One decoded record: join key, event time and the JSON carried into results."""

    key: JoinKey
    ts: int
    json: bytes


@dataclass(slots=True)
class JoinDecodeResult:
    """Decoded rows, the rejected records, and for each kept row its input index."""

    rows: JoinRows
    errors: list[ErrorRecord]
    kept: list[int]


class JoinDecoder:
    """Turns one input's records (dicts) into :class:`JoinRows`.

    The timestamp is read as for aggregation jobs. Each ``on`` field must be present
    (``MISSING_FIELD``) and not null (``MISSING_FIELD``: a null never equals anything, so
    such a record could never join), and be a string or an integer (``WRONG_TYPE``;
    booleans and floats are refused so that ``1``, ``1.0`` and ``true`` cannot be
    confused). The carried record is the whole input record, or only
    ``join.<side>.fields`` (absent ones as null). ``source`` is the input's index.
    """

    def __init__(self, side: JoinInputConfig, on: Sequence[str], source: int) -> None:
        self.source = source
        self.name = side.name
        self.topic = side.topic_name
        self.on = tuple(on)
        self.fields = side.fields
        self._ts = RecordDecoder(
            key_field=None,
            timestamp_field=side.timestamp_field,
            timestamp_unit=side.timestamp_unit,
        )

    def _field(self, record: Mapping[str, Any], name: str) -> FieldValue:
        if name not in record:
            raise RecordRejected(ErrorCode.MISSING_FIELD, f"missing join field {name!r}")
        v = record[name]
        cls = v.__class__
        if cls is int:
            if not MIN_I64 <= v <= MAX_I64:
                raise RecordRejected(
                    ErrorCode.WRONG_TYPE, f"join field {name!r} is out of the 64-bit range"
                )
            return int(v)
        if cls is str:
            try:
                size = len(v.encode("utf-8"))
            except UnicodeEncodeError:
                raise RecordRejected(
                    ErrorCode.BAD_KEY, f"join field {name!r} is not valid Unicode"
                ) from None
            if size > MAX_KEY_BYTES:
                raise RecordRejected(
                    ErrorCode.BAD_KEY,
                    f"join field {name!r} is {size} bytes; the limit is {MAX_KEY_BYTES}",
                )
            return str(v)
        if v is None:
            raise RecordRejected(
                ErrorCode.MISSING_FIELD, f"join field {name!r} is null (a null never joins)"
            )
        raise RecordRejected(
            ErrorCode.WRONG_TYPE,
            f"join field {name!r} must be a string or an integer, got {type(v).__name__}",
        )

    def event_time(self, record: Any) -> int | None:
        """The record's event time in ms, ``None`` when it has no valid one.

        For the far-future guard (:mod:`window_operator.arrival`), which runs before the
        operator; a record without a valid event time is left to :meth:`decode_one`.
        """
        field = self._ts.timestamp_field
        if field is None or not isinstance(record, dict) or field not in record:
            return None
        try:
            return self._ts.timestamp_ms(record[field])
        except RecordRejected:
            return None

    def decode_one(
        self, record: Any, record_time: int | None = None, record_key: object = None
    ) -> JoinRecord:
        """The decoded record, or raise :class:`RecordRejected` (``record_time``: its
        Kafka timestamp, the event time where the side has no timestamp field;
        ``record_key`` is not read: a join keys its records by their ``on`` fields)."""
        if not isinstance(record, dict):
            raise RecordRejected(
                ErrorCode.NOT_AN_OBJECT,
                f"record must be a JSON object, got {show(record)}",
            )
        ts = self._ts.time_of(record, record_time)
        on = self.on
        key: JoinKey
        if len(on) == 1:
            key = self._field(record, on[0])
        else:
            key = tuple(self._field(record, f) for f in on)
        carried = record if self.fields is None else {f: record.get(f) for f in self.fields}
        try:
            rec = json_bytes(carried)
        except orjson.JSONEncodeError as exc:  # nested over 254 levels: orjson's limit
            raise RecordRejected(
                ErrorCode.WRONG_TYPE,
                f"the record cannot be carried into results as JSON (at most 254 levels "
                f"deep): {exc}",
            ) from None
        return JoinRecord(key, ts, rec)

    def decode_records(
        self,
        records: Sequence[Any],
        *,
        partitions: Sequence[int] | IntArray | None = None,
        offsets: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
        record_times: Sequence[int] | IntArray | None = None,
        default_partition: int = 0,
    ) -> JoinDecodeResult:
        """Decode records; bad ones become error records (with their partition/offset).

        ``record_times`` are the records' Kafka timestamps (``-1``: none), the event times
        where the side has no timestamp field (none given: every record is rejected).
        """
        n = len(records)
        times: Sequence[int | None] | IntArray | None = None
        if self._ts.timestamp_field is None:
            times = [None] * n if record_times is None else record_times
        decoded = self._decode_clean(records, times)
        if decoded is not None:
            keys, tss, recs = decoded
            kept = list(range(n))
            errors: list[ErrorRecord] = []
        else:
            keys, tss, recs, kept, errors = self._decode_each(
                records, times, partitions, offsets, default_partition
            )
        everything = len(kept) == n
        part = (
            np.full(len(kept), default_partition, dtype=np.int64)
            if partitions is None
            else np.asarray(partitions, dtype=np.int64)
        )
        off_arr = (
            np.full(len(kept), -1, dtype=np.int64)
            if offsets is None
            else np.asarray(offsets, dtype=np.int64)
        )
        wall = None if wall_ms is None else np.asarray(wall_ms, dtype=np.int64)
        if not everything:
            if partitions is not None:
                part = part[kept]
            if offsets is not None:
                off_arr = off_arr[kept]
            if wall is not None:
                wall = wall[kept]
        rows = JoinRows(self.source, keys, np.asarray(tss, np.int64), recs, part, off_arr, wall)
        return JoinDecodeResult(rows, errors, kept)

    def _decode_clean(
        self, records: Sequence[Any], times: Sequence[int | None] | IntArray | None
    ) -> tuple[list[JoinKey], list[int], list[bytes]] | None:
        """Column-wise decoding of a chunk in the common shape, or ``None``.

        The shape: dicts with an integer ms timestamp and one join field holding an int
        or a short ASCII string, carried whole. Any other chunk goes record by record
        (:meth:`_decode_each`), which gives the same rows and explains every rejection.
        """
        if self._ts.timestamp_unit != "ms" or len(self.on) != 1 or self.fields is not None:
            return None
        if not all(r.__class__ is dict for r in records):
            return None
        ts_field, on0 = self._ts.timestamp_field, self.on[0]
        try:
            if times is None:
                tss = [r[ts_field] for r in records]
            else:  # the Kafka timestamps: None (none given) declines the chunk
                tss = [t if t is None else int(t) for t in times]
            keys = [r[on0] for r in records]
        except KeyError:
            return None
        if not all(t.__class__ is int for t in tss):
            return None
        try:
            ts_arr = np.asarray(tss, dtype=np.int64)
        except OverflowError:
            return None
        if len(ts_arr) and int(np.abs(ts_arr).max()) >= MAX_ABS_TS:
            return None
        if times is not None and len(ts_arr) and int(ts_arr.min()) < 0:
            return None  # a record without a Kafka timestamp
        if all(k.__class__ is int for k in keys):
            try:
                np.asarray(keys, dtype=np.int64)
            except OverflowError:
                return None
        elif not all(k.__class__ is str and k.isascii() and len(k) <= MAX_KEY_BYTES for k in keys):
            return None
        try:
            recs = [json_bytes(r) for r in records]
        except orjson.JSONEncodeError:  # one record too deep: each is judged alone
            return None
        return keys, tss, recs

    def _decode_each(
        self,
        records: Sequence[Any],
        times: Sequence[int | None] | IntArray | None,
        partitions: Sequence[int] | IntArray | None,
        offsets: Sequence[int] | IntArray | None,
        default_partition: int,
    ) -> tuple[list[JoinKey], list[int], list[bytes], list[int], list[ErrorRecord]]:
        keys: list[JoinKey] = []
        tss: list[int] = []
        recs: list[bytes] = []
        kept: list[int] = []
        errors: list[ErrorRecord] = []
        decode = self.decode_one
        for i, record in enumerate(records):
            try:
                got = decode(record, None if times is None else times[i])
            except RecordRejected as rej:
                off = None if offsets is None else int(offsets[i])
                errors.append(
                    ErrorRecord(
                        code=rej.code,
                        reason=rej.reason,
                        partition=(default_partition if partitions is None else int(partitions[i])),
                        offset=None if off is None or off < 0 else off,
                        raw=raw_of(record),
                        topic=self.topic,
                        source=self.name,
                    )
                )
                continue
            keys.append(got.key)
            tss.append(got.ts)
            recs.append(got.json)
            kept.append(i)
        return keys, tss, recs, kept, errors


def _join_value_ok(value: object) -> bool:
    """Whether ``value`` is a join key part the decoders yield: text of at most
    :data:`MAX_KEY_BYTES` UTF-8 bytes, or a signed 64-bit integer (not a bool)."""
    if type(value) is str:
        try:
            return len(value.encode()) <= MAX_KEY_BYTES
        except UnicodeEncodeError:
            return False
    return type(value) is int and MIN_I64 <= value <= MAX_I64


def check_join_keys(keys: Sequence[object], fields: int) -> None:
    """Raise :class:`InvalidArgumentError` (before any change) for a key of
    :class:`JoinRows` that no decoder yields: with one ``on`` field its value, with
    several the tuple of theirs, without any ``()``. Before, ``(1,)`` for one field was
    taken and never joined, ``True`` joined ``1``, and ``None``, a list or an integer
    beyond 64 bits failed the operator."""
    if fields == 1 and _plain_values(keys):
        return
    for i, key in enumerate(keys):
        if fields == 1:
            ok = _join_value_ok(key)
        else:
            ok = type(key) is tuple and len(key) == fields and all(_join_value_ok(v) for v in key)
        if not ok:
            want = (
                "the value of the one on field (a str, or an int of 64 bits)"
                if fields == 1
                else f"a tuple of the {fields} on fields' values (str, or int of 64 bits)"
                if fields
                else "() (the join has no on fields)"
            )
            raise InvalidArgumentError(f"keys[{i}] = {key!r}: a join key is {want}")


def _plain_values(keys: Sequence[object]) -> bool:
    """Whether ``keys`` are all text short enough (4 UTF-8 bytes a character at most) or
    all 64-bit integers: the usual batch, told by whole-column checks (a check per key
    cost the join benchmark's decoded rows 5 %)."""
    if not keys:
        return True
    types = set(map(type, keys))
    if types == {str}:
        return max(map(len, cast("Sequence[str]", keys))) * 4 <= MAX_KEY_BYTES
    if types == {int}:
        ints = cast("Sequence[int]", keys)
        return MIN_I64 <= min(ints) and max(ints) <= MAX_I64
    return False

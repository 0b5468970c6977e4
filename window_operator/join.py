"""Windowed stream-stream joins over RocksDB: the seed's Join Window Operator, for one task.

A join task reads two inputs, ``left`` and ``right`` (named ``join.left.name`` and
``join.right.name``), and pairs their messages with equal join fields (``join.on``)
under one condition on ``d = right.ts - left.ts``:

* ``range: D`` -- ``0 <= d <= D`` (``RANGE D PRECEDING`` over the left stream);
* ``between: [lo, hi]`` -- ``lo <= d <= hi``;
* ``rows: n`` -- ``ROWS n PRECEDING``: a right message joins the ``n`` most recent left
  messages with its join key, in arrival order (the left window), while a left message
  joins every retained right message with its key (the right stream's default
  ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`` window). Inner joins only.

**Pairing rule.** A message is joined once, when it arrives, against the *other*
input's stored messages that satisfy the condition, and is then stored itself (the
seed's "first occurrence": a message belongs to exactly one window, so sliding windows
never pair it twice). Every pair is therefore produced exactly once, by whichever of
its two messages arrives second. A late message (behind the watermark) still joins
everything stored within retention, so late arrivals produce additional results.

**Watermark.** Per input partition: the largest event time seen minus
``watermark.allowed_lateness``; per input: the minimum over its partitions; the join's
watermark is the minimum over both inputs and never decreases. A partition idle for
longer than ``watermark.idle_timeout`` (wall clock) stops holding it back, and so does
an input that has sent nothing for that long since the task started.

**Retention.** A message whose event time is more than ``retention.time`` behind the
watermark is rejected (error ``OUT_OF_RETENTION``). A stored message expires once no
accepted message can match it any more: a left message when ``ts + hi + retention <
watermark``, a right message when ``ts - lo + retention < watermark`` (rows joins:
``ts + retention < watermark``, and a left message also once ``n`` newer left messages
of its key arrived). Expired messages are removed by range deletes: one per input for
time-first layouts, lazily per join-key prefix (through a per-prefix expiry index) for
key-first layouts; rows joins delete the few expired keys one by one.

Results are emitted as soon as they are known (the seed's join defaults: per incoming
message, and per late arrival); the ``emit`` section and ``retention.size`` of a job do
not apply to joins.

**Outer joins** (``kind: left`` / ``full``). A left row that has not matched is emitted
once as ``LEFT_UNMATCHED`` when the watermark proves no on-time right row can match it
(``ts + hi < watermark``); for full joins a right row likewise as ``RIGHT_UNMATCHED``
(``ts - lo < watermark``). If a late message later matches a row already emitted as
unmatched, the ``MATCH`` is emitted together with a ``RETRACT`` record that repeats the
unmatched record exactly (only ``kind`` differs); a consumer drops one equal unmatched
record per ``RETRACT``. A row is never emitted unmatched after it has matched.

**Output record** (one JSON object per result, see :meth:`JoinResultBatch.to_json_lines`)::

    {"kind": "MATCH" | "LEFT_UNMATCHED" | "RIGHT_UNMATCHED" | "RETRACT",
     "key": {<on field>: <value>, ...},       # {} when there are no equal fields
     "left": {...} | null, "right": {...} | null,
     "left_ts": <ms> | null, "right_ts": <ms> | null}

``left`` / ``right`` carry the input record (all its fields, or ``join.<side>.fields``).

**Message Store** (column family ``messages``), one side tag byte (``L``/``R``) and then
the seed's key matrix, chosen by ``join.store`` (``auto``: :func:`choose_layout`):

* ``ts_offset``         ``<timestamp><offset>``              (no equal fields)
* ``ts_fields_offset``  ``<timestamp><equal_flds><offset>``  (small windows)
* ``fields_ts_offset``  ``<equal_flds><timestamp><offset>``  (large windows)
* ``fields_offset``     ``<equal_flds><offset>``             (rows joins; offset = arrival seq)

The "offset" of a time layout is the message *position* ``partition * 2**48 + offset``
(:func:`message_position`), unique per input across its partitions. The value is the
record's JSON, preceded by what the key does not hold (see ``_decode_message``): the
length-prefixed equal fields for ``ts_offset``, event time and position for
``fields_offset``.

**Window Meta Store** (column family ``window_meta``):

* ``W <side> i64(frame)``: per input and event-time frame (tumbling, ``frame_ms``): the
  count, min/max event time and min/max position of the messages in it -- the seed's
  time-window metadata; a message belongs to the first (only) frame that includes it;
* ``U <side> i64(ts) i64(position)``: the outer-join state of a row that has not
  matched yet (a flag says whether it was emitted unmatched) and its message;
* ``X <side> i64(bucket) <equal_flds>``: the per-prefix expiry index of key-first
  layouts (which join keys have messages in which ``sweep_ms`` bucket).

**Hot path.** Time joins keep a write-through cache of the recent messages of each
input in memory, sorted by ``(join key, ts)``: a batch is probed against the other
input's cache with vectorized range searches, and only probes that reach below the
cache's horizon (late messages, or right after a restore) read RocksDB, with one range
scan per join key (key-first layouts) or per merged time range (time-first layouts).
New messages are written with one bulk put per input and flush; state and input
offsets are committed in the same WriteBatch, and reopening the store restores both.
"""

from __future__ import annotations

import enum
import heapq
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import orjson

from stores.keys import (
    MAX_I64,
    MIN_I64,
    FieldValue,
    decode_fields,
    decode_i64,
    encode_fields,
    encode_i64,
    prefix_upper_bound,
    ts_range,
)
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.config import (
    ConfigError,
    ConfigProblem,
    JoinConfig,
    JoinInputConfig,
    JoinJobConfig,
)
from window_operator.events import MAX_KEY_BYTES, RecordDecoder, RecordRejected
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "LARGE_WINDOW_MS",
    "LEFT",
    "POSITION_BITS",
    "RIGHT",
    "JoinDecodeResult",
    "JoinDecoder",
    "JoinKind",
    "JoinMessage",
    "JoinOperator",
    "JoinResult",
    "JoinResultBatch",
    "JoinRows",
    "JoinRuntime",
    "JoinSpec",
    "JoinStats",
    "JoinWindow",
    "StoreLayout",
    "UnknownSourceError",
    "build_join_runtime",
    "choose_layout",
    "message_position",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]

#: Side indexes.
LEFT = 0
RIGHT = 1

#: Bits of a message position taken by the offset; the partition is above them.
POSITION_BITS = 48
_MAX_OFFSET = (1 << POSITION_BITS) - 1
_MAX_PARTITION = (1 << (63 - POSITION_BITS)) - 1

#: ``auto`` stores a time join with equal fields key-first when ``hi - lo`` exceeds
#: this. A time-first deep lookup seeks once per merged time range and reads every key's
#: messages in it; a key-first one seeks once per join key and reads only that key's.
#: A seek costs about as much as reading a few dozen entries, so time-first wins while a
#: window holds few messages per key -- short windows; at a minute and more the window of
#: a busy stream holds enough that per-key seeks are cheaper.
LARGE_WINDOW_MS = 60_000

#: Expiry buckets of key-first layouts are at least this long: each join key gets one
#: range delete per bucket, which keeps range tombstones few.
MIN_SWEEP_MS = 600_000
#: Window frames (Window Meta Store) are never shorter than this.
MIN_FRAME_MS = 1_000
#: Frame length of rows joins (their windows are in rows, frames only describe time).
ROWS_FRAME_MS = 60_000
#: Messages this far behind the cache's target horizon are still kept in memory.
DEFAULT_CACHE_SLACK_MS = 60_000
#: At most this many messages per input stay in memory after a flush.
DEFAULT_CACHE_MAX_ROWS = 2_000_000
#: Interned join keys kept before unused ones are forgotten (at a flush).
DEFAULT_KEY_LIMIT = 100_000

_MSG_TAG = (b"L", b"R")
_WINDOW_TAG = b"W"
_OUTER_TAG = b"U"
_SWEEP_TAG = b"X"
_CHECKPOINT_KEY = b"join"
#: The outer-join record after its flag byte: ts, position, length of the equal fields.
_HDR = struct.Struct(">qqI")
_I64x2 = struct.Struct(">qq")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U64x2 = struct.Struct(">QQ")
_BIAS = 1 << 63
_WMETA = struct.Struct(">qqqqq")
_SIGN = np.uint64(1 << 63)
_EMPTY = np.zeros(0, dtype=np.int64)
#: Event times the decoder accepts (as :class:`~window_operator.events.RecordDecoder`).
_MAX_ABS_TS = 2**61


def message_position(partition: int, offset: int) -> int:
    """The position of a message in its input: ``partition * 2**48 + offset``."""
    if not 0 <= partition <= _MAX_PARTITION or not 0 <= offset <= _MAX_OFFSET:
        raise ValueError(
            f"partition {partition} / offset {offset} out of range: partitions must be in "
            f"[0, {_MAX_PARTITION}] and offsets in [0, {_MAX_OFFSET}]"
        )
    return (partition << POSITION_BITS) | offset


class UnknownSourceError(ValueError):
    """A source name that is neither ``join.left.name`` nor ``join.right.name``."""


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


class JoinKind(enum.StrEnum):
    """What a join result says."""

    #: A left and a right message satisfy the condition.
    MATCH = "MATCH"
    #: A left row (left/full joins) that no right row can match any more.
    LEFT_UNMATCHED = "LEFT_UNMATCHED"
    #: A right row (full joins) that no left row can match any more.
    RIGHT_UNMATCHED = "RIGHT_UNMATCHED"
    #: Withdraws an earlier unmatched record (repeated exactly) that a late row matched.
    RETRACT = "RETRACT"


_LINE_FORMATS = {
    (True, True): b'{"kind":"%b","key":%b,"left":%b,"right":%b,"left_ts":%d,"right_ts":%d}',
    (True, False): b'{"kind":"%b","key":%b,"left":%b,"right":null,"left_ts":%d,"right_ts":null}',
    (False, True): b'{"kind":"%b","key":%b,"left":null,"right":%b,"left_ts":null,"right_ts":%d}',
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    """One join result (see the module docstring for the meaning of each kind)."""

    kind: JoinKind
    key: dict[str, Any]
    left: dict[str, Any] | None
    right: dict[str, Any] | None
    left_ts: int | None
    right_ts: int | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written by ``simulate``."""
        return {
            "kind": self.kind.value,
            "key": self.key,
            "left": self.left,
            "right": self.right,
            "left_ts": self.left_ts,
            "right_ts": self.right_ts,
        }


@dataclass(slots=True)
class JoinResultBatch:
    """Join results of one kind in columnar form (the hot-path output).

    ``keys`` hold the JSON of the join key object, ``left``/``right`` the JSON of the
    records; a side is ``None`` for the whole batch when its records are null
    (unmatched rows and their retractions).
    """

    kind: JoinKind
    keys: list[bytes]
    left: list[bytes] | None
    right: list[bytes] | None
    left_ts: IntArray | None
    right_ts: IntArray | None

    def __len__(self) -> int:
        return len(self.keys)

    def to_json_lines(self) -> bytes:
        """One JSON object per result, each followed by a newline (byte-stable)."""
        fmt = _LINE_FORMATS[(self.left is not None, self.right is not None)]
        kind = self.kind.value.encode()
        if self.left is not None and self.right is not None:
            assert self.left_ts is not None and self.right_ts is not None
            rows: Iterable[tuple[Any, ...]] = zip(
                self.keys,
                self.left,
                self.right,
                self.left_ts.tolist(),
                self.right_ts.tolist(),
                strict=True,
            )
            lines = [fmt % (kind, k, lr, rr, lt, rt) for k, lr, rr, lt, rt in rows]
        elif self.left is not None:
            assert self.left_ts is not None
            lines = [
                fmt % (kind, k, r, t)
                for k, r, t in zip(self.keys, self.left, self.left_ts.tolist(), strict=True)
            ]
        else:
            assert self.right is not None and self.right_ts is not None
            lines = [
                fmt % (kind, k, r, t)
                for k, r, t in zip(self.keys, self.right, self.right_ts.tolist(), strict=True)
            ]
        lines.append(b"")
        return b"\n".join(lines)

    def to_results(self) -> list[JoinResult]:
        """Materialize one :class:`JoinResult` per row."""
        loads = orjson.loads
        n = len(self.keys)
        lefts = [None] * n if self.left is None else [loads(x) for x in self.left]
        rights = [None] * n if self.right is None else [loads(x) for x in self.right]
        lts = [None] * n if self.left_ts is None else self.left_ts.tolist()
        rts = [None] * n if self.right_ts is None else self.right_ts.tolist()
        return [
            JoinResult(self.kind, loads(self.keys[i]), lefts[i], rights[i], lts[i], rts[i])
            for i in range(n)
        ]


@dataclass(frozen=True, slots=True)
class JoinStats:
    """What one call did with its input."""

    applied: int = 0
    replayed: int = 0
    rejected: int = 0
    late: int = 0
    matches: int = 0


@dataclass(frozen=True, slots=True)
class JoinMessage:
    """A stored message, as returned by :meth:`JoinOperator.get_messages`."""

    source: str
    key: tuple[FieldValue, ...]
    ts: int
    partition: int
    offset: int
    record: dict[str, Any]

    @property
    def position(self) -> int:
        """``partition * 2**48 + offset``."""
        return message_position(self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class JoinWindow:
    """Window metadata of one input over one event-time frame ``[start, end)``.

    ``key`` is the join key the window was asked for (``None``: all keys). Positions are
    ``partition * 2**48 + offset`` (:func:`message_position`).
    """

    source: str
    key: tuple[FieldValue, ...] | None
    start: int
    end: int
    count: int
    min_ts: int
    max_ts: int
    first_position: int
    last_position: int


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------


class StoreLayout(enum.StrEnum):
    """Message Store key layouts (after the seed's key matrix)."""

    TS_OFFSET = "ts_offset"
    FIELDS_TS_OFFSET = "fields_ts_offset"
    TS_FIELDS_OFFSET = "ts_fields_offset"
    FIELDS_OFFSET = "fields_offset"

    @property
    def key_first(self) -> bool:
        """Whether keys start with the equal fields (expiry is then per prefix)."""
        return self in (StoreLayout.FIELDS_TS_OFFSET, StoreLayout.FIELDS_OFFSET)


def choose_layout(join: JoinConfig) -> StoreLayout:
    """The Message Store layout of a join (``join.store``, or the seed's matrix for auto).

    Rows joins use ``<equal_flds><offset>``. Time joins without equal fields use
    ``<timestamp><offset>``; with equal fields, windows wider than
    :data:`LARGE_WINDOW_MS` use ``<equal_flds><timestamp><offset>`` and narrower ones
    ``<timestamp><equal_flds><offset>``. Raises :class:`ValueError` for a time layout
    asked of a rows join.
    """
    if join.rows is not None:
        if join.store not in ("auto",):
            raise ValueError(
                f"rows joins store messages as <equal_flds><offset>; use store: auto "
                f"(got {join.store})"
            )
        return StoreLayout.FIELDS_OFFSET
    if join.store != "auto":
        return StoreLayout(join.store)
    if not join.on:
        return StoreLayout.TS_OFFSET
    bounds = join.bounds
    assert bounds is not None
    if bounds[1] - bounds[0] > LARGE_WINDOW_MS:
        return StoreLayout.FIELDS_TS_OFFSET
    return StoreLayout.TS_FIELDS_OFFSET


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """The settings of a join operator (all times in ms)."""

    left: str
    right: str
    on: tuple[str, ...] = ()
    kind: str = "inner"
    lo: int = 0
    hi: int = 0
    rows: int | None = None
    layout: StoreLayout = StoreLayout.TS_OFFSET
    retention: int = 3_600_000
    allowed_lateness: int = 0
    idle_timeout: int | None = None
    left_topic: str | None = None
    right_topic: str | None = None

    def __post_init__(self) -> None:
        if self.left == self.right:
            raise ValueError("the two inputs need different names")
        if self.kind not in ("inner", "left", "full"):
            raise ValueError(f"kind must be inner, left or full (got {self.kind!r})")
        if self.rows is not None:
            if self.rows < 1:
                raise ValueError("rows must be >= 1")
            if self.kind != "inner":
                raise ValueError("rows joins are inner joins")
            if self.layout is not StoreLayout.FIELDS_OFFSET:
                raise ValueError("rows joins use the fields_offset layout")
        elif self.layout is StoreLayout.FIELDS_OFFSET:
            raise ValueError("the fields_offset layout is for rows joins")
        if self.lo > self.hi:
            raise ValueError("lo must not exceed hi")
        if self.retention < 0 or self.allowed_lateness < 0:
            raise ValueError("retention and allowed_lateness must be >= 0")

    @property
    def names(self) -> tuple[str, str]:
        """``(left name, right name)``."""
        return (self.left, self.right)

    def outer(self, side: int) -> bool:
        """Whether unmatched rows of ``side`` are emitted."""
        return self.kind == "full" or (self.kind == "left" and side == LEFT)

    def reach(self, side: int) -> tuple[int, int]:
        """``(a, b)``: a message at ``t`` of the other side matches ``side`` in ``[t+a, t+b]``."""
        if side == RIGHT:
            return (self.lo, self.hi)
        return (-self.hi, -self.lo)

    def deadline(self, side: int, ts: int) -> int:
        """Once the watermark passes this, no on-time message can match a ``side`` row."""
        return ts + self.hi if side == LEFT else ts - self.lo

    def cutoff(self, side: int, watermark: int) -> int:
        """Messages of ``side`` with ``ts`` below this have expired."""
        if self.rows is not None:
            return watermark - self.retention
        if side == LEFT:
            return watermark - self.hi - self.retention
        return watermark + self.lo - self.retention

    @property
    def frame_ms(self) -> int:
        """The length of a window frame in the Window Meta Store."""
        if self.rows is not None:
            return ROWS_FRAME_MS
        return max(self.hi - self.lo, MIN_FRAME_MS)

    @property
    def sweep_ms(self) -> int:
        """The bucket length of the per-prefix expiry index.

        Expired messages of a key-first store linger for up to one bucket; in exchange
        the index holds one entry, and expiry issues one range delete, per join key and
        bucket.
        """
        return max(MIN_SWEEP_MS, self.hi - self.lo, self.retention // 2)


# ---------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class JoinRows:
    """Decoded messages of one input, in arrival order, one column per attribute.

    ``keys[i]`` is the join key: the value of the single ``on`` field, else the tuple of
    the values (``()`` without equal fields); values are ``int`` or ``str``.
    ``records[i]`` is the JSON of the record carried into results. ``offset`` ``-1``
    means "the next offset of the partition". ``wall_ms`` is the arrival wall clock
    (``None``: not known; a negative entry: the event time stands in, as in
    ``simulate``).
    """

    keys: list[Any]
    ts: IntArray
    records: list[bytes]
    partition: IntArray
    offset: IntArray
    wall_ms: IntArray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_columns(
        cls,
        keys: Sequence[Any],
        ts: Sequence[int] | IntArray,
        records: Sequence[bytes],
        *,
        partition: int | Sequence[int] | IntArray = 0,
        offset: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
    ) -> JoinRows:
        """Build rows from columns; raises ``ValueError`` when lengths differ."""
        n = len(keys)
        part = (
            np.full(n, partition, dtype=np.int64)
            if isinstance(partition, int)
            else np.asarray(partition, dtype=np.int64)
        )
        off = np.full(n, -1, dtype=np.int64) if offset is None else np.asarray(offset, np.int64)
        wall = None if wall_ms is None else np.asarray(wall_ms, dtype=np.int64)
        rows = cls(list(keys), np.asarray(ts, dtype=np.int64), list(records), part, off, wall)
        for name, col in (
            ("ts", rows.ts),
            ("records", rows.records),
            ("partition", part),
            ("offset", off),
        ):
            if len(col) != n:
                raise ValueError(f"column {name} has {len(col)} rows, keys have {n}")
        if wall is not None and len(wall) != n:
            raise ValueError(f"column wall_ms has {len(wall)} rows, keys have {n}")
        return rows


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
    ``join.<side>.fields`` (absent ones as null).
    """

    def __init__(self, side: JoinInputConfig, on: Sequence[str]) -> None:
        self.name = side.name
        self.topic = side.topic_name
        self.on = tuple(on)
        self.fields = side.fields
        self._ts = RecordDecoder(
            key_field=None, timestamp_field=side.timestamp, timestamp_unit=side.timestamp_unit
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

    def decode_one(self, record: Any) -> tuple[Any, int, bytes]:
        """``(join key, event time, record JSON)`` or raise :class:`RecordRejected`."""
        if not isinstance(record, dict):
            raise RecordRejected(
                ErrorCode.NOT_AN_OBJECT,
                f"record must be a JSON object, got {type(record).__name__}",
            )
        ts_field = self._ts.timestamp_field
        if ts_field not in record:
            raise RecordRejected(
                ErrorCode.MISSING_TIMESTAMP, f"missing timestamp field {ts_field!r}"
            )
        ts = self._ts.timestamp_ms(record[ts_field])
        on = self.on
        key: Any
        if len(on) == 1:
            key = self._field(record, on[0])
        else:
            key = tuple(self._field(record, f) for f in on)
        if self.fields is None:
            rec = _dumps(record)
        else:
            rec = _dumps({f: record.get(f) for f in self.fields})
        return key, ts, rec

    def decode_records(
        self,
        records: Sequence[Any],
        *,
        partitions: Sequence[int] | IntArray | None = None,
        offsets: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
        default_partition: int = 0,
    ) -> JoinDecodeResult:
        """Decode records; bad ones become error records (with their partition/offset)."""
        n = len(records)
        decoded = self._decode_clean(records)
        if decoded is not None:
            keys, tss, recs = decoded
            kept = list(range(n))
            errors: list[ErrorRecord] = []
        else:
            keys, tss, recs, kept, errors = self._decode_each(
                records, partitions, offsets, default_partition
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
        rows = JoinRows(keys, np.asarray(tss, dtype=np.int64), recs, part, off_arr, wall)
        return JoinDecodeResult(rows, errors, kept)

    def _decode_clean(
        self, records: Sequence[Any]
    ) -> tuple[list[Any], list[int], list[bytes]] | None:
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
            tss = [r[ts_field] for r in records]
            keys = [r[on0] for r in records]
        except KeyError:
            return None
        if not all(t.__class__ is int for t in tss):
            return None
        try:
            ts_arr = np.asarray(tss, dtype=np.int64)
        except OverflowError:
            return None
        if len(ts_arr) and int(np.abs(ts_arr).max()) >= _MAX_ABS_TS:
            return None
        if all(k.__class__ is int for k in keys):
            try:
                np.asarray(keys, dtype=np.int64)
            except OverflowError:
                return None
        elif not all(k.__class__ is str and k.isascii() and len(k) <= MAX_KEY_BYTES for k in keys):
            return None
        return keys, tss, [_dumps(r) for r in records]

    def _decode_each(
        self,
        records: Sequence[Any],
        partitions: Sequence[int] | IntArray | None,
        offsets: Sequence[int] | IntArray | None,
        default_partition: int,
    ) -> tuple[list[Any], list[int], list[bytes], list[int], list[ErrorRecord]]:
        keys: list[Any] = []
        tss: list[int] = []
        recs: list[bytes] = []
        kept: list[int] = []
        errors: list[ErrorRecord] = []
        decode = self.decode_one
        for i, record in enumerate(records):
            try:
                k, t, r = decode(record)
            except RecordRejected as rej:
                off = None if offsets is None else int(offsets[i])
                errors.append(
                    ErrorRecord(
                        code=rej.code,
                        reason=rej.reason,
                        partition=(default_partition if partitions is None else int(partitions[i])),
                        offset=None if off is None or off < 0 else off,
                        raw=_raw(record),
                        topic=self.topic,
                    )
                )
                continue
            keys.append(k)
            tss.append(t)
            recs.append(r)
            kept.append(i)
        return keys, tss, recs, kept, errors


def _dumps(value: Any) -> bytes:
    """``orjson.dumps`` copied into an exact-size object.

    orjson returns its oversized output buffer shrunk in place; keeping millions of
    those alive fragments the heap so badly that each call costs several times more
    than the copy does.
    """
    return bytes(memoryview(orjson.dumps(value)))


def _raw(record: Any) -> bytes:
    try:
        return orjson.dumps(record)
    except TypeError:
        return repr(record).encode()


# ---------------------------------------------------------------------------------------
# In-memory structures
# ---------------------------------------------------------------------------------------


class _KeyTable:
    """Interns join keys as small integers, with their store encoding and output JSON."""

    def __init__(self, on: tuple[str, ...]) -> None:
        self.on = on
        self.single = len(on) == 1
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []
        self.encoded: list[bytes] = []
        self.json: list[bytes] = []
        self.by_encoded: dict[bytes, int] = {}
        self._json_arr: ObjArray = np.empty(0, dtype=object)

    def __len__(self) -> int:
        return len(self.values)

    def fields(self, kid: int) -> tuple[FieldValue, ...]:
        """The equal-field values of ``kid`` as a tuple."""
        v = self.values[kid]
        return (v,) if self.single else tuple(v)

    def id_of(self, kv: Any) -> int:
        """The id of join key ``kv``, assigning the next one if new."""
        kid = self.ids.get(kv)
        if kid is None:
            kid = len(self.values)
            fields: tuple[FieldValue, ...] = (kv,) if self.single else tuple(kv)
            enc = encode_fields(fields)
            self.ids[kv] = kid
            self.values.append(kv)
            self.encoded.append(enc)
            self.json.append(_dumps(dict(zip(self.on, fields, strict=True))))
            self.by_encoded[enc] = kid
        return kid

    def ids_of(self, kvs: Sequence[Any]) -> IntArray:
        """Vectorized :meth:`id_of`; new keys get ids in first-seen order."""
        ids = self.ids
        try:
            return np.fromiter(map(ids.__getitem__, kvs), dtype=np.int64, count=len(kvs))
        except KeyError:
            pass
        for kv in kvs:
            if kv not in ids:
                self.id_of(kv)
        return np.fromiter(map(ids.__getitem__, kvs), dtype=np.int64, count=len(kvs))

    def from_encoded(self, enc: bytes) -> int:
        """The id of the key whose equal fields encode to ``enc``."""
        kid = self.by_encoded.get(enc)
        if kid is not None:
            return kid
        fields = decode_fields(enc)
        return self.id_of(fields[0] if self.single else fields)

    def json_array(self) -> ObjArray:
        """The output JSON of every key, indexable by id arrays."""
        if len(self._json_arr) != len(self.json):
            arr = np.empty(len(self.json), dtype=object)
            arr[:] = self.json
            self._json_arr = arr
        return self._json_arr

    def compact(self, live: IntArray) -> IntArray:
        """Keep only the keys ``live`` (sorted ids); return the old-id -> new-id map."""
        remap = np.full(len(self.values), -1, dtype=np.int64)
        remap[live] = np.arange(len(live), dtype=np.int64)
        keep = live.tolist()
        self.values = [self.values[k] for k in keep]
        self.encoded = [self.encoded[k] for k in keep]
        self.json = [self.json[k] for k in keep]
        self.ids = {v: i for i, v in enumerate(self.values)}
        self.by_encoded = {e: i for i, e in enumerate(self.encoded)}
        self._json_arr = np.empty(0, dtype=object)
        return remap


@dataclass(frozen=True, slots=True)
class _Codec:
    """Maps ``(key id, ts)`` to one sortable int64: ``kid << bits | (ts - base)``."""

    base: int
    bits: int

    def fits(self, kid_max: int, ts_min: int, ts_max: int) -> bool:
        return (
            kid_max < (1 << (62 - self.bits))
            and ts_min >= self.base
            and ts_max < self.base + (1 << self.bits)
        )

    def codes(self, kids: IntArray, ts: IntArray) -> IntArray:
        out: IntArray = (kids << self.bits) + (ts - self.base)
        return out

    def range_codes(self, kids: IntArray, lo: IntArray, hi: IntArray) -> tuple[IntArray, IntArray]:
        """Codes bounding ``[lo, hi]`` per key: ``[start, end)`` (clipped to the codec)."""
        span = 1 << self.bits
        k = kids << self.bits
        start: IntArray = k + np.clip(lo - self.base, 0, span)
        end: IntArray = k + np.clip(hi - self.base + 1, 0, span)
        return start, end


class _SideCache:
    """Recent messages of one input, sorted by ``(key, ts)``; complete for ts >= horizon."""

    def __init__(self) -> None:
        self.code: IntArray = _EMPTY
        self.kid: IntArray = _EMPTY
        self.ts: IntArray = _EMPTY
        self.pos: IntArray = _EMPTY
        self.rec: ObjArray = np.empty(0, dtype=object)
        #: Every stored message with ``ts >= horizon`` is in the cache.
        self.horizon = MIN_I64

    def __len__(self) -> int:
        return len(self.code)

    def insert(
        self, code: IntArray, kid: IntArray, ts: IntArray, pos: IntArray, rec: ObjArray
    ) -> None:
        order = np.argsort(code, kind="stable")
        code, kid, ts, pos, rec = code[order], kid[order], ts[order], pos[order], rec[order]
        if not len(self.code):
            self.code, self.kid, self.ts, self.pos, self.rec = code, kid, ts, pos, rec
            return
        at = np.searchsorted(self.code, code, side="right")
        self.code = np.insert(self.code, at, code)
        self.kid = np.insert(self.kid, at, kid)
        self.ts = np.insert(self.ts, at, ts)
        self.pos = np.insert(self.pos, at, pos)
        self.rec = np.insert(self.rec, at, rec)

    def keep(self, mask: BoolArray) -> None:
        self.code, self.kid, self.ts = self.code[mask], self.kid[mask], self.ts[mask]
        self.pos, self.rec = self.pos[mask], self.rec[mask]

    def recode(self, codec: _Codec, remap: IntArray | None = None) -> None:
        if remap is not None:
            self.kid = remap[self.kid]
        self.code = codec.codes(self.kid, self.ts)
        if remap is not None:
            # new ids need not keep the old key order
            order = np.argsort(self.code, kind="stable")
            self.code, self.kid, self.ts = self.code[order], self.kid[order], self.ts[order]
            self.pos, self.rec = self.pos[order], self.rec[order]


@dataclass(slots=True)
class _OuterRow:
    """A row of an outer side that has not matched yet."""

    kid: int
    ts: int
    rec: bytes
    emitted: bool
    persisted: bool


@dataclass(slots=True)
class _OuterState:
    """Unmatched rows of one outer side, by position, with emission and expiry queues."""

    rows: dict[int, _OuterRow] = field(default_factory=dict)
    deadlines: list[tuple[int, int]] = field(default_factory=list)
    expiry: list[tuple[int, int]] = field(default_factory=list)
    dirty: set[int] = field(default_factory=set)
    deletes: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class _RowsEntry:
    """A stored message of a rows join."""

    seq: int
    ts: int
    pos: int
    rec: bytes


@dataclass(slots=True)
class _Pending:
    """Accepted messages of one input not yet written to the Message Store."""

    kids: list[IntArray] = field(default_factory=list)
    ts: list[IntArray] = field(default_factory=list)
    pos: list[IntArray] = field(default_factory=list)
    recs: list[list[bytes]] = field(default_factory=list)
    seqs: list[IntArray] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.kids)

    def clear(self) -> None:
        self.kids, self.ts, self.pos, self.recs, self.seqs = [], [], [], [], []


def _expand(starts: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """Flatten ranges ``[starts[i], ends[i])`` into ``(i, index)`` pairs."""
    counts = np.maximum(ends - starts, 0)
    total = int(counts.sum())
    if total == 0:
        return _EMPTY, _EMPTY
    probe = np.repeat(np.arange(len(starts), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    slots: IntArray = starts[probe] + (np.arange(total, dtype=np.int64) - first[probe])
    return probe, slots


def _range_join(
    c_kid: IntArray, c_ts: IntArray, q_kid: IntArray, q_lo: IntArray, q_hi: IntArray
) -> tuple[IntArray, IntArray]:
    """Pairs ``(query, candidate)`` with equal key and ``q_lo <= c_ts <= q_hi``."""
    if not len(c_kid) or not len(q_kid):
        return _EMPTY, _EMPTY
    order = np.lexsort((c_ts, c_kid))
    sk, st = c_kid[order], c_ts[order]
    ukid, inv = np.unique(np.concatenate([sk, q_kid]), return_inverse=True)
    rk, rq = inv[: len(sk)].astype(np.int64), inv[len(sk) :].astype(np.int64)
    tmin = min(int(st.min()), int(q_lo.min()))
    tmax = max(int(st.max()), int(q_hi.max()))
    span = tmax - tmin + 2
    if span * (len(ukid) + 1) < 2**62:
        codes = rk * span + (st - tmin)
        lo = rq * span + (np.minimum(q_lo, tmax + 1) - tmin)
        hi = rq * span + (np.minimum(q_hi, tmax) - tmin + 1)
        qi, k = _expand(np.searchsorted(codes, lo), np.searchsorted(codes, hi))
        return qi, order[k]
    # Extreme timestamps: per key, searching the key's slice by time.
    q_out: list[IntArray] = []
    c_out: list[IntArray] = []
    for r in np.unique(rq).tolist():
        a, b = np.searchsorted(rk, r), np.searchsorted(rk, r, side="right")
        qs = np.flatnonzero(rq == r)
        seg = st[a:b]
        qi, k = _expand(
            np.searchsorted(seg, q_lo[qs]), np.searchsorted(seg, q_hi[qs], side="right")
        )
        q_out.append(qs[qi])
        c_out.append(order[a + k])
    return np.concatenate(q_out), np.concatenate(c_out)


def _u64_be(values: IntArray) -> npt.NDArray[np.uint64]:
    """Signed int64 as the order-preserving unsigned pattern of :func:`encode_i64`."""
    flipped: npt.NDArray[np.uint64] = values.astype(np.int64).view(np.uint64) ^ _SIGN
    return flipped


def _i64_keys(*columns: IntArray) -> list[bytes]:
    """Row ``i`` of the columns as concatenated :func:`encode_i64` bytes."""
    width = 8 * len(columns)
    buf = np.column_stack([_u64_be(c) for c in columns]).astype(">u8").tobytes()
    return [buf[i : i + width] for i in range(0, len(buf), width)]


def _pair_headers(ts: IntArray, pos: IntArray) -> list[bytes]:
    """``>qq`` (ts, position) per row: the value prefix of the ``fields_offset`` layout."""
    buf = np.column_stack([ts, pos]).astype(">i8").tobytes()
    return [buf[i : i + 16] for i in range(0, len(buf), 16)]


def _decode_message(layout: StoreLayout, key: bytes, value: bytes) -> tuple[bytes, int, int, bytes]:
    """``(encoded equal fields, ts, position, record JSON)`` of a stored message."""
    if layout is StoreLayout.FIELDS_TS_OFFSET:
        t, p = _U64x2.unpack_from(key, len(key) - 16)
        return key[1:-16], t - _BIAS, p - _BIAS, value
    if layout is StoreLayout.TS_FIELDS_OFFSET:
        (t,) = _U64.unpack_from(key, 1)
        (p,) = _U64.unpack_from(key, len(key) - 8)
        return key[9:-8], t - _BIAS, p - _BIAS, value
    if layout is StoreLayout.TS_OFFSET:
        t, p = _U64x2.unpack_from(key, 1)
        (flen,) = _U32.unpack_from(value, 0)
        return value[4 : 4 + flen], t - _BIAS, p - _BIAS, value[4 + flen :]
    t, p = _I64x2.unpack_from(value, 0)
    return key[1:-8], t, p, value[16:]


def _obj(values: Sequence[Any]) -> ObjArray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


# ---------------------------------------------------------------------------------------
# The operator
# ---------------------------------------------------------------------------------------


class JoinOperator:
    """A task's windowed join of two inputs over one RocksDB store.

    ``add_batch`` / ``add_message`` take messages of one input (named by ``source``);
    results accumulate until :meth:`take_result_batches` / :meth:`get_result`, rejected
    records until :meth:`get_errors`. :meth:`flush` writes new messages, window
    metadata, outer-join state, expiry and the checkpoint (offsets, watermark) in one
    WriteBatch. Opening an operator over an existing store restores it.

    ``cache_slack_ms`` / ``cache_max_rows`` bound the in-memory message cache (how far
    behind the watermark's reach it keeps messages, and how many); ``key_limit`` is how
    many join keys stay interned before the ones nothing in memory refers to are
    forgotten. They change speed and memory, never results.
    """

    def __init__(
        self,
        spec: JoinSpec,
        store: TaskStore,
        *,
        decoders: tuple[JoinDecoder, JoinDecoder] | None = None,
        cache_slack_ms: int = DEFAULT_CACHE_SLACK_MS,
        cache_max_rows: int = DEFAULT_CACHE_MAX_ROWS,
        key_limit: int = DEFAULT_KEY_LIMIT,
    ) -> None:
        if cache_slack_ms < 0 or cache_max_rows < 0 or key_limit < 0:
            raise ValueError("cache_slack_ms, cache_max_rows and key_limit must be >= 0")
        self.spec = spec
        self.store = store
        self.decoders = decoders
        self.cache_slack_ms = cache_slack_ms
        self.cache_max_rows = cache_max_rows
        self._side_of = {spec.left: LEFT, spec.right: RIGHT}
        self._topics = (spec.left_topic or spec.left, spec.right_topic or spec.right)
        self._keys = _KeyTable(spec.on)
        self._codec: _Codec | None = None
        self._cache = (_SideCache(), _SideCache())
        self._pending = (_Pending(), _Pending())
        self._outer = (_OuterState(), _OuterState())
        self._rows_state: tuple[dict[int, list[_RowsEntry]], dict[int, list[_RowsEntry]]] = (
            {},
            {},
        )
        self._rows_deletes: list[bytes] = []
        self._rows_swept = [MIN_I64, MIN_I64]
        # window metadata per (side, frame): [count, min_ts, max_ts, min_pos, max_pos]
        self._wmeta: dict[tuple[int, int], list[int]] = {}
        self._wmeta_dirty: set[tuple[int, int]] = set()
        # per-prefix expiry index of key-first layouts: side -> bucket -> prefixes
        self._sweep: tuple[dict[int, set[bytes]], dict[int, set[bytes]]] = ({}, {})
        self._sweep_new: list[bytes] = []
        self.key_limit = key_limit
        self._key_limit = key_limit
        # checkpointed
        self._offsets: dict[tuple[int, int], int] = {}
        self._max_ts: dict[tuple[int, int], int] = {}
        self._wm = NO_WATERMARK
        self._seq = 0
        self._stored_max: list[int | None] = [None, None]
        self._expired = [MIN_I64, MIN_I64]
        self.batches = 0
        # wall clock (not checkpointed: activity restarts with the task)
        self._now = NO_WATERMARK
        self._first_wall: int | None = None
        self._last_active: dict[tuple[int, int], int] = {}
        # outputs
        self._results: list[JoinResultBatch] = []
        self._errors: list[ErrorRecord] = []
        self._restore()

    # ------------------------------------------------------------------ properties

    @property
    def watermark(self) -> int:
        """The join's watermark: min over both inputs, never decreasing."""
        return self._wm

    @property
    def offsets(self) -> dict[tuple[str, int], int]:
        """Last applied offset per ``(source, partition)``."""
        names = self.spec.names
        return {(names[s], p): o for (s, p), o in sorted(self._offsets.items())}

    @property
    def now(self) -> int:
        """The latest wall clock seen (messages and :meth:`timeout`)."""
        return self._now

    # ------------------------------------------------------------------ public API

    def side_of(self, source: str) -> int:
        """:data:`LEFT` or :data:`RIGHT` for an input name."""
        side = self._side_of.get(source)
        if side is None:
            raise UnknownSourceError(
                f"unknown source {source!r}: expected {self.spec.left!r} or {self.spec.right!r}"
            )
        return side

    def add_batch(
        self,
        source: str,
        events: JoinRows | Sequence[Mapping[str, Any]],
        *,
        partitions: Sequence[int] | IntArray | None = None,
        offsets: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
        partition: int = 0,
    ) -> JoinStats:
        """Add messages of one input: decoded :class:`JoinRows`, or records (dicts).

        For records, ``partitions`` / ``offsets`` (``-1``: next) / ``wall_ms`` give each
        record's metadata (default: ``partition``, the next offsets, no wall clock).
        Replays (an offset not above the last applied one of its partition) are no-ops.
        Retention is decided with the watermark as it stood before the batch.
        """
        side = self.side_of(source)
        if isinstance(events, JoinRows):
            if partitions is not None or offsets is not None or wall_ms is not None:
                raise ValueError("JoinRows carry their own partition/offset/wall_ms columns")
            return self._add_rows(side, events)
        if self.decoders is None:
            raise ValueError("add_batch of records needs decoders (build the operator from a job)")
        n = len(events)
        part = (
            np.full(n, partition, dtype=np.int64)
            if partitions is None
            else np.asarray(partitions, dtype=np.int64)
        )
        off = np.full(n, -1, dtype=np.int64) if offsets is None else np.asarray(offsets, np.int64)
        off = self._assign_offsets(side, part, off)
        fresh = self._fresh_mask(side, part, off)
        idx = np.flatnonzero(fresh)
        il = idx.tolist()
        wall = None if wall_ms is None else np.asarray(wall_ms, dtype=np.int64)[idx]
        decoded = self.decoders[side].decode_records(
            events if len(il) == n else [events[i] for i in il],
            partitions=part[idx],
            offsets=off[idx],
            wall_ms=wall,
        )
        stats = self._add_rows(side, decoded.rows)
        # Rejected records were handled: a replay must not reject them again.
        for err in decoded.errors:
            assert err.partition is not None and err.offset is not None
            self._mark(side, err.partition, err.offset)
        self._errors.extend(decoded.errors)
        return JoinStats(
            stats.applied,
            stats.replayed + n - len(il),
            stats.rejected + len(decoded.errors),
            stats.late,
            stats.matches,
        )

    def add_message(
        self,
        source: str,
        record: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> JoinStats:
        """Add one record of ``source`` (a batch of one)."""
        return self.add_batch(
            source,
            [record],
            partitions=[partition],
            offsets=[-1 if offset is None else offset],
            wall_ms=None if wall_ms is None else [wall_ms],
        )

    def mark_consumed(self, source: str, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``source``/``partition`` was handled outside."""
        self._mark(self.side_of(source), partition, offset)

    def timeout(self, now_ms: int) -> None:
        """Advance the wall clock; :data:`END_OF_TIME` ends both inputs."""
        if now_ms >= END_OF_TIME:
            self._now = END_OF_TIME
            self._advance_watermark(END_OF_TIME)
            return
        self._note_now(now_ms)
        if self.spec.idle_timeout is not None:
            self._advance_watermark(self._coalesced_watermark())

    def get_result(self) -> list[JoinResult]:
        """Hand over (and forget) every join result produced so far."""
        return [r for b in self.take_result_batches() for r in b.to_results()]

    def take_result_batches(self) -> list[JoinResultBatch]:
        """Hand over the pending results in columnar form (the hot-path variant)."""
        out, self._results = self._results, []
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        out, self._errors = self._errors, []
        return out

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; expire and evict; return the writes.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        and commits them itself. Memory already reflects them, so if the caller cannot
        commit it must discard this operator and reopen the store.
        """
        batch = StoreBatch()
        for side in (LEFT, RIGHT):
            self._write_pending(side, batch)
        self._write_outer(batch)
        self._write_wmeta(batch)
        batch.put_many(ColumnFamily.WINDOW_META, self._sweep_new, [b""] * len(self._sweep_new))
        self._sweep_new = []
        if NO_WATERMARK < self._wm < END_OF_TIME:
            for side in (LEFT, RIGHT):
                self._expire(side, batch)
        # after the puts: a left row trimmed from a rows window may be staged in them
        for key in self._rows_deletes:
            batch.delete(ColumnFamily.MESSAGES, key)
        self._rows_deletes = []
        self.batches += 1
        batch.put(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY, self._checkpoint_bytes())
        if commit:
            self.store.commit(batch)
        self._evict()
        if len(self._keys) > self._key_limit:
            self._compact_keys()
        return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        if self.store.closed:
            return
        self.flush()
        self.store.close()

    # -- the seed's window and message access ---------------------------------------------

    @overload
    def get_windows(self, start: int, end: int, /) -> list[JoinWindow]: ...

    @overload
    def get_windows(self, join_key: Any, start: int, end: int, /) -> list[JoinWindow]: ...

    def get_windows(self, *args: Any) -> list[JoinWindow]:
        """``get_windows([join_key,] start, end)``: windows of both inputs overlapping
        ``[start, end)``, sorted by start then input.

        Without a join key: the frames' metadata from the Window Meta Store; with one:
        the same frames restricted to that key's messages (read from the Message Store).
        """
        if len(args) == 2:
            join_key, (start, end) = None, args
        elif len(args) == 3:
            join_key, start, end = args
        else:
            raise TypeError("get_windows([join_key,] start, end)")
        frame = self.spec.frame_ms
        out: list[JoinWindow] = []
        names = self.spec.names
        if join_key is None:
            for (side, f), m in self._wmeta.items():
                if f < end and f + frame > start and f + frame > self._expired[side]:
                    out.append(JoinWindow(names[side], None, f, f + frame, *m))
        else:
            kv = self._normalize_key(join_key)
            fields = (kv,) if self._keys.single else tuple(kv)
            lo = start - start % frame
            for side in (LEFT, RIGHT):
                msgs = self.get_messages(names[side], lo, MIN_I64, end - 1, -MIN_I64 - 1, [kv])
                per: dict[int, list[int]] = {}
                for msg in msgs:
                    f = msg.ts - msg.ts % frame
                    p = msg.position
                    got = per.get(f)
                    if got is None:
                        per[f] = [1, msg.ts, msg.ts, p, p]
                    else:
                        got[0] += 1
                        got[1], got[2] = min(got[1], msg.ts), max(got[2], msg.ts)
                        got[3], got[4] = min(got[3], p), max(got[4], p)
                for f, meta in per.items():
                    out.append(JoinWindow(names[side], fields, f, f + frame, *meta))
        out.sort(key=lambda w: (w.start, self._side_of[w.source]))
        return out

    def get_messages(
        self,
        source: str,
        start_ts: int,
        start_offset: int,
        end_ts: int,
        end_offset: int,
        join_keys: Sequence[Any] | None = None,
    ) -> list[JoinMessage]:
        """Stored messages of ``source`` with ``(ts, position)`` in
        ``[(start_ts, start_offset), (end_ts, end_offset)]`` (positions:
        :func:`message_position`), optionally only those of ``join_keys``.

        Unkeyed results are in ``(ts, position)`` order, keyed ones by key (in the given
        order) then ``(ts, position)``. Expired messages are never returned.
        """
        side = self.side_of(source)
        kids = None
        if join_keys is not None:
            kids = [self._keys.id_of(self._normalize_key(k)) for k in join_keys]
        floor = max(start_ts, self._expired[side])
        found: dict[int, tuple[int, int, bytes]] = {}
        if self.spec.rows is not None:
            for kid, entries in self._rows_state[side].items():
                for e in entries:
                    found[e.pos] = (kid, e.ts, e.rec)
        elif floor <= end_ts:
            for kid, ts, pos, rec in self._scan_disk(side, kids, floor, end_ts):
                found[pos] = (kid, ts, rec)
            cache = self._cache[side]
            sel = np.flatnonzero((cache.ts >= floor) & (cache.ts <= end_ts))
            for i in sel.tolist():
                found[int(cache.pos[i])] = (int(cache.kid[i]), int(cache.ts[i]), cache.rec[i])
        lo, hi = (start_ts, start_offset), (end_ts, end_offset)
        rank = {kid: i for i, kid in enumerate(kids)} if kids is not None else None
        picked = [
            (pos, kid, ts, rec)
            for pos, (kid, ts, rec) in found.items()
            if lo <= (ts, pos) <= hi and ts >= floor and (rank is None or kid in rank)
        ]
        if rank is None:
            picked.sort(key=lambda m: (m[2], m[0]))
        else:
            picked.sort(key=lambda m: (rank[m[1]], m[2], m[0]))
        return [
            JoinMessage(
                source,
                self._keys.fields(kid),
                ts,
                pos >> POSITION_BITS,
                pos & _MAX_OFFSET,
                orjson.loads(rec),
            )
            for pos, kid, ts, rec in picked
        ]

    def _normalize_key(self, key: Any) -> Any:
        if self._keys.single:
            if isinstance(key, tuple):
                if len(key) != 1:
                    raise ValueError(f"a join key has 1 field, got {key!r}")
                return key[0]
            return key
        key = tuple(key)
        if len(key) != len(self.spec.on):
            raise ValueError(f"a join key has {len(self.spec.on)} fields, got {key!r}")
        return key

    # ------------------------------------------------------------------ batch path

    def _add_rows(self, side: int, rows: JoinRows) -> JoinStats:
        n = len(rows)
        if n == 0:
            return JoinStats()
        part = rows.partition
        if int(part.min()) < 0 or int(part.max()) > _MAX_PARTITION:
            raise ValueError(f"partitions must be in [0, {_MAX_PARTITION}]")
        off = self._assign_offsets(side, part, rows.offset)
        if int(off.max()) > _MAX_OFFSET:
            raise ValueError(f"offsets must be at most {_MAX_OFFSET}")
        fresh = self._fresh_mask(side, part, off)
        replayed = int(n - fresh.sum())
        wm_before = self._wm
        ts = rows.ts
        accept = fresh.copy()
        rejected = 0
        if wm_before > NO_WATERMARK:
            too_old = fresh & (ts + self.spec.retention < wm_before)
            if too_old.any():
                for i in np.flatnonzero(too_old).tolist():
                    self._reject_retention(side, rows, i, int(part[i]), int(off[i]), wm_before)
                rejected = int(too_old.sum())
                accept &= ~too_old
        idx = np.flatnonzero(accept)
        matches = 0
        late = 0
        if len(idx):
            pos = (part << POSITION_BITS) | off
            if self.spec.rows is None:
                matches = self._apply_time(side, rows, idx, pos)
            else:
                matches = self._apply_rows(side, rows, idx, pos, wm_before)
            late = int((ts[idx] < wm_before).sum())
            self._advance_max_ts(side, part[idx], ts[idx])
        self._advance_offsets(side, part[fresh], off[fresh])
        if rows.wall_ms is not None and fresh.any():
            wall = np.where(rows.wall_ms < 0, ts, rows.wall_ms)
            self._note_wall(side, part[fresh], wall[fresh])
        self._advance_watermark(self._coalesced_watermark())
        return JoinStats(len(idx), replayed, rejected, late, matches)

    def _apply_time(self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray) -> int:
        """Join accepted messages against the other input, then store them."""
        n_all = len(rows)
        il = idx.tolist()
        full = len(idx) == n_all
        kids = self._keys.ids_of(rows.keys if full else [rows.keys[i] for i in il])
        ts = rows.ts if full else rows.ts[idx]
        pos = pos_all if full else pos_all[idx]
        rec = _obj(rows.records if full else [rows.records[i] for i in il])
        self._ensure_codec(int(kids.max()), int(ts.min()), int(ts.max()))
        codec = self._codec
        assert codec is not None
        other = 1 - side
        a, b = self.spec.reach(other)
        lo_ts, hi_ts = ts + a, ts + b
        cache = self._cache[other]
        p_idx, slots = _EMPTY, _EMPTY
        if len(cache):
            lo_c, hi_c = codec.range_codes(kids, lo_ts, hi_ts)
            p_idx, slots = _expand(
                np.searchsorted(cache.code, lo_c), np.searchsorted(cache.code, hi_c)
            )
        p_ts, p_pos, p_rec = cache.ts[slots], cache.pos[slots], cache.rec[slots]
        deep = lo_ts < cache.horizon
        if deep.any():
            d_idx, d_ts, d_pos, d_rec = self._deep_matches(other, kids, lo_ts, hi_ts, deep)
            if len(d_idx):
                p_idx = np.concatenate([p_idx, d_idx])
                p_ts = np.concatenate([p_ts, d_ts])
                p_pos = np.concatenate([p_pos, d_pos])
                p_rec = np.concatenate([p_rec, d_rec])
                order = np.lexsort((p_pos, p_ts, p_idx))
                p_idx, p_ts, p_pos, p_rec = p_idx[order], p_ts[order], p_pos[order], p_rec[order]
        if self.spec.outer(other) and len(p_pos):
            self._matched_outer(other, p_pos)
        if len(p_idx):
            self._emit_matches(side, kids, ts, rec, p_idx, p_ts, p_rec)
        self._cache[side].insert(codec.codes(kids, ts), kids, ts, pos, rec)
        self._stage(side, kids, ts, pos, rec.tolist(), None)
        if self.spec.outer(side):
            matched = np.zeros(len(kids), dtype=np.bool_)
            matched[p_idx] = True
            self._register_unmatched(side, kids, ts, pos, rec, ~matched)
        return len(p_idx)

    def _deep_matches(
        self, other: int, kids: IntArray, lo_ts: IntArray, hi_ts: IntArray, deep: BoolArray
    ) -> tuple[IntArray, IntArray, IntArray, ObjArray]:
        """Matches below the other cache's horizon, read from RocksDB."""
        cache = self._cache[other]
        h = cache.horizon
        di = np.flatnonzero(deep)
        q_kid, q_lo = kids[di], lo_ts[di]
        q_hi = np.minimum(hi_ts[di], h - 1)
        ok = q_lo <= q_hi
        di, q_kid, q_lo, q_hi = di[ok], q_kid[ok], q_lo[ok], q_hi[ok]
        empty = (_EMPTY, _EMPTY, _EMPTY, np.empty(0, dtype=object))
        if not len(di):
            return empty
        found: list[tuple[int, int, int, bytes]] = []
        if self.spec.layout.key_first:
            # one range scan per join key, over the union of its probes' ranges
            order = np.argsort(q_kid, kind="stable")
            sk = q_kid[order]
            bounds = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1], [True])))
            for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                sel = order[s:e]
                kid = int(sk[s])
                found.extend(
                    self._scan_disk(other, [kid], int(q_lo[sel].min()), int(q_hi[sel].max()))
                )
        else:
            # one range scan per merged time range, for every key at once
            wanted = set(q_kid.tolist())
            order = np.argsort(q_lo, kind="stable")
            cl, ch = int(q_lo[order[0]]), int(q_hi[order[0]])
            ranges: list[tuple[int, int]] = []
            for lo, hi in zip(q_lo[order].tolist(), q_hi[order].tolist(), strict=True):
                if lo > ch + 1:
                    ranges.append((cl, ch))
                    cl, ch = lo, hi
                else:
                    ch = max(ch, hi)
            ranges.append((cl, ch))
            for lo, hi in ranges:
                found.extend(self._scan_disk(other, wanted, lo, hi))
        if not found:
            return empty
        below = cache.ts < h
        if below.any():
            # flushed messages still cached below the horizon come from the cache
            cached = set(cache.pos[below].tolist())
            found = [f for f in found if f[2] not in cached]
            if not found:
                return empty
        c_kid = np.fromiter((f[0] for f in found), dtype=np.int64, count=len(found))
        c_ts = np.fromiter((f[1] for f in found), dtype=np.int64, count=len(found))
        c_pos = np.fromiter((f[2] for f in found), dtype=np.int64, count=len(found))
        c_rec = _obj([f[3] for f in found])
        qi, ci = _range_join(c_kid, c_ts, q_kid, q_lo, q_hi)
        return di[qi], c_ts[ci], c_pos[ci], c_rec[ci]

    def _scan_disk(
        self, side: int, kids: Collection[int] | None, lo: int, hi: int
    ) -> list[tuple[int, int, int, bytes]]:
        """Committed messages of ``side`` with ``lo <= ts <= hi``: (kid, ts, pos, rec)."""
        tag = _MSG_TAG[side]
        keys = self._keys
        layout = self.spec.layout
        out: list[tuple[int, int, int, bytes]] = []
        end: bytes | None
        if layout.key_first and kids is not None:
            for kid in kids:
                prefix = tag + keys.encoded[kid]
                if layout is StoreLayout.FIELDS_TS_OFFSET:
                    start, end = ts_range(prefix, lo, hi + 1)
                else:
                    start, end = prefix, prefix_upper_bound(prefix)
                for k, v in self.store.scan(ColumnFamily.MESSAGES, start, end):
                    _, t, p, rec = _decode_message(layout, k, v)
                    if lo <= t <= hi:
                        out.append((kid, t, p, rec))
            return out
        if layout.key_first:
            start, end = tag, prefix_upper_bound(tag)
        else:
            start, end = ts_range(tag, lo, hi + 1)
        wanted = kids if kids is None or isinstance(kids, set | frozenset) else set(kids)
        by_enc = keys.by_encoded
        for k, v in self.store.scan(ColumnFamily.MESSAGES, start, end):
            enc, t, p, rec = _decode_message(layout, k, v)
            if not lo <= t <= hi:
                continue
            if wanted is None:
                kid = keys.from_encoded(enc)
            else:
                found = by_enc.get(enc)
                if found is None or found not in wanted:
                    continue
                kid = found
            out.append((kid, t, p, rec))
        return out

    def _emit_matches(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        rec: ObjArray,
        p_idx: IntArray,
        p_ts: IntArray,
        p_rec: ObjArray,
    ) -> None:
        keys = self._keys.json_array()[kids[p_idx]].tolist()
        own, own_ts = rec[p_idx].tolist(), ts[p_idx]
        partner = p_rec.tolist()
        if side == LEFT:
            batch = JoinResultBatch(JoinKind.MATCH, keys, own, partner, own_ts, p_ts)
        else:
            batch = JoinResultBatch(JoinKind.MATCH, keys, partner, own, p_ts, own_ts)
        self._results.append(batch)

    # ------------------------------------------------------------------ rows joins

    def _apply_rows(
        self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray, wm_before: int
    ) -> int:
        """ROWS n PRECEDING: right joins the n latest lefts of its key; left joins all rights."""
        n_rows = self.spec.rows
        assert n_rows is not None
        il = idx.tolist()
        kids = self._keys.ids_of([rows.keys[i] for i in il]).tolist()
        ts = rows.ts[idx].tolist()
        pos = pos_all[idx].tolist()
        recs = [rows.records[i] for i in il]
        seqs = list(range(self._seq + 1, self._seq + 1 + len(il)))
        self._seq += len(il)
        # Partners older than retention are invisible however the deletes were timed.
        floor = wm_before - self.spec.retention if wm_before > NO_WATERMARK else MIN_I64
        other = self._rows_state[1 - side]
        mine = self._rows_state[side]
        p_own: list[int] = []
        p_ts: list[int] = []
        p_rec: list[bytes] = []
        tag = _MSG_TAG[LEFT]
        for j, kid in enumerate(kids):
            for e in other.get(kid, ()):
                if e.ts >= floor:
                    p_own.append(j)
                    p_ts.append(e.ts)
                    p_rec.append(e.rec)
            entries = mine.setdefault(kid, [])
            entries.append(_RowsEntry(seqs[j], ts[j], pos[j], recs[j]))
            if side == LEFT and len(entries) > n_rows:
                # only the n latest lefts of a key can still be joined
                enc = self._keys.encoded[kid]
                for old in entries[:-n_rows]:
                    self._rows_deletes.append(tag + enc + encode_i64(old.seq))
                del entries[:-n_rows]
        kid_arr = np.asarray(kids, dtype=np.int64)
        ts_arr = np.asarray(ts, dtype=np.int64)
        self._stage(
            side, kid_arr, ts_arr, np.asarray(pos, np.int64), recs, np.asarray(seqs, np.int64)
        )
        if p_own:
            own_idx = np.asarray(p_own, dtype=np.int64)
            self._emit_matches(
                side, kid_arr, ts_arr, _obj(recs), own_idx, np.asarray(p_ts, np.int64), _obj(p_rec)
            )
        return len(p_own)

    # ------------------------------------------------------------------ staging and meta

    def _stage(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        recs: list[bytes],
        seqs: IntArray | None,
    ) -> None:
        """Queue accepted messages for the Message Store; update window and expiry meta."""
        p = self._pending[side]
        p.kids.append(kids)
        p.ts.append(ts)
        p.pos.append(pos)
        p.recs.append(recs)
        if seqs is not None:
            p.seqs.append(seqs)
        tmax = int(ts.max())
        prev = self._stored_max[side]
        self._stored_max[side] = tmax if prev is None else max(prev, tmax)
        self._note_frames(side, ts, pos)
        if self.spec.layout is StoreLayout.FIELDS_TS_OFFSET:
            self._note_sweep(side, kids, ts)

    def _note_frames(self, side: int, ts: IntArray, pos: IntArray) -> None:
        frame = self.spec.frame_ms
        frames = ts - ts % frame
        order = np.argsort(frames, kind="stable")
        sf, st, sp = frames[order], ts[order], pos[order]
        starts = np.flatnonzero(np.concatenate(([True], sf[1:] != sf[:-1])))
        counts = np.diff(np.append(starts, len(sf)))
        mins, maxs = np.minimum.reduceat(st, starts), np.maximum.reduceat(st, starts)
        pmins, pmaxs = np.minimum.reduceat(sp, starts), np.maximum.reduceat(sp, starts)
        for f, c, t0, t1, p0, p1 in zip(
            sf[starts].tolist(),
            counts.tolist(),
            mins.tolist(),
            maxs.tolist(),
            pmins.tolist(),
            pmaxs.tolist(),
            strict=True,
        ):
            kw = (side, f)
            m = self._wmeta.get(kw)
            if m is None:
                self._wmeta[kw] = [c, t0, t1, p0, p1]
            else:
                m[0] += c
                m[1], m[2] = min(m[1], t0), max(m[2], t1)
                m[3], m[4] = min(m[3], p0), max(m[4], p1)
            self._wmeta_dirty.add(kw)

    def _note_sweep(self, side: int, kids: IntArray, ts: IntArray) -> None:
        """Record which join keys have messages in which expiry bucket."""
        buckets = ts // self.spec.sweep_ms
        enc = self._keys.encoded
        index = self._sweep[side]
        tag = _SWEEP_TAG + _MSG_TAG[side]
        b_lo, b_hi = int(buckets.min()), int(buckets.max())
        for bucket in range(b_lo, b_hi + 1):
            sel = kids if b_lo == b_hi else kids[buckets == bucket]
            if not len(sel):
                continue
            prefixes = index.get(bucket)
            if prefixes is None:
                prefixes = index[bucket] = set()
            new = set(map(enc.__getitem__, sel.tolist())) - prefixes
            if new:
                prefixes |= new
                head = tag + encode_i64(bucket)
                self._sweep_new.extend(head + p for p in sorted(new))

    # ------------------------------------------------------------------ outer joins

    def _register_unmatched(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        rec: ObjArray,
        unmatched: BoolArray,
    ) -> None:
        st = self._outer[side]
        for i in np.flatnonzero(unmatched).tolist():
            t, p = int(ts[i]), int(pos[i])
            st.rows[p] = _OuterRow(int(kids[i]), t, rec[i], emitted=False, persisted=False)
            st.dirty.add(p)
            heapq.heappush(st.deadlines, (self.spec.deadline(side, t), p))
            heapq.heappush(st.expiry, (t, p))

    def _matched_outer(self, side: int, positions: IntArray) -> None:
        """Rows of an outer ``side`` that just matched: forget them, retract if emitted."""
        st = self._outer[side]
        if not st.rows:
            return
        retracted: list[_OuterRow] = []
        for p in dict.fromkeys(positions.tolist()):
            row = st.rows.pop(p, None)
            if row is None:
                continue
            st.dirty.discard(p)
            if row.persisted:
                st.deletes.append(self._outer_key(side, row.ts, p))
            if row.emitted:
                retracted.append(row)
        if retracted:
            self._emit_rows(JoinKind.RETRACT, side, retracted)

    def _emit_rows(self, kind: JoinKind, side: int, rows: list[_OuterRow]) -> None:
        keys = [self._keys.json[r.kid] for r in rows]
        recs = [r.rec for r in rows]
        ts = np.asarray([r.ts for r in rows], dtype=np.int64)
        if side == LEFT:
            self._results.append(JoinResultBatch(kind, keys, recs, None, ts, None))
        else:
            self._results.append(JoinResultBatch(kind, keys, None, recs, None, ts))

    def _emit_unmatched(self, wm: int) -> None:
        for side, kind in ((LEFT, JoinKind.LEFT_UNMATCHED), (RIGHT, JoinKind.RIGHT_UNMATCHED)):
            if not self.spec.outer(side):
                continue
            st = self._outer[side]
            due: list[_OuterRow] = []
            while st.deadlines and st.deadlines[0][0] < wm:
                _, p = heapq.heappop(st.deadlines)
                row = st.rows.get(p)
                if row is None or row.emitted:
                    continue
                row.emitted = True
                st.dirty.add(p)
                due.append(row)
            if due:
                self._emit_rows(kind, side, due)

    def _outer_key(self, side: int, ts: int, pos: int) -> bytes:
        return _OUTER_TAG + _MSG_TAG[side] + encode_i64(ts) + encode_i64(pos)

    def _write_outer(self, batch: StoreBatch) -> None:
        for side in (LEFT, RIGHT):
            st = self._outer[side]
            for key in st.deletes:
                batch.delete(ColumnFamily.WINDOW_META, key)
            st.deletes = []
            for p in sorted(st.dirty):
                row = st.rows[p]
                enc = self._keys.encoded[row.kid]
                value = bytes((row.emitted,)) + _HDR.pack(row.ts, p, len(enc)) + enc + row.rec
                batch.put(ColumnFamily.WINDOW_META, self._outer_key(side, row.ts, p), value)
                row.persisted = True
            st.dirty.clear()

    # ------------------------------------------------------------------ watermark

    def _assign_offsets(self, side: int, part: IntArray, off: IntArray) -> IntArray:
        auto = off < 0
        if not auto.any():
            return off
        off = off.copy()
        for p in np.unique(part[auto]).tolist():
            in_p = part == p
            nxt = self._offsets.get((side, p), -1) + 1
            if (auto | ~in_p).all():
                where = np.flatnonzero(in_p)
                off[where] = nxt + np.arange(len(where))
                continue
            for i in np.flatnonzero(in_p).tolist():
                if off[i] < 0:
                    off[i] = nxt
                nxt = max(nxt, int(off[i]) + 1)
        return off

    def _fresh_mask(self, side: int, part: IntArray, off: IntArray) -> BoolArray:
        fresh = np.empty(len(off), dtype=np.bool_)
        for p in np.unique(part).tolist():
            m = part == p
            o = off[m]
            last = self._offsets.get((side, p), -1)
            prev = np.maximum.accumulate(np.concatenate(([last], o[:-1])))
            fresh[m] = o > prev
        return fresh

    def _mark(self, side: int, partition: int, offset: int) -> None:
        if offset > self._offsets.get((side, partition), -1):
            self._offsets[(side, partition)] = offset

    def _advance_offsets(self, side: int, part: IntArray, off: IntArray) -> None:
        for p in np.unique(part).tolist():
            self._mark(side, p, int(off[part == p].max()))

    def _advance_max_ts(self, side: int, part: IntArray, ts: IntArray) -> None:
        for p in np.unique(part).tolist():
            m = int(ts[part == p].max())
            if m > self._max_ts.get((side, p), NO_WATERMARK):
                self._max_ts[(side, p)] = m

    def _note_now(self, now: int) -> None:
        if self._first_wall is None:
            self._first_wall = now
        self._now = max(self._now, now)

    def _note_wall(self, side: int, part: IntArray, wall: IntArray) -> None:
        self._note_now(int(wall.min()))
        self._now = max(self._now, int(wall.max()))
        for p in np.unique(part).tolist():
            key = (side, p)
            w = int(wall[part == p].max())
            if w > self._last_active.get(key, NO_WATERMARK):
                self._last_active[key] = w

    def _coalesced_watermark(self) -> int:
        """Min over inputs of (min over active partitions of max ts) - allowed lateness."""
        if not self._max_ts:
            return NO_WATERMARK
        idle = self.spec.idle_timeout
        now = self._now
        started = self._first_wall
        per_side: list[int] = []
        for side in (LEFT, RIGHT):
            parts = [(p, t) for (s, p), t in self._max_ts.items() if s == side]
            if not parts:
                if idle is not None and started is not None and now >= started + idle:
                    continue  # silent since the start for longer than the idle timeout
                return NO_WATERMARK
            active = [
                t
                for p, t in parts
                if idle is None
                or started is None
                or now < self._last_active.get((side, p), started) + idle
            ]
            if active:
                per_side.append(min(active))
        if not per_side:  # everything idle: the freshest partition leads
            per_side = [max(self._max_ts.values())]
        return min(per_side) - self.spec.allowed_lateness

    def _advance_watermark(self, wm: int) -> None:
        if wm > self._wm:
            self._wm = wm
        if self.spec.kind != "inner":
            # also rows that arrived already past their deadline (late and unmatched)
            self._emit_unmatched(self._wm)

    # ------------------------------------------------------------------ codec and cache

    def _ensure_codec(self, kid_max: int, ts_min: int, ts_max: int) -> None:
        c = self._codec
        if c is not None and c.fits(kid_max, ts_min, ts_max):
            return
        lo, hi = ts_min, ts_max
        for cache in self._cache:
            if len(cache):
                lo, hi = min(lo, int(cache.ts.min())), max(hi, int(cache.ts.max()))
        kid_bits = (max(kid_max + 1, len(self._keys)) * 2).bit_length()
        bits = max(min(40, 62 - kid_bits), (hi - lo).bit_length() + 1)
        if bits + kid_bits > 62:
            raise RuntimeError(
                f"the cached messages span {hi - lo} ms over {len(self._keys)} join keys, "
                "more than a 62-bit (key, time) code can hold; lower cache_max_rows"
            )
        span = 1 << bits
        self._codec = _Codec(lo - (span - (hi - lo)) // 2, bits)
        for cache in self._cache:
            cache.recode(self._codec)

    def _evict(self) -> None:
        """Drop flushed messages the watermark's reach has passed (or beyond the cap)."""
        if self.spec.rows is not None or self._wm <= NO_WATERMARK:
            return
        for side in (LEFT, RIGHT):
            cache = self._cache[side]
            a, _ = self.spec.reach(side)
            target = self._wm + a - self.cache_slack_ms if self._wm < END_OF_TIME else END_OF_TIME
            h = max(cache.horizon, target)
            if len(cache) > self.cache_max_rows:
                cap = self.cache_max_rows
                h = max(
                    h, int(np.partition(cache.ts, len(cache) - cap - 1)[len(cache) - cap - 1]) + 1
                )
            cache.horizon = h
            if len(cache):
                stale = cache.ts < h
                n_stale = int(stale.sum())
                # Messages below the horizon may stay: they are flushed, and deep reads
                # skip their disk copies. Compacting only in bulk keeps eviction cheap.
                if n_stale and (
                    n_stale > max(4096, len(cache) // 8) or len(cache) > self.cache_max_rows
                ):
                    cache.keep(~stale)

    def _compact_keys(self) -> None:
        """Forget join keys that nothing in memory refers to any more."""
        live_parts = [c.kid for c in self._cache]
        live_parts += [
            np.asarray([r.kid for r in st.rows.values()], np.int64) for st in self._outer
        ]
        live_parts += [np.asarray(list(d), np.int64) for d in self._rows_state]
        live = np.unique(np.concatenate(live_parts)) if live_parts else _EMPTY
        remap = self._keys.compact(live)
        if self._codec is not None:
            for cache in self._cache:
                cache.recode(self._codec, remap)
        for st in self._outer:
            for row in st.rows.values():
                row.kid = int(remap[row.kid])
        self._rows_state = (
            {int(remap[k]): v for k, v in self._rows_state[LEFT].items()},
            {int(remap[k]): v for k, v in self._rows_state[RIGHT].items()},
        )
        # interned keys grow back to twice the live ones before the next compaction
        self._key_limit = max(self.key_limit, 2 * len(self._keys))

    # ------------------------------------------------------------------ persistence

    def _write_pending(self, side: int, batch: StoreBatch) -> None:
        """One bulk put of the staged messages, in key order (RocksDB inserts a sorted
        batch markedly faster than a random one)."""
        p = self._pending[side]
        if not p:
            return
        kids = np.concatenate(p.kids)
        ts = np.concatenate(p.ts)
        pos = np.concatenate(p.pos)
        seqs = np.concatenate(p.seqs) if p.seqs else _EMPTY
        recs = _obj([r for chunk in p.recs for r in chunk])
        layout = self.spec.layout
        enc = self._keys.encoded
        # The encodings preserve order, so sorting the columns sorts the keys.
        rank = _EMPTY
        if layout is not StoreLayout.TS_OFFSET:
            ukids, inv = np.unique(kids, return_inverse=True)
            rank = np.argsort(np.argsort(_obj([enc[k] for k in ukids.tolist()])))[inv]
        if layout is StoreLayout.TS_OFFSET:
            order = np.lexsort((pos, ts))
        elif layout is StoreLayout.FIELDS_TS_OFFSET:
            order = np.lexsort((pos, ts, rank))
        elif layout is StoreLayout.TS_FIELDS_OFFSET:
            order = np.lexsort((pos, rank, ts))
        else:
            order = np.lexsort((seqs, rank))
        kids, ts, pos = kids[order], ts[order], pos[order]
        fields = [enc[k] for k in kids.tolist()]
        values: list[bytes] = recs[order].tolist()
        tag = _MSG_TAG[side]
        if layout is StoreLayout.TS_OFFSET:
            keys = [tag + k for k in _i64_keys(ts, pos)]
            values = [_U32.pack(len(f)) + f + r for f, r in zip(fields, values, strict=True)]
        elif layout is StoreLayout.FIELDS_TS_OFFSET:
            keys = [tag + f + k for f, k in zip(fields, _i64_keys(ts, pos), strict=True)]
        elif layout is StoreLayout.TS_FIELDS_OFFSET:
            keys = [
                tag + t + f + o
                for t, f, o in zip(_i64_keys(ts), fields, _i64_keys(pos), strict=True)
            ]
        else:
            keys = [tag + f + s for f, s in zip(fields, _i64_keys(seqs[order]), strict=True)]
            values = [h + r for h, r in zip(_pair_headers(ts, pos), values, strict=True)]
        batch.put_many(ColumnFamily.MESSAGES, keys, values)
        p.clear()

    def _write_wmeta(self, batch: StoreBatch) -> None:
        for side, f in sorted(self._wmeta_dirty):
            m = self._wmeta.get((side, f))
            if m is not None:
                key = _WINDOW_TAG + _MSG_TAG[side] + encode_i64(f)
                batch.put(ColumnFamily.WINDOW_META, key, _WMETA.pack(*m))
        self._wmeta_dirty.clear()

    def _expire(self, side: int, batch: StoreBatch) -> None:
        """Delete what the watermark proves can no longer match (see the module doc)."""
        cut = self.spec.cutoff(side, self._wm)
        if cut <= self._expired[side]:
            return
        tag = _MSG_TAG[side]
        layout = self.spec.layout
        if layout is StoreLayout.FIELDS_OFFSET:
            self._expire_rows(side, cut)
        elif layout is StoreLayout.FIELDS_TS_OFFSET:
            self._expire_prefixes(side, cut, batch)
        else:
            batch.delete_range(ColumnFamily.MESSAGES, *ts_range(tag, MIN_I64, cut))
        frame = self.spec.frame_ms
        w_tag = _WINDOW_TAG + tag
        batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(w_tag, MIN_I64, cut - frame + 1))
        for kw in [kw for kw in self._wmeta if kw[0] == side and kw[1] + frame <= cut]:
            del self._wmeta[kw]
            self._wmeta_dirty.discard(kw)
        if self.spec.outer(side):
            st = self._outer[side]
            while st.expiry and st.expiry[0][0] < cut:
                _, p = heapq.heappop(st.expiry)
                row = st.rows.pop(p, None)
                if row is not None:
                    st.dirty.discard(p)
            batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(_OUTER_TAG + tag, MIN_I64, cut))
        self._expired[side] = cut

    def _expire_prefixes(self, side: int, cut: int, batch: StoreBatch) -> None:
        """Key-first layout: one range delete per join key of each expired bucket."""
        g = self.spec.sweep_ms
        index = self._sweep[side]
        done = sorted(b for b in index if (b + 1) * g <= cut)
        if not done:
            return
        prefixes: set[bytes] = set()
        for b in done:
            prefixes |= index.pop(b)
        tag = _MSG_TAG[side]
        for prefix in sorted(prefixes):
            batch.delete_range(ColumnFamily.MESSAGES, *ts_range(tag + prefix, MIN_I64, cut))
        x_tag = _SWEEP_TAG + tag
        batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(x_tag, MIN_I64, done[-1] + 1))

    def _expire_rows(self, side: int, cut: int) -> None:
        """Rows joins: drop entries past retention (swept once per ``sweep_ms``)."""
        if cut < self._rows_swept[side] + self.spec.sweep_ms:
            return
        self._rows_swept[side] = cut
        tag = _MSG_TAG[side]
        enc = self._keys.encoded
        state = self._rows_state[side]
        for kid in list(state):
            entries = state[kid]
            keep = [e for e in entries if e.ts >= cut]
            if len(keep) == len(entries):
                continue
            for e in entries:
                if e.ts < cut:
                    self._rows_deletes.append(tag + enc[kid] + encode_i64(e.seq))
            if keep:
                state[kid] = keep
            else:
                del state[kid]

    def _reject_retention(
        self, side: int, rows: JoinRows, i: int, partition: int, offset: int, wm: int
    ) -> None:
        ts = int(rows.ts[i])
        self._errors.append(
            ErrorRecord(
                code=ErrorCode.OUT_OF_RETENTION,
                reason=(
                    f"event time {ts} of {self.spec.names[side]!r} is out of retention: more "
                    f"than {self.spec.retention} ms behind the watermark {wm}"
                ),
                partition=partition,
                offset=offset,
                raw=rows.records[i],
                topic=self._topics[side],
            )
        )

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "offsets": [[s, p, o] for (s, p), o in sorted(self._offsets.items())],
                "max_ts": [[s, p, t] for (s, p), t in sorted(self._max_ts.items())],
                "watermark": self._wm,
                "seq": self._seq,
                "stored_max": self._stored_max,
                "expired": self._expired,
                "rows_swept": self._rows_swept,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        self._offsets = {(int(s), int(p)): int(o) for s, p, o in cp["offsets"]}
        self._max_ts = {(int(s), int(p)): int(t) for s, p, t in cp["max_ts"]}
        self._wm = int(cp["watermark"])
        self._seq = int(cp["seq"])
        self._stored_max = [None if t is None else int(t) for t in cp["stored_max"]]
        self._expired = [int(t) for t in cp["expired"]]
        self._rows_swept = [int(t) for t in cp["rows_swept"]]
        self.batches = int(cp["batches"])
        for side in (LEFT, RIGHT):
            top = self._stored_max[side]
            # The cache starts empty: complete only above everything stored.
            self._cache[side].horizon = MIN_I64 if top is None else top + 1
            self._restore_side(side)

    def _restore_side(self, side: int) -> None:
        tag = _MSG_TAG[side]
        meta = ColumnFamily.WINDOW_META
        w = _HDR.size
        w_tag = _WINDOW_TAG + tag
        for k, v in self.store.scan(meta, w_tag, prefix_upper_bound(w_tag)):
            self._wmeta[(side, decode_i64(k, 2))] = list(_WMETA.unpack(v))
        x_tag = _SWEEP_TAG + tag
        for k, _ in self.store.scan(meta, x_tag, prefix_upper_bound(x_tag)):
            self._sweep[side].setdefault(decode_i64(k, 2), set()).add(k[10:])
        st = self._outer[side]
        u_tag = _OUTER_TAG + tag
        for _, v in self.store.scan(meta, u_tag, prefix_upper_bound(u_tag)):
            t, p, fl = _HDR.unpack_from(v, 1)
            kid = self._keys.from_encoded(v[1 + w : 1 + w + fl])
            emitted = bool(v[0])
            st.rows[p] = _OuterRow(kid, t, v[1 + w + fl :], emitted=emitted, persisted=True)
            if not emitted:
                heapq.heappush(st.deadlines, (self.spec.deadline(side, t), p))
            heapq.heappush(st.expiry, (t, p))
        if self.spec.rows is not None:
            state = self._rows_state[side]
            for k, v in self.store.scan(ColumnFamily.MESSAGES, tag, prefix_upper_bound(tag)):
                enc, t, p, rec = _decode_message(self.spec.layout, k, v)
                kid = self._keys.from_encoded(enc)
                state.setdefault(kid, []).append(_RowsEntry(decode_i64(k, len(k) - 8), t, p, rec))


# ---------------------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinRuntime:
    """Everything a join task needs, built once per job."""

    config: JoinJobConfig
    spec: JoinSpec
    decoders: tuple[JoinDecoder, JoinDecoder]

    def decoder(self, source: str) -> JoinDecoder:
        """The decoder of an input by name; raises :class:`UnknownSourceError`."""
        for d in self.decoders:
            if d.name == source:
                return d
        raise UnknownSourceError(
            f"unknown source {source!r}: expected {self.spec.left!r} or {self.spec.right!r}"
        )

    def open_task(self, state_dir: Path, task: int = 0, **options: int) -> JoinOperator:
        """Open (or restore) the join operator of ``task`` with its RocksDB under ``state_dir``.

        ``options`` are :class:`JoinOperator`'s cache settings.
        """
        from window_operator.job import task_state_dir

        store = TaskStore(task_state_dir(state_dir, self.config.job, task))
        return self.operator(store, **options)

    def operator(self, store: TaskStore, **options: int) -> JoinOperator:
        """The join operator over ``store`` (restored from it)."""
        return JoinOperator(self.spec, store, decoders=self.decoders, **options)


def build_join_runtime(config: JoinJobConfig, *, source: str | None = None) -> JoinRuntime:
    """Derive the operator settings and decoders of a join job.

    Raises :class:`ConfigError` when ``join.store`` names a time layout for a rows join.
    """
    j = config.join
    try:
        layout = choose_layout(j)
    except ValueError as exc:
        raise ConfigError(source, [ConfigProblem("join.store", str(exc))]) from exc
    lo, hi = j.bounds or (0, 0)
    spec = JoinSpec(
        left=j.left.name,
        right=j.right.name,
        on=tuple(j.on),
        kind=j.kind,
        lo=lo,
        hi=hi,
        rows=j.rows,
        layout=layout,
        retention=config.retention.time,
        allowed_lateness=config.watermark.allowed_lateness,
        idle_timeout=config.watermark.idle_timeout,
        left_topic=j.left.topic_name,
        right_topic=j.right.topic_name,
    )
    decoders = (JoinDecoder(j.left, j.on), JoinDecoder(j.right, j.on))
    return JoinRuntime(config, spec, decoders)

"""Columnar decoding of clean JSON chunks with Arrow's JSON reader.

The per-record decoder (:class:`~window_operator.events.RecordDecoder` after
:func:`~window_operator.codecs.json_input.parse_json`) is exact and explains every
rejection, but costs a few microseconds a record in Python. Most chunks of a real
stream are clean, so this module first tries to parse a whole chunk at once with an
explicit Arrow schema. It gives up (returns ``None``) whenever it cannot prove that the
per-record path would accept every payload with the same values; the caller then
decodes that chunk record by record, so results and errors are the same either way.

Arrow's reader is laxer than orjson in a few ways, each checked on the raw bytes before
it runs: it reads a stream of documents, so a payload holding two objects (or an empty
one) would shift rows between payloads -- every payload must begin with ``{`` and end
with ``}`` with no newline inside; it does not validate UTF-8; it accepts ``NaN`` and
``Inf`` literals; it has no nesting limit. After parsing it declines a field of another
type, a null or missing key, timestamp or value, a value ``-0`` (an integer 0 to orjson,
``-0.0`` to Arrow), object-valued operations, ISO-8601 timestamps and keys of more than
three fields.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as paj

from window_operator.eventkey import kafka_key_text
from window_operator.events import EventBatch, IntArray, RecordDecoder
from window_operator.eventtime import MAX_ABS_TS
from window_operator.rejections import RecordRejected
from window_operator.timeunits import floats_to_ms

__all__ = ["ColumnarJsonDecoder"]

_INT_UNITS = {"us": 1000, "ns": 1_000_000}
#: Jobs keyed by more fields decode record by record (each key field is tried as a
#: string and as an integer column: 2^k schemas).
_MAX_KEY_FIELDS = 3
#: A JSON string (group 1 unset) or, outside strings, a literal Arrow reads as a
#: non-finite number (group 1), or the integer -0 (group 2).
_LITERALS = re.compile(
    rb'"[^"\\]*(?:\\.[^"\\]*)*"|(-?(?:Infinity|Inf|NaN))|(-0(?![.eE0-9]))', re.DOTALL
)


def _has_literal(data: bytes, group: int) -> bool:
    """Whether ``data`` holds, outside its strings, what ``group`` of ``_LITERALS`` matches."""
    return any(m.group(group) is not None for m in _LITERALS.finditer(data))


_OPEN, _CLOSE, _NEWLINE = ord("{"), ord("}"), ord("\n")
#: orjson's nesting limit: a payload with at most this many ``{`` and ``[`` is within it.
_MAX_DEPTH = 1024


def _framed_clean(lines: Sequence[bytes], data: bytes) -> bool:
    """Whether every payload is one object on its own line, within what orjson accepts.

    ``data`` is the payloads joined by newlines. Each must start with ``{`` and end with
    ``}`` with no newline inside: since a JSON string cannot hold a raw newline, Arrow's
    rows then map one to one onto the payloads when their count matches. The checks
    run over a NumPy view of the bytes (a few passes, no copies).
    """
    n = len(lines)
    raw = np.frombuffer(data, dtype=np.uint8)
    if not len(raw) or raw[0] != _OPEN or raw[-1] != _CLOSE:
        return False
    newlines = np.flatnonzero(raw == _NEWLINE)
    if len(newlines) != n - 1:
        return False
    if not (np.all(raw[newlines - 1] == _CLOSE) and np.all(raw[newlines + 1] == _OPEN)):
        return False
    # outside strings, an N or I can only start a NaN/Inf literal
    if (b"N" in data or b"I" in data) and _has_literal(data, 1):
        return False
    if not data.isascii():
        try:
            data.decode()
        except UnicodeDecodeError:
            return False
    # A payload holds no more braces than bytes: only a longer one can be too deep.
    longest = int(np.diff(newlines, prepend=-1, append=len(raw)).max()) - 1
    if longest > _MAX_DEPTH:
        return not any(line.count(b"{") + line.count(b"[") > _MAX_DEPTH for line in lines)
    return True


_NUMPY_TYPES = {pa.int64(): np.dtype(np.int64), pa.float64(): np.dtype(np.float64)}


def _values(column: pa.ChunkedArray) -> Any:
    """The values of a null-free int64 or float64 column, read-only, without a copy of
    a single chunk.

    Read straight from the Arrow buffers: ``to_numpy`` (and ``to_pandas_dtype``) go
    through pyarrow's pandas layer, which imports pandas (about 0.1 s of every
    ``simulate`` run).
    """
    dtype = _NUMPY_TYPES[column.type]
    parts = [
        np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c), offset=c.offset * dtype.itemsize)
        for c in column.chunks
        if len(c)
    ]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


@dataclass(frozen=True, slots=True)
class KafkaColumns:
    """What a chunk's Kafka records give where the decoder reads it: the event times
    (``None``: a time field is read) and the keys (``None``: key fields are)."""

    stamps: IntArray | None
    keys: list[str] | None


class ColumnarJsonDecoder:
    """Decodes chunks of JSON lines straight into an :class:`EventBatch`, or declines."""

    def __init__(self, decoder: RecordDecoder, *, absent_fields: Sequence[str] = ()) -> None:
        self.decoder = decoder
        #: Fields that must not appear (e.g. simulate's per-line partition/offset):
        #: a chunk carrying any of them is left to the per-record path.
        self.absent_fields = tuple(absent_fields)
        self._absent_names = tuple(b'"' + f.encode() + b'"' for f in self.absent_fields)
        k = len(decoder.key_fields)
        # one field read two ways (a key that is also the timestamp or a value) is
        # one Arrow column of one type: left to the per-record path
        names = [*decoder.key_fields, *self._time_fields, *decoder.float_fields]
        self.enabled = (
            not decoder.object_fields
            and decoder.timestamp_unit != "iso8601"
            and k <= _MAX_KEY_FIELDS
            and len(set(names)) == len(names)
            and not set(names) & set(self.absent_fields)
        )
        #: The key columns' types to try, string or int64 each; the last that worked first.
        self._key_types = list(itertools.product((pa.string(), pa.int64()), repeat=k))

    def _schema(self, key_types: tuple[pa.DataType, ...]) -> pa.Schema:
        d = self.decoder
        fields = [pa.field(f, t) for f, t in zip(d.key_fields, key_types, strict=True)]
        ts_type = pa.int64() if d.timestamp_unit in _INT_UNITS else pa.float64()
        fields += [pa.field(f, ts_type) for f in self._time_fields]
        fields += [pa.field(f, pa.float64()) for f in d.float_fields]
        fields += [pa.field(f, pa.int64()) for f in self.absent_fields]
        return pa.schema(fields)  # distinct names: see ``enabled``

    @property
    def _time_fields(self) -> tuple[str, ...]:
        """The event-time field, none where the Kafka record timestamp is the event time."""
        field = self.decoder.timestamp_field
        return () if field is None else (field,)

    def decode(
        self,
        lines: Sequence[bytes],
        record_times: Sequence[int] | None = None,
        record_keys: Sequence[object] | None = None,
    ) -> EventBatch | None:
        """The chunk as a batch (offsets left for the aggregator to assign), or ``None``.

        ``record_times`` / ``record_keys``: the lines' Kafka timestamps and keys, the
        event times where the decoder has no timestamp field and the keys where it reads
        the Kafka key (a chunk without them, or with one that the per-record path would
        reject, is declined: that path rejects it with its reason).
        """
        if not self.enabled or not lines:
            return None
        kafka = self._kafka_columns(len(lines), record_times, record_keys)
        if kafka is None:
            return None
        data = b"\n".join(lines)
        if not _framed_clean(lines, data):
            return None
        if any(name in data for name in self._absent_names):
            return None  # even as null: the per-record path judges the field
        for key_types in list(self._key_types):
            table = self._read(data, key_types)
            if table is not None:
                # keep the types that worked first for the next chunk
                self._key_types.remove(key_types)
                self._key_types.insert(0, key_types)
                return self._to_batch(table, len(lines), data, kafka)
        return None

    def _kafka_columns(
        self, n: int, record_times: Sequence[int] | None, record_keys: Sequence[object] | None
    ) -> KafkaColumns | None:
        """The event times and keys the Kafka records give, where the decoder reads
        them (``None``: not given, or one would be rejected)."""
        d = self.decoder
        stamps: IntArray | None = None
        keys: list[str] | None = None
        if d.timestamp_field is None:
            if record_times is None or len(record_times) != n:
                return None
            stamps = np.asarray(record_times, dtype=np.int64)
            if int(stamps.min()) < 0 or int(stamps.max()) >= MAX_ABS_TS:
                return None
        if d.kafka_key:
            if record_keys is None or len(record_keys) != n:
                return None
            try:
                keys = [kafka_key_text(k, d.max_key_bytes, d.key_format) for k in record_keys]
            except RecordRejected:
                return None
        return KafkaColumns(stamps, keys)

    def _read(self, data: bytes, key_types: tuple[pa.DataType, ...]) -> pa.Table | None:
        try:
            return paj.read_json(
                pa.BufferReader(data),
                read_options=paj.ReadOptions(use_threads=False, block_size=len(data) + 1),
                parse_options=paj.ParseOptions(
                    explicit_schema=self._schema(key_types),
                    unexpected_field_behavior="ignore",
                    newlines_in_values=False,
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def _to_batch(
        self, table: pa.Table, n: int, data: bytes, kafka: KafkaColumns
    ) -> EventBatch | None:
        d = self.decoder
        if table.num_rows != n:
            return None
        for f in self.absent_fields:
            if table.column(f).null_count != n:
                return None
        cols = [*self._time_fields, *d.float_fields, *d.key_fields]
        if any(table.column(c).null_count for c in cols):
            return None
        keys = self._keys(table, n) if kafka.keys is None else kafka.keys
        if keys is None:
            return None
        if kafka.stamps is None:
            assert d.timestamp_field is not None  # stamps are given exactly without it
            ts = self._timestamps(_values(table.column(d.timestamp_field)))
        else:
            ts = kafka.stamps
        if ts is None:
            return None
        numeric = {f: _values(table.column(f)).astype(np.float64) for f in d.numeric_fields}
        # a counted field is a number here (a string declines the chunk), and present
        numeric |= {f: np.ones(n, dtype=np.float64) for f in d.counted_fields}
        if any(np.any(np.signbit(c) & (c == 0.0)) for c in numeric.values()):
            # Arrow reads the integer -0 as -0.0, orjson as 0 (a float 0.0 here)
            if _has_literal(data, 2):
                return None
        return EventBatch(
            keys=keys,
            ts=ts,
            partition=np.zeros(n, dtype=np.int64),
            offset=np.full(n, -1, dtype=np.int64),
            numeric=numeric,
            objects={},
            wall_ms=None,
        )

    def _keys(self, table: pa.Table, n: int) -> list[str] | None:
        """Each row's key as :meth:`RecordDecoder.key_of` makes it (``None``: a key over
        the size limit, which the exact path rejects with its reason)."""
        d = self.decoder
        texts: list[list[str]] = []
        for f in d.key_fields:
            kcol = table.column(f)
            if pa.types.is_integer(kcol.type):
                texts.append([str(k) for k in kcol.to_pylist()])
            else:
                if len(kcol) and pc.max(pc.binary_length(kcol)).as_py() > d.max_key_bytes:
                    return None
                texts.append(kcol.to_pylist())
        if len(texts) == 1:
            return texts[0]
        if not texts:
            return [""] * n
        dumps = orjson.dumps
        keys = [dumps(row).decode() for row in zip(*texts, strict=True)]
        # a character is at most 4 UTF-8 bytes: only then count the bytes
        if max(map(len, keys)) * 4 > d.max_key_bytes and any(
            len(k.encode()) > d.max_key_bytes for k in keys
        ):
            return None
        return keys

    def _timestamps(self, raw: Any) -> Any:
        unit = self.decoder.timestamp_unit
        if unit in _INT_UNITS:
            return np.floor_divide(raw.astype(np.int64), _INT_UNITS[unit])
        values = raw.astype(np.float64)
        if unit not in ("ms", "s") or not np.isfinite(values).all():
            return None
        ts = floats_to_ms(values, unit)
        if np.abs(ts).max() >= 2**53:  # beyond exact float integers: let the exact path decide
            return None
        return ts.astype(np.int64)

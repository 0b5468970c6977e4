"""Kafka payload codecs: input events in, window results and error records out.

Input
    A :class:`PayloadDecoder` turns raw message values into Python records (dicts) one
    message at a time and reports failures as data: ``decode`` returns the records, with
    :data:`DECODE_FAILED` in the place of each payload it could not read, and the
    ``(index, reason)`` of every failure. :func:`decode_payloads` chains a payload
    decoder with the job's :class:`~window_operator.events.RecordDecoder` and returns a
    :class:`~window_operator.events.DecodeResult` whose errors carry
    ``BAD_JSON``/``BAD_AVRO`` (payload level) or the record-level codes, each with the
    original bytes. A null payload (a tombstone) is always a failure.

    :class:`AvroPayloadDecoder` reads values written with the job's schema (a local
    ``.avsc`` file) either bare (``schemaless``) or in the Confluent wire format (magic
    byte ``0``, a 4-byte big-endian schema id, then the Avro body). Because the schema
    is local, any schema id is accepted; the first one seen is kept in
    :attr:`AvroPayloadDecoder.schema_id`. Values are made JSON-native so that the rest
    of the pipeline sees what a JSON input would give: ``timestamp-millis`` longs stay
    epoch-millisecond ints (the logical type is not expanded at all, which is also the
    fastest path), other timestamps become epoch milliseconds (floored), decimals
    floats, dates and times ISO-8601 strings, UUIDs strings and ``bytes``/``fixed``
    strings of code points 0-255 (the Avro JSON encoding of bytes). A payload with bytes
    left over after the record is rejected: it was written with another schema.

Output
    Every output record is keyed by the window: the Kafka key is the JSON text
    ``{"key":...,"window_start":...,"window_end":...}`` with exactly that field order
    (see :func:`result_key`) for both output formats, so the key bytes of a window are
    stable and equal across EARLY/ON_TIME/LATE updates and the output topic can be
    compacted (the latest record per key is the answer). A ``RETRACT`` result is a
    tombstone: the key with a null value. The key stays JSON even with Avro values so
    that it needs no schema registry and is readable by every consumer.

    :class:`JsonResultEncoder` writes the value as JSON (the same document as
    :meth:`WindowResult.to_dict <window_operator.results.WindowResult.to_dict>`).
    :class:`AvroResultEncoder` writes schemaless Avro (or, with ``confluent_schema_id``,
    the Confluent wire format) with the job's ``output.avro_schema`` or, without one,
    the schema :func:`derive_result_schema` derives from the aggregations. Values whose
    type is open (``first``, ``last``, ``collect``, user-defined ops) are written as
    their JSON text; :class:`AvroResultDecoder` parses them back. Batches in the derived
    schema are encoded column by column (byte-identical to ``fastavro``, several times
    faster); a user schema goes through ``fastavro.schemaless_writer`` row by row.

Errors
    :func:`encode_error` gives the Kafka record of a rejected input for the errors topic,
    following the Kafka Connect dead-letter-queue convention: the original key and value
    bytes, and the reason in headers. :func:`error_json` is the one-line JSON form for
    files.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from itertools import repeat
from pathlib import Path
from typing import Any, Final, Literal, Protocol
from uuid import UUID

import fastavro
import numpy as np
import orjson

from window_operator.config import AggregationConfig, JobConfig
from window_operator.events import DecodeResult, RecordDecoder
from window_operator.results import ErrorCode, ErrorRecord, Kind, ResultBatch

__all__ = [
    "DECODE_FAILED",
    "HEADER_ERROR_CODE",
    "HEADER_ERROR_REASON",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "AvroPayloadDecoder",
    "AvroResultDecoder",
    "AvroResultEncoder",
    "AvroSchemaError",
    "AvroWire",
    "JsonPayloadDecoder",
    "JsonResultDecoder",
    "JsonResultEncoder",
    "PayloadDecoder",
    "ResultDecoder",
    "ResultEncoder",
    "decode_payloads",
    "decode_result_key",
    "decode_result_value",
    "derive_result_schema",
    "encode_error",
    "error_json",
    "payload_decoder_for",
    "result_decoder_for",
    "result_encoder_for",
    "result_key",
]

AvroWire = Literal["schemaless", "confluent"]

#: Header names of an error record (Kafka Connect dead-letter-queue style), UTF-8 values.
HEADER_ERROR_CODE: Final = "error.code"
HEADER_ERROR_REASON: Final = "error.reason"
HEADER_SOURCE_TOPIC: Final = "source.topic"
HEADER_SOURCE_PARTITION: Final = "source.partition"
HEADER_SOURCE_OFFSET: Final = "source.offset"

_LONG_OPS: Final = frozenset({"count", "count_distinct"})
_DOUBLE_OPS: Final = frozenset({"sum", "mean", "min", "max", "variance", "stddev", "median"})
_KIND_SYMBOLS: Final = [kind.value for kind in Kind]
_NAMESPACE: Final = "window_operator"
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_CONFLUENT_MAGIC: Final = 0
_CONFLUENT_HEADER: Final = 5

_NULL_PAYLOAD: Final = "null payload (a tombstone): there is no record to decode"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_ONE_MS: Final = timedelta(milliseconds=1)
# Logical types whose underlying long already is what the pipeline wants (epoch ms).
_KEEP_RAW_LOGICAL: Final = frozenset({"timestamp-millis", "local-timestamp-millis"})
_JSON_OPTS: Final = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


class _Failed:
    """The type of :data:`DECODE_FAILED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DECODE_FAILED"


#: Stands in the records returned by :meth:`PayloadDecoder.decode` for a failed payload.
DECODE_FAILED: Final[Any] = _Failed()


class AvroSchemaError(ValueError):
    """An Avro schema that cannot be loaded, derived or used for the job's results."""


# ---------------------------------------------------------------------------------------
# Input: payload decoders
# ---------------------------------------------------------------------------------------


class PayloadDecoder(Protocol):
    """Parses message values into records; a failure is data, never an exception."""

    @property
    def error_code(self) -> ErrorCode:
        """The code of the error records made from this decoder's failures."""
        ...

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Parse ``payloads`` one by one.

        Returns one record per payload (:data:`DECODE_FAILED` for each failure) and the
        ``(index, reason)`` of the failures in index order.
        """
        ...


class JsonPayloadDecoder:
    """JSON message values (orjson).

    Any JSON document is returned as parsed, objects or not: the
    :class:`~window_operator.events.RecordDecoder` rejects non-objects with
    ``NOT_AN_OBJECT``. Failures: null payloads and text that is not JSON.
    """

    @property
    def error_code(self) -> ErrorCode:
        """``BAD_JSON``."""
        return ErrorCode.BAD_JSON

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Parse each payload as JSON; see :meth:`PayloadDecoder.decode`."""
        records: list[Any] = []
        failures: list[tuple[int, str]] = []
        loads = orjson.loads
        append = records.append
        for i, payload in enumerate(payloads):
            if payload is None:
                append(DECODE_FAILED)
                failures.append((i, _NULL_PAYLOAD))
                continue
            try:
                append(loads(payload))
            except orjson.JSONDecodeError as exc:
                append(DECODE_FAILED)
                failures.append((i, f"invalid JSON: {exc}"))
        return records, failures


class AvroPayloadDecoder:
    """Avro message values written with the schema in ``schema_path``.

    ``wire`` is ``"schemaless"`` (the bare Avro body) or ``"confluent"`` (magic byte
    ``0``, 4-byte big-endian schema id, body). The schema is parsed once; each message
    is read with ``fastavro.schemaless_reader``. See the module docstring for how
    logical types are converted. Raises :class:`AvroSchemaError` if the schema file
    cannot be read or is not a valid Avro schema.
    """

    def __init__(self, schema_path: str | Path, wire: AvroWire = "schemaless") -> None:
        if wire not in ("schemaless", "confluent"):
            raise ValueError(f"wire must be 'schemaless' or 'confluent', got {wire!r}")
        self.schema_path = Path(schema_path)
        self.wire: AvroWire = wire
        self.schema: Any = _load_schema_file(self.schema_path)
        self._parsed = _parse_schema(_keep_raw_millis(self.schema), str(self.schema_path))
        self._fixup: Callable[[Any], Any] | None = (
            _json_native if _needs_json_native(self.schema) else None
        )
        self._schema_id: int | None = None

    @property
    def error_code(self) -> ErrorCode:
        """``BAD_AVRO``."""
        return ErrorCode.BAD_AVRO

    @property
    def schema_id(self) -> int | None:
        """The schema id of the first Confluent-framed message read (``None``: none yet)."""
        return self._schema_id

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Read one Avro record per payload; see :meth:`PayloadDecoder.decode`.

        Failure reasons: a null payload; for the Confluent wire format a payload shorter
        than the 5-byte header or with a magic byte other than 0; ``invalid Avro: ...``
        for a truncated or corrupt body or bytes left over after the record.
        """
        records: list[Any] = []
        failures: list[tuple[int, str]] = []
        append = records.append
        read = fastavro.schemaless_reader
        schema = self._parsed
        fixup = self._fixup
        new_buffer = io.BytesIO
        framed = self.wire == "confluent"
        start = _CONFLUENT_HEADER if framed else 0
        for i, payload in enumerate(payloads):
            if payload is None:
                append(DECODE_FAILED)
                failures.append((i, _NULL_PAYLOAD))
                continue
            size = len(payload)
            if framed:
                problem = _confluent_problem(payload)
                if problem is not None:
                    append(DECODE_FAILED)
                    failures.append((i, problem))
                    continue
                if self._schema_id is None:
                    self._schema_id = int.from_bytes(payload[1:_CONFLUENT_HEADER], "big")
            buffer = new_buffer(payload)
            if start:
                buffer.seek(start)
            try:
                record = read(buffer, schema, None)
            except Exception as exc:  # any failure of the reader is a property of the data
                append(DECODE_FAILED)
                failures.append((i, _avro_reason(exc, size - start)))
                continue
            left = size - buffer.tell()
            if left:
                append(DECODE_FAILED)
                failures.append(
                    (
                        i,
                        f"invalid Avro: {left} byte(s) left over after the record "
                        f"({size - start}-byte body); was it written with another schema?",
                    )
                )
                continue
            append(record if fixup is None else fixup(record))
        return records, failures


def payload_decoder_for(config: JobConfig) -> PayloadDecoder:
    """The payload decoder of the job's ``input.format`` (and Avro schema and wire)."""
    inp = config.input
    if inp.format == "json":
        return JsonPayloadDecoder()
    if inp.avro_schema is None:  # the config validation requires it
        raise AvroSchemaError("input.format is avro but input.avro_schema is not set")
    return AvroPayloadDecoder(inp.avro_schema, wire=inp.avro_wire)


def decode_payloads(
    payloads: Sequence[bytes | None],
    payload_decoder: PayloadDecoder,
    record_decoder: RecordDecoder,
    *,
    partitions: Sequence[int] | None = None,
    offsets: Sequence[int] | None = None,
    wall_ms: Sequence[int] | None = None,
    default_partition: int = 0,
    topic: str | None = None,
) -> DecodeResult:
    """Parse and decode message values into an event batch and error records.

    Payload failures become errors with the decoder's code (``BAD_JSON``/``BAD_AVRO``)
    and the parser's reason; records the record decoder rejects keep its code. Every
    error carries the original bytes as ``raw`` and ``topic`` when given; errors are in
    input order and ``kept`` holds the input index of every batch row.
    """
    records, failures = payload_decoder.decode(payloads)
    if not failures:
        result = record_decoder.decode_records(
            records,
            partitions=partitions,
            offsets=offsets,
            raws=payloads,
            wall_ms=wall_ms,
            default_partition=default_partition,
        )
        if topic is not None:
            result.errors = [replace(err, topic=topic) for err in result.errors]
        return result
    failed = {i for i, _ in failures}
    good = [i for i in range(len(records)) if i not in failed]
    result = record_decoder.decode_records(
        [records[i] for i in good],
        partitions=None if partitions is None else [partitions[i] for i in good],
        offsets=None if offsets is None else [offsets[i] for i in good],
        raws=[payloads[i] for i in good],
        wall_ms=None if wall_ms is None else [wall_ms[i] for i in good],
        default_partition=default_partition,
    )
    kept = [good[j] for j in result.kept]
    kept_set = set(kept)
    rejected = [i for i in good if i not in kept_set]
    indexed: list[tuple[int, ErrorRecord]] = [
        (i, err if topic is None else replace(err, topic=topic))
        for i, err in zip(rejected, result.errors, strict=True)
    ]
    code = payload_decoder.error_code
    for i, reason in failures:
        indexed.append(
            (
                i,
                ErrorRecord(
                    code=code,
                    reason=reason,
                    partition=partitions[i] if partitions is not None else default_partition,
                    offset=offsets[i] if offsets is not None else None,
                    raw=payloads[i],
                    topic=topic,
                ),
            )
        )
    indexed.sort(key=lambda item: item[0])
    return DecodeResult(result.batch, [err for _, err in indexed], kept)


def _confluent_problem(payload: bytes) -> str | None:
    if len(payload) < _CONFLUENT_HEADER:
        return (
            f"invalid Confluent wire format: {len(payload)} byte(s), shorter than the 5-byte "
            "header (magic byte 0 + 4-byte schema id)"
        )
    if payload[0] != _CONFLUENT_MAGIC:
        return (
            f"invalid Confluent wire format: magic byte is 0x{payload[0]:02x}, expected 0x00 "
            "(is the topic written without a schema registry? use input.avro_wire: schemaless)"
        )
    return None


def _avro_reason(exc: Exception, body_size: int) -> str:
    if isinstance(exc, EOFError | IndexError):
        # fastavro's readers raise EOFError, or IndexError when a varint runs off the end.
        what = "unexpected end of data: the payload is truncated or corrupt"
    elif isinstance(exc, UnicodeDecodeError):
        what = f"a string is not valid UTF-8 ({exc.reason})"
    else:
        detail = str(exc)
        what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return f"invalid Avro: {what} ({body_size}-byte body)"


# ---------------------------------------------------------------------------------------
# Avro schema helpers
# ---------------------------------------------------------------------------------------


def _load_schema_file(path: Path) -> Any:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise AvroSchemaError(f"{path}: cannot read the Avro schema: {exc}") from exc
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise AvroSchemaError(f"{path}: the Avro schema is not JSON: {exc}") from exc


def _parse_schema(schema: Any, source: str) -> Any:
    try:
        return fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise AvroSchemaError(f"{source}: invalid Avro schema: {exc}") from exc


def _schema_children(node: Mapping[str, Any]) -> Iterable[Any]:
    for key in ("type", "items", "values"):
        if key in node:
            yield node[key]
    for fld in node.get("fields") or ():
        if isinstance(fld, Mapping):
            yield fld


def _keep_raw_millis(schema: Any) -> Any:
    """A copy of ``schema`` without the millisecond timestamp logical types.

    The binary encoding is the same; without the logical type fastavro reads the
    epoch-ms long as an int (instead of a datetime) and writes an int without a check.
    """
    if isinstance(schema, list):
        return [_keep_raw_millis(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("type", "items", "values"):
            out[key] = _keep_raw_millis(value)
        elif key == "fields" and isinstance(value, list):
            out[key] = [_keep_raw_millis(fld) for fld in value]
        else:
            out[key] = value
    if out.get("type") == "long" and out.get("logicalType") in _KEEP_RAW_LOGICAL:
        del out["logicalType"]
    return out


def _needs_json_native(schema: Any) -> bool:
    """Whether records of ``schema`` may hold values that are not JSON-native."""
    if isinstance(schema, list):
        return any(_needs_json_native(item) for item in schema)
    if isinstance(schema, str):
        return schema in ("bytes", "fixed")
    if not isinstance(schema, Mapping):
        return False
    logical = schema.get("logicalType")
    if schema.get("type") in ("bytes", "fixed"):
        return True
    if logical is not None and not (schema.get("type") == "long" and logical in _KEEP_RAW_LOGICAL):
        return True
    return any(_needs_json_native(child) for child in _schema_children(schema))


_SCALARS: Final = (str, int, float, bool, type(None))


def _json_native(value: Any) -> Any:
    """``value`` with the non-JSON types fastavro returns converted (module docstring)."""
    cls = value.__class__
    if cls in _SCALARS:
        return value
    if cls is dict:
        return {k: _json_native(v) for k, v in value.items()}
    if cls is list:
        return [_json_native(v) for v in value]
    if isinstance(value, datetime):
        epoch = _EPOCH_NAIVE if value.tzinfo is None else _EPOCH
        return (value - epoch) // _ONE_MS
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, tuple):
        return [_json_native(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------
# Output: window results
# ---------------------------------------------------------------------------------------


def result_key(key: str, window_start: int, window_end: int) -> bytes:
    """The Kafka key of a window: ``{"key":...,"window_start":...,"window_end":...}``."""
    return orjson.dumps({"key": key, "window_start": window_start, "window_end": window_end})


def decode_result_key(data: bytes) -> tuple[str, int, int]:
    """``(key, window_start, window_end)`` of a Kafka key made by :func:`result_key`."""
    doc = orjson.loads(data)
    return doc["key"], doc["window_start"], doc["window_end"]


def _batch_keys(batch: ResultBatch) -> list[bytes]:
    dumps = orjson.dumps
    return [
        dumps({"key": k, "window_start": s, "window_end": e})
        for k, s, e in zip(
            batch.keys, batch.window_start.tolist(), batch.window_end.tolist(), strict=True
        )
    ]


def _dumps_json(value: Any) -> bytes:
    """orjson, falling back to the stdlib for what orjson refuses (e.g. ints > 64 bits)."""
    try:
        return orjson.dumps(value, option=_JSON_OPTS)
    except orjson.JSONEncodeError:
        text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False, default=repr)
        return text.encode()


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (as orjson writes them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class ResultEncoder(Protocol):
    """Turns result batches into Kafka records ``(key, value)``; ``value`` ``None`` = tombstone."""

    @property
    def format(self) -> Literal["json", "avro"]:
        """The output format."""
        ...

    def encode_batch(self, batch: ResultBatch) -> list[tuple[bytes, bytes | None]]:
        """One Kafka record per row of ``batch``, in row order."""
        ...


class ResultDecoder(Protocol):
    """Reads result values written by the matching :class:`ResultEncoder`."""

    def decode(self, value: bytes | None) -> dict[str, Any] | None:
        """The result as a :meth:`WindowResult.to_dict`-shaped dict; ``None`` for a tombstone."""
        ...


class JsonResultEncoder:
    """Window results as JSON values (``WindowResult.to_dict`` documents, orjson).

    Non-finite floats are written as ``null`` (JSON has no NaN or infinity).
    """

    @property
    def format(self) -> Literal["json", "avro"]:
        """``"json"``."""
        return "json"

    def encode_batch(self, batch: ResultBatch) -> list[tuple[bytes, bytes | None]]:
        """One ``(key, value)`` per row; a RETRACT batch gives tombstones."""
        keys = _batch_keys(batch)
        if batch.kind is Kind.RETRACT:
            return [(key, None) for key in keys]
        names = list(batch.values)
        cols = [batch.values[n] for n in names]
        rows = zip(*cols, strict=True) if cols else repeat((), len(keys))
        # The key document is the value's prefix: splice it instead of serializing the
        # window twice. The bytes equal orjson.dumps of the whole to_dict() document.
        head = b',"kind":' + orjson.dumps(batch.kind.value) + b',"update_seq":'
        dumps = orjson.dumps
        out: list[tuple[bytes, bytes | None]] = []
        for key_bytes, seq, row in zip(keys, batch.update_seq.tolist(), rows, strict=True):
            values = dict(zip(names, row, strict=True))
            try:
                values_json = dumps(values, option=_JSON_OPTS)
            except orjson.JSONEncodeError:
                values_json = _dumps_json(values)
            out.append(
                (key_bytes, b'%b%b%d,"values":%b}' % (key_bytes[:-1], head, seq, values_json))
            )
        return out

    def decoder(self) -> JsonResultDecoder:
        """The decoder of this encoder's values."""
        return JsonResultDecoder()


class JsonResultDecoder:
    """Reads :class:`JsonResultEncoder` values."""

    def decode(self, value: bytes | None) -> dict[str, Any] | None:
        """The result document, ``None`` for a tombstone."""
        if value is None:
            return None
        doc: dict[str, Any] = orjson.loads(value)
        return doc


#: How the derived schema stores one aggregation's values (see derive_result_schema).
_Column = Literal["long", "double", "map", "fit", "text"]


def _column_of(agg: AggregationConfig) -> _Column:
    """The value column kind of one aggregation in the derived schema."""
    op = agg.op
    if op in _LONG_OPS:
        return "long"
    if op in _DOUBLE_OPS:
        return "double"
    if op == "percentile":
        q = agg.params.get("q")
        return "map" if isinstance(q, Sequence) and not isinstance(q, str | bytes) else "double"
    if op == "linreg":
        return "fit"
    return "text"


_LINEAR_FIT: Final = {
    "type": "record",
    "name": "LinearFit",
    "doc": "value = slope * x + intercept (least squares)",
    "fields": [
        {"name": "slope", "type": "double"},
        {"name": "intercept", "type": "double"},
    ],
}


def _avro_type_of(column: _Column, defined: set[str]) -> Any:
    """The Avro type of a value column (a named type is defined once, then referenced)."""
    if column == "long":
        return "long"
    if column == "double":
        return ["null", "double"]
    if column == "map":
        return ["null", {"type": "map", "values": "double"}]
    if column == "fit":
        if "LinearFit" in defined:
            return ["null", "LinearFit"]
        defined.add("LinearFit")
        return ["null", dict(_LINEAR_FIT)]
    return ["null", "string"]


def derive_result_schema(
    aggregations: Sequence[AggregationConfig], *, job: str | None = None
) -> dict[str, Any]:
    """The Avro schema of the window results of a job with these aggregations.

    A ``WindowResult`` record (namespace ``window_operator``) with ``key``,
    ``window_start``/``window_end`` (``long``, ``timestamp-millis``), ``kind`` (enum),
    ``update_seq`` and ``values``, a ``Values`` record with one field per aggregation in
    declaration order: ``count``/``count_distinct`` ``long``; the numeric statistics
    ``["null", "double"]``; ``percentile`` with a list ``q`` a nullable map of doubles
    keyed ``p50``, ``p95``...; ``linreg`` a nullable ``LinearFit`` record; ``first``,
    ``last``, ``collect`` and user-defined ops ``["null", "string"]`` with the JSON text
    of the value. Raises :class:`AvroSchemaError` when an aggregation name is not a
    valid Avro field name.
    """
    bad = [agg.name for agg in aggregations if not _AVRO_NAME.fullmatch(agg.name)]
    if bad:
        raise AvroSchemaError(
            "aggregation names must be valid Avro field names ([A-Za-z_][A-Za-z0-9_]*) for "
            f"output.format avro: {', '.join(repr(n) for n in bad)}; rename them or set "
            "output.avro_schema"
        )
    defined: set[str] = set()
    fields: list[dict[str, Any]] = []
    for agg in aggregations:
        column = _column_of(agg)
        fld: dict[str, Any] = {"name": agg.name, "type": _avro_type_of(column, defined)}
        if column == "text":
            fld["doc"] = f"JSON text of the {agg.op} value"
        fields.append(fld)
    timestamp = {"type": "long", "logicalType": "timestamp-millis"}
    schema: dict[str, Any] = {
        "type": "record",
        "name": "WindowResult",
        "namespace": _NAMESPACE,
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": timestamp},
            {"name": "window_end", "type": dict(timestamp)},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": _KIND_SYMBOLS}},
            {"name": "update_seq", "type": "long"},
            {"name": "values", "type": {"type": "record", "name": "Values", "fields": fields}},
        ],
    }
    if job is not None:
        schema["doc"] = f"Window results of job {job}"
    return schema


def _fields_of(record: Any) -> list[Mapping[str, Any]]:
    if isinstance(record, Mapping) and record.get("type") == "record":
        return [f for f in record.get("fields") or () if isinstance(f, Mapping)]
    return []


def _record_in(avro_type: Any) -> Any:
    """The record schema of a field type that is a record or a union with one."""
    if isinstance(avro_type, Mapping) and avro_type.get("type") == "record":
        return avro_type
    if isinstance(avro_type, list):
        records = [t for t in avro_type if isinstance(t, Mapping) and t.get("type") == "record"]
        if len(records) == 1:
            return records[0]
    return None


def _is_string_type(avro_type: Any) -> bool:
    if avro_type == "string":
        return True
    if isinstance(avro_type, list):
        return "string" in avro_type and all(t in ("null", "string") for t in avro_type)
    return isinstance(avro_type, Mapping) and avro_type.get("type") == "string"


def _check_user_schema(schema: Any, config: JobConfig, source: str) -> set[str]:
    """Check a user result schema against the job; return its JSON-text value fields."""
    top = _fields_of(schema)
    if not top:
        raise AvroSchemaError(f"{source}: the output schema must be an Avro record")
    produced = {"key", "window_start", "window_end", "kind", "update_seq", "values"}
    missing = [f["name"] for f in top if f.get("name") not in produced and "default" not in f]
    values_field = next((f for f in top if f.get("name") == "values"), None)
    json_text: set[str] = set()
    problems: list[str] = []
    if missing:
        problems.append(
            f"fields without a default that a window result does not have: {', '.join(missing)}"
        )
    if values_field is not None:
        values_record = _record_in(values_field.get("type"))
        names = {agg.name for agg in config.aggregations}
        inner = _fields_of(values_record)
        unknown = [f["name"] for f in inner if f.get("name") not in names and "default" not in f]
        if unknown:
            problems.append(
                "values fields without a default that are not aggregations: " + ", ".join(unknown)
            )
        types = {f.get("name"): f.get("type") for f in inner}
        for agg in config.aggregations:
            if _column_of(agg) == "text" and _is_string_type(types.get(agg.name)):
                json_text.add(agg.name)
    if problems:
        raise AvroSchemaError(
            f"{source}: the output schema does not fit the job: " + "; ".join(problems)
        )
    return json_text


def _json_text_column(values: list[Any]) -> list[str | None]:
    dumps = orjson.dumps
    out: list[str | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        try:
            out.append(dumps(v, option=_JSON_OPTS).decode())
        except orjson.JSONEncodeError:
            out.append(_dumps_json(v).decode())
    return out


def _confluent_header(schema_id: int) -> bytes:
    if not 0 <= schema_id < 2**31:
        raise ValueError(f"a schema id must be in [0, 2**31), got {schema_id}")
    return bytes([_CONFLUENT_MAGIC]) + schema_id.to_bytes(4, "big")


def _zigzag_varint(value: int) -> bytes:
    """One Avro ``long``/``int``: zigzag, then base-128 varint (low groups first)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL_LONGS: Final = tuple(_zigzag_varint(i) for i in range(1024))
_NULL_BRANCH: Final = b"\x00"
_VALUE_BRANCH: Final = b"\x02"
_PACK_OPT_DOUBLE: Final = struct.Struct("<Bd").pack
_PACK_OPT_FIT: Final = struct.Struct("<Bdd").pack
_PACK_DOUBLE: Final = struct.Struct("<d").pack
_VARINT_BYTES = 10  # a 64-bit zigzag value takes at most 10 groups of 7 bits
_MIN_VECTOR_ROWS = 32  # below this NumPy's fixed cost outweighs the per-row loop


def _avro_longs(values: Any) -> list[bytes]:
    """The Avro encodings of a column of 64-bit integers (vectorized for long columns)."""
    arr = np.asarray(values, dtype=np.int64)
    n = len(arr)
    if n < _MIN_VECTOR_ROWS:
        small = _SMALL_LONGS
        return [small[v] if 0 <= v < 1024 else _zigzag_varint(v) for v in arr.tolist()]
    # Zigzag in wrapping 64-bit arithmetic, as Avro defines it.
    rest = ((arr << 1) ^ (arr >> 63)).view(np.uint64)
    groups = np.zeros((n, _VARINT_BYTES), dtype=np.uint8)
    lengths = np.ones(n, dtype=np.int64)
    for j in range(_VARINT_BYTES):
        low = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest != 0
        groups[:, j] = low | (more.astype(np.uint8) << np.uint8(7))
        if not more.any():
            break
        lengths += more
    flat = groups[np.arange(_VARINT_BYTES) < lengths[:, None]].tobytes()
    ends = np.cumsum(lengths).tolist()
    return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _avro_string(text: str) -> bytes:
    data = text.encode()
    size = len(data)
    return (_SMALL_LONGS[size] if size < 1024 else _zigzag_varint(size)) + data


def _avro_opt_string(text: str | None) -> bytes:
    return _NULL_BRANCH if text is None else _VALUE_BRANCH + _avro_string(text)


def _avro_opt_map(value: Mapping[str, float] | None) -> bytes:
    if value is None:
        return _NULL_BRANCH
    if not value:
        return _VALUE_BRANCH + _NULL_BRANCH  # an empty map: the end-of-blocks marker only
    parts = [_VALUE_BRANCH, _zigzag_varint(len(value))]
    for k, v in value.items():
        parts.append(_avro_string(k))
        parts.append(_PACK_DOUBLE(v))
    parts.append(_NULL_BRANCH)
    return b"".join(parts)


def _encode_column(column: _Column, values: list[Any]) -> list[bytes]:
    """The Avro encodings of one value column of the derived schema."""
    if column == "long":
        return _avro_longs(values)
    if column == "double":
        pack = _PACK_OPT_DOUBLE
        return [_NULL_BRANCH if v is None else pack(2, v) for v in values]
    if column == "fit":
        fit = _PACK_OPT_FIT
        return [_NULL_BRANCH if v is None else fit(2, v["slope"], v["intercept"]) for v in values]
    if column == "map":
        return [_avro_opt_map(v) for v in values]
    return [_avro_opt_string(v) for v in _json_text_column(values)]


class _ColumnarAvroWriter:
    """Writes result batches in the derived schema column by column.

    Each column is encoded in one pass (integer columns vectorized with NumPy), then the
    pieces of a row are joined: the bytes are those ``fastavro.schemaless_writer`` would
    write for the same record, a few times faster.
    """

    def __init__(self, aggregations: Sequence[AggregationConfig]) -> None:
        self.columns: list[tuple[str, _Column]] = [(a.name, _column_of(a)) for a in aggregations]
        self.kinds = {kind: _zigzag_varint(i) for i, kind in enumerate(Kind)}

    def encode(self, batch: ResultBatch, prefix: bytes) -> list[bytes]:
        n = len(batch)
        missing = [name for name, _ in self.columns if name not in batch.values]
        if missing:
            raise ValueError(f"the result batch has no values for {', '.join(missing)}")
        parts: list[Iterable[bytes]] = []
        if prefix:
            parts.append(repeat(prefix, n))
        parts.append([_avro_string(k) for k in batch.keys])
        parts.append(_avro_longs(batch.window_start))
        parts.append(_avro_longs(batch.window_end))
        parts.append(repeat(self.kinds[batch.kind], n))
        parts.append(_avro_longs(batch.update_seq))
        for name, column in self.columns:
            values = batch.values[name]
            if len(values) != n:
                raise ValueError(f"values column {name!r} has {len(values)} rows, keys have {n}")
            parts.append(_encode_column(column, values))
        return list(map(b"".join, zip(*parts, strict=True)))


class AvroResultEncoder:
    """Window results as Avro values.

    The schema is ``output.avro_schema`` when the job sets it (used as is: its top-level
    fields must be those of a window result or have defaults, its ``values`` record's
    fields aggregation names or have defaults), otherwise :func:`derive_result_schema`.
    Aggregations of open-typed ops (``first``, ``last``, ``collect``, user-defined)
    whose field is a (nullable) string carry the value's JSON text. Values are
    schemaless Avro unless ``confluent_schema_id`` is given: then each value is framed
    in the Confluent wire format with that id (register :attr:`schema_json` first).
    ``window_start``/``window_end`` are written as epoch milliseconds.
    """

    def __init__(self, config: JobConfig, *, confluent_schema_id: int | None = None) -> None:
        path = config.output.avro_schema
        if path is not None:
            self.schema: Any = _load_schema_file(path)
            source = str(path)
            self.json_text_fields = frozenset(_check_user_schema(self.schema, config, source))
            self._columnar: _ColumnarAvroWriter | None = None
        else:
            self.schema = derive_result_schema(config.aggregations, job=config.job)
            source = f"derived result schema of job {config.job}"
            self.json_text_fields = frozenset(
                agg.name for agg in config.aggregations if _column_of(agg) == "text"
            )
            self._columnar = _ColumnarAvroWriter(config.aggregations)
        self._parsed = _parse_schema(_keep_raw_millis(self.schema), source)
        self.schema_id = confluent_schema_id
        self._prefix = (
            b"" if confluent_schema_id is None else _confluent_header(confluent_schema_id)
        )

    @property
    def format(self) -> Literal["json", "avro"]:
        """``"avro"``."""
        return "avro"

    @property
    def schema_json(self) -> str:
        """The value schema as JSON text (e.g. to register it in a schema registry)."""
        return orjson.dumps(self.schema).decode()

    def encode_batch(self, batch: ResultBatch) -> list[tuple[bytes, bytes | None]]:
        """One ``(key, value)`` per row; a RETRACT batch gives tombstones."""
        keys = _batch_keys(batch)
        if batch.kind is Kind.RETRACT:
            return [(key, None) for key in keys]
        if self._columnar is not None:
            values = self._columnar.encode(batch, self._prefix)
        else:
            values = self._encode_with_fastavro(batch)
        out: list[tuple[bytes, bytes | None]] = list(zip(keys, values, strict=True))
        return out

    def _encode_with_fastavro(self, batch: ResultBatch) -> list[bytes]:
        """The general path (a user schema): one ``schemaless_writer`` call per row."""
        names = list(batch.values)
        json_text = self.json_text_fields
        cols = [
            _json_text_column(batch.values[n]) if n in json_text else batch.values[n] for n in names
        ]
        rows = zip(*cols, strict=True) if cols else repeat((), len(batch))
        kind = batch.kind.value
        buffer = io.BytesIO()
        write = fastavro.schemaless_writer
        schema = self._parsed
        tell = buffer.tell
        ends: list[int] = []
        for key, start, end, seq, row in zip(
            batch.keys,
            batch.window_start.tolist(),
            batch.window_end.tolist(),
            batch.update_seq.tolist(),
            rows,
            strict=True,
        ):
            write(
                buffer,
                schema,
                {
                    "key": key,
                    "window_start": start,
                    "window_end": end,
                    "kind": kind,
                    "update_seq": seq,
                    "values": dict(zip(names, row, strict=True)),
                },
            )
            ends.append(tell())
        data = buffer.getvalue()
        prefix = self._prefix
        return [prefix + data[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def decoder(self) -> AvroResultDecoder:
        """The decoder of this encoder's values."""
        return AvroResultDecoder(
            self.schema,
            json_text_fields=self.json_text_fields,
            confluent=self.schema_id is not None,
        )


class AvroResultDecoder:
    """Reads :class:`AvroResultEncoder` values back into ``WindowResult.to_dict`` form.

    ``schema`` is the writer schema (a parsed-JSON mapping or its JSON text);
    ``json_text_fields`` the ``values`` fields holding JSON text, parsed back;
    ``confluent`` whether values carry the 5-byte Confluent header. Timestamps come
    back as epoch-ms ints. Unlike the input decoders this one raises ``ValueError`` on
    bad data: it is meant for tests and trusted consumers.
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | str,
        *,
        json_text_fields: Iterable[str] = (),
        confluent: bool = False,
    ) -> None:
        loaded = orjson.loads(schema) if isinstance(schema, str) else schema
        self._parsed = _parse_schema(_keep_raw_millis(loaded), "result schema")
        self.json_text_fields = frozenset(json_text_fields)
        self.confluent = confluent

    @classmethod
    def for_config(cls, config: JobConfig) -> AvroResultDecoder:
        """The decoder of the values :func:`result_encoder_for` writes for ``config``."""
        return AvroResultEncoder(config).decoder()

    def decode(self, value: bytes | None) -> dict[str, Any] | None:
        """The result dict, ``None`` for a tombstone."""
        if value is None:
            return None
        buffer = io.BytesIO(value)
        if self.confluent:
            problem = _confluent_problem(value)
            if problem is not None:
                raise ValueError(problem)
            buffer.seek(_CONFLUENT_HEADER)
        try:
            record = fastavro.schemaless_reader(buffer, self._parsed, None)
        except Exception as exc:
            raise ValueError(_avro_reason(exc, len(value))) from exc
        if not isinstance(record, dict):
            raise ValueError(f"expected an Avro record, got {type(record).__name__}")
        values = record.get("values")
        if isinstance(values, dict):
            for name in self.json_text_fields:
                text = values.get(name)
                if isinstance(text, str):
                    values[name] = orjson.loads(text)
        return record


def result_encoder_for(config: JobConfig) -> JsonResultEncoder | AvroResultEncoder:
    """The result encoder of the job's ``output.format`` (Avro: schemaless values)."""
    if config.output.format == "avro":
        return AvroResultEncoder(config)
    return JsonResultEncoder()


def result_decoder_for(config: JobConfig) -> JsonResultDecoder | AvroResultDecoder:
    """The decoder of the values :func:`result_encoder_for` writes for ``config``."""
    return result_encoder_for(config).decoder()


def decode_result_value(
    value: bytes | None, decoder: ResultDecoder | None = None
) -> dict[str, Any] | None:
    """Decode one result value (JSON unless an Avro ``decoder`` is given); tombstone -> None."""
    return (decoder if decoder is not None else JsonResultDecoder()).decode(value)


# ---------------------------------------------------------------------------------------
# Error records
# ---------------------------------------------------------------------------------------


def encode_error(
    err: ErrorRecord, *, key: bytes | None = None
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """The errors-topic record of a rejected input: ``(key, value, headers)``.

    Key and value are the original message's bytes (``key`` when the caller knows it,
    ``err.raw``), so the record can be replayed as is. Headers, UTF-8: ``error.code``,
    ``error.reason`` and, when known, ``source.topic``, ``source.partition``,
    ``source.offset`` (a header whose value is unknown is left out).
    """
    headers: list[tuple[str, bytes]] = [
        (HEADER_ERROR_CODE, err.code.value.encode()),
        (HEADER_ERROR_REASON, err.reason.encode()),
    ]
    if err.topic is not None:
        headers.append((HEADER_SOURCE_TOPIC, err.topic.encode()))
    if err.partition is not None:
        headers.append((HEADER_SOURCE_PARTITION, str(err.partition).encode()))
    if err.offset is not None:
        headers.append((HEADER_SOURCE_OFFSET, str(err.offset).encode()))
    return key, err.raw, headers


def error_json(err: ErrorRecord) -> bytes:
    """One JSON object for an errors file (no trailing newline).

    :meth:`ErrorRecord.to_dict <window_operator.results.ErrorRecord.to_dict>` plus
    ``raw_base64``, the exact original bytes (``raw`` is their UTF-8 reading with
    replacement characters, lossy for binary payloads such as Avro).
    """
    doc = err.to_dict()
    doc["raw_base64"] = None if err.raw is None else base64.b64encode(err.raw).decode()
    return orjson.dumps(doc)

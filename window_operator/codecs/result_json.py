"""Window results as JSON, and the Kafka key of a window (shared by every output format).

Every output record is keyed by the window: the Kafka key is the JSON text
``{"key":...,"window_start":...,"window_end":...}`` with exactly that field order (see
:func:`result_key`; a window bounded by offsets adds ``"partition":...`` last, as two
partitions can hold windows of one key with the same bounds) for both output formats,
so the key bytes of a window are stable and equal across EARLY/ON_TIME/LATE updates and
the output topic can be compacted (the latest record per key is the answer). A
``RETRACT`` result is a tombstone: the key with a null value. The key stays JSON even
with Avro values so that it needs no schema registry and is readable by every consumer.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any, Final, Literal, NamedTuple, Protocol
from uuid import UUID

import numpy as np
import orjson

from window_operator.results import Kind, ResultBatch

__all__ = [
    "JSON_OPTS",
    "JsonResultDecoder",
    "JsonResultEncoder",
    "ResultDecoder",
    "ResultEncoder",
    "ResultKey",
    "batch_keys",
    "decode_result_key",
    "dumps_json",
    "result_key",
]

JSON_OPTS: Final = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def result_key(key: str, window_start: int, window_end: int, partition: int | None = None) -> bytes:
    """The Kafka key of a window: ``{"key":...,"window_start":...,"window_end":...}``,
    then ``"partition":...`` for a window of one input partition."""
    doc: dict[str, str | int] = {"key": key, "window_start": window_start, "window_end": window_end}
    if partition is not None:
        doc["partition"] = partition
    return orjson.dumps(doc)


class ResultKey(NamedTuple):
    """A window as its Kafka key names it (:func:`result_key`)."""

    key: str
    window_start: int
    window_end: int
    #: the input partition of a window bounded by offsets (``None`` for other windows)
    partition: int | None = None


def decode_result_key(data: bytes) -> ResultKey:
    """The window of a Kafka key made by :func:`result_key`."""
    doc = orjson.loads(data)
    return ResultKey(doc["key"], doc["window_start"], doc["window_end"], doc.get("partition"))


def batch_keys(batch: ResultBatch) -> list[bytes]:
    """The Kafka key (:func:`result_key`) of every row of ``batch``.

    Each distinct key is serialized once and spliced into a template: the bytes equal
    :func:`result_key`'s (orjson writes no spaces, and ints as ``%d`` does).
    """
    dumps = orjson.dumps
    quoted = {k: dumps(k) for k in set(batch.keys)}
    starts, ends = batch.window_start.tolist(), batch.window_end.tolist()
    if batch.partition is not None:
        template = b'{"key":%b,"window_start":%d,"window_end":%d,"partition":%d}'
        parts = batch.partition.tolist()
        return [
            template % (quoted[k], s, e, p)
            for k, s, e, p in zip(batch.keys, starts, ends, parts, strict=True)
        ]
    template = b'{"key":%b,"window_start":%d,"window_end":%d}'
    return [template % (quoted[k], s, e) for k, s, e in zip(batch.keys, starts, ends, strict=True)]


def dumps_json(value: Any) -> bytes:
    """orjson, falling back to the stdlib for what orjson refuses (e.g. ints > 64 bits).

    A value with no JSON form (a set, an arbitrary object) raises :class:`TypeError`:
    the result is then a ``RESULT_ERROR`` (:mod:`.result_errors`), not a string of the
    value's ``repr``.
    """
    try:
        return orjson.dumps(value, option=JSON_OPTS)
    except orjson.JSONEncodeError:
        text = json.dumps(
            _finite(value), separators=(",", ":"), ensure_ascii=False, default=_as_orjson
        )
        return text.encode()


def _as_orjson(value: Any) -> Any:
    """For the stdlib fallback: what orjson writes natively (NumPy values, dataclasses,
    dates and times, UUIDs, enums) in a JSON-ready form; anything else raises."""
    if isinstance(value, np.generic | np.ndarray):
        return _finite(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _finite(dataclasses.asdict(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return _finite(value.value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


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
        keys = batch_keys(batch)
        if batch.kind is Kind.RETRACT:
            return [(key, None) for key in keys]
        # The key document is the value's prefix: splice it instead of serializing the
        # window twice. The bytes equal orjson.dumps of the whole to_dict() document.
        head = b',"kind":' + orjson.dumps(batch.kind.value) + b',"update_seq":'
        seqs = batch.update_seq.tolist()
        values = _values_json(batch.values, len(keys))
        return [
            (key, b"%b%b%d,%b}" % (key[:-1], head, seq, v))
            for key, seq, v in zip(keys, seqs, values, strict=True)
        ]

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


def _values_json(values: Mapping[str, list[Any]], n: int) -> list[bytes]:
    """``"values":{...}`` of every row, as orjson writes each row's dict.

    Each column is serialized once, as a list, and split at its commas: when that gives
    one piece per row, no value holds a comma and the pieces are the values' own JSON; a
    row template then joins the columns. A column that does not split (strings or lists
    with commas, ints beyond 64 bits) sends the batch down the per-row path.
    """
    names = list(values)
    if not names:
        return [b'"values":{}'] * n
    columns = [_split_column(values[name], n) for name in names]
    if all(c is not None for c in columns):
        template = b'"values":{' + b",".join(orjson.dumps(k) + b":%b" for k in names) + b"}"
        return [template % row for row in zip(*columns, strict=True)]
    rows = zip(*(values[name] for name in names), strict=True)
    return [b'"values":' + _dumps_row(dict(zip(names, row, strict=True))) for row in rows]


def _split_column(column: list[Any], n: int) -> list[bytes] | None:
    """Each value of ``column`` as orjson writes it (``None``: some value holds a comma)."""
    if n == 0:
        return []
    try:
        items = orjson.dumps(column, option=JSON_OPTS)[1:-1].split(b",")
    except orjson.JSONEncodeError:
        return None
    return items if len(items) == n else None


def _dumps_row(values: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(values, option=JSON_OPTS)
    except orjson.JSONEncodeError:
        return dumps_json(values)

"""Column-wise Avro encoding of result batches in the derived schema.

Each column is encoded in one pass (integer columns vectorized with NumPy), then the
pieces of a row are joined: the bytes are those ``fastavro.schemaless_writer`` would
write for the same record, several times faster.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Final

import numpy as np
import orjson

from window_operator.codecs.result_json import JSON_OPTS, dumps_json
from window_operator.codecs.result_schema import Column, column_of
from window_operator.config import AggregationConfig
from window_operator.results import Kind, ResultBatch

__all__ = ["ColumnarAvroWriter", "json_text_column"]


def json_text_column(values: list[Any]) -> list[str | None]:
    """The JSON text of each value (``None`` stays ``None``)."""
    dumps = orjson.dumps
    out: list[str | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        try:
            out.append(dumps(v, option=JSON_OPTS).decode())
        except orjson.JSONEncodeError:
            out.append(dumps_json(v).decode())
    return out


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


def _encode_column(column: Column, values: list[Any]) -> list[bytes]:
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
    return [_avro_opt_string(v) for v in json_text_column(values)]


class ColumnarAvroWriter:
    """Writes result batches in the derived schema column by column (see the module).

    Each column is encoded in one pass (integer columns vectorized with NumPy), then the
    pieces of a row are joined: the bytes are those ``fastavro.schemaless_writer`` would
    write for the same record, several times faster.
    """

    def __init__(
        self, aggregations: Sequence[AggregationConfig], *, per_partition: bool = False
    ) -> None:
        self.columns: list[tuple[str, Column]] = [(a.name, column_of(a)) for a in aggregations]
        self.kinds = {kind: _zigzag_varint(i) for i, kind in enumerate(Kind)}
        self.per_partition = per_partition

    def encode(self, batch: ResultBatch, prefix: bytes) -> list[bytes]:
        """One Avro value per row of ``batch``, each preceded by ``prefix``."""
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
        if self.per_partition:
            if batch.partition is None:
                raise ValueError("the result batch names no partition for its windows")
            parts.append(_avro_longs(batch.partition))
        parts.append(repeat(self.kinds[batch.kind], n))
        parts.append(_avro_longs(batch.update_seq))
        for name, column in self.columns:
            values = batch.values[name]
            if len(values) != n:
                raise ValueError(f"values column {name!r} has {len(values)} rows, keys have {n}")
            parts.append(_encode_column(column, values))
        return list(map(b"".join, zip(*parts, strict=True)))

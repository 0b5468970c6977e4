"""Avro schema handling: loading and parsing schema files, the Confluent wire framing,
and the conversion of what fastavro reads into JSON-native values.

Values are made JSON-native so that the rest of the pipeline sees what a JSON input
would give: ``timestamp-millis`` longs stay epoch-millisecond ints (the logical type is
removed from the parsed schema by :func:`keep_raw_millis`, which is also the fastest
path), ``timestamp-nanos`` longs stay epoch-nanosecond ints, other timestamps become
epoch milliseconds (floored), decimals floats, dates and
times ISO-8601 strings, UUIDs strings and ``bytes``/``fixed`` strings of code points
0-255 (the Avro JSON encoding of bytes).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final
from uuid import UUID

import fastavro
import orjson
from fastavro.schema import UnknownType

from window_operator.errors import WindowOperatorError, exception_text

__all__ = [
    "CONFLUENT_HEADER",
    "CONFLUENT_MAGIC",
    "AvroSchemaError",
    "avro_reason",
    "confluent_header",
    "confluent_problem",
    "has_binary_fields",
    "json_native",
    "keep_raw_millis",
    "load_schema_file",
    "needs_json_native",
    "parse_schema",
]

#: The Confluent wire format: magic byte 0, then a 4-byte big-endian schema id.
CONFLUENT_MAGIC: Final = 0
CONFLUENT_HEADER: Final = 5

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_ONE_MS: Final = timedelta(milliseconds=1)
# Logical types whose underlying long is read as is: epoch ms, which is what the pipeline
# wants, and epoch ns, which fastavro does not convert (read with timestamp_unit ns).
_KEEP_RAW_LOGICAL: Final = frozenset(
    {"timestamp-millis", "local-timestamp-millis", "timestamp-nanos", "local-timestamp-nanos"}
)


class AvroSchemaError(WindowOperatorError, ValueError):
    """An Avro schema that cannot be loaded, derived or used for the job's results."""


def confluent_problem(payload: bytes) -> str | None:
    """Why ``payload`` is not in the Confluent wire format (``None``: it is)."""
    head = payload[:32]
    if head[:1] != b"\x00" and _is_text(head):
        shown = head.decode("ascii") + ("..." if len(payload) > len(head) else "")
        return (
            f"invalid Confluent wire format: the value is text ({shown!r}), not Avro "
            "(a topic of JSON values is read with format: json)"
        )
    if len(payload) < CONFLUENT_HEADER:
        return (
            f"invalid Confluent wire format: {len(payload)} byte(s), shorter than the 5-byte "
            "header (magic byte 0 + 4-byte schema id)"
        )
    if payload[0] != CONFLUENT_MAGIC:
        return (
            f"invalid Confluent wire format: magic byte is 0x{payload[0]:02x}, expected 0x00 "
            "(is the topic written without a schema registry? use input.avro_wire: schemaless)"
        )
    return None


def _is_text(head: bytes) -> bool:
    """Whether ``head`` is printable ASCII text (not empty)."""
    return bool(head) and all(32 <= b < 127 or b in b"\t\r\n" for b in head)


def confluent_header(schema_id: int) -> bytes:
    """The 5-byte Confluent wire-format header of ``schema_id``."""
    if not 0 <= schema_id < 2**31:
        raise ValueError(f"a schema id must be in [0, 2**31), got {schema_id}")
    return bytes([CONFLUENT_MAGIC]) + schema_id.to_bytes(4, "big")


def avro_reason(exc: Exception, body_size: int) -> str:
    """The reason of an error record for a body fastavro could not read."""
    if isinstance(exc, EOFError | IndexError):
        # fastavro's readers raise EOFError, or IndexError when a varint runs off the end.
        what = (
            "unexpected end of data: the payload is truncated or corrupt, or was written "
            "with another schema"
        )
    elif isinstance(exc, UnicodeDecodeError):
        what = f"a string is not valid UTF-8 ({exc.reason})"
    else:
        what = exception_text(exc)
    return f"invalid Avro: {what} ({body_size}-byte body)"


def load_schema_file(path: Path) -> Any:
    """The JSON of an ``.avsc`` file; raises :class:`AvroSchemaError`."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise AvroSchemaError(f"{path}: cannot read the Avro schema: {exc}") from exc
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise AvroSchemaError(f"{path}: the Avro schema is not JSON: {exc}") from exc


def parse_schema(schema: Any, source: str) -> Any:
    """``fastavro.parse_schema``; raises :class:`AvroSchemaError` naming ``source``."""
    try:
        return fastavro.parse_schema(schema)
    except UnknownType as exc:
        why = _unknown_type(schema, exc.name)
        raise AvroSchemaError(f"{source}: invalid Avro schema: {why}") from exc
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise AvroSchemaError(f"{source}: invalid Avro schema: {exc}") from exc


#: the type names Avro itself defines
_AVRO_TYPES = "null boolean int long float double bytes string record enum array map fixed".split()


def _unknown_type(schema: Any, name: str) -> str:
    """Why fastavro did not know the type ``name``: where it stands, and the type meant.

    fastavro names a type of a record in a namespace with it (``com.acme.lnog``): the
    schema holds the name as written (``lnog``)."""
    where = _field_of(schema, name, ())
    if where is None and "." in name:
        short = name.rsplit(".", 1)[1]
        if (where := _field_of(schema, short, ())) is not None:
            name = short
    close = difflib.get_close_matches(name, _AVRO_TYPES, n=1)
    return (
        f"unknown type {name!r}"
        + (
            f" (did you mean {close[0]!r}?)"
            if close
            else " (neither an Avro type nor a named type defined before it)"
        )
        + (f" in field {'.'.join(where)!r}" if where else "")
    )


def _field_of(node: Any, name: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The path of the field whose type names ``name`` (``None``: none found)."""
    if node == name:
        return path
    if isinstance(node, list):
        found = (_field_of(branch, name, path) for branch in node)
        return next((f for f in found if f is not None), None)
    if not isinstance(node, Mapping):
        return None
    for field in node.get("fields", ()) if isinstance(node.get("fields"), list) else ():
        if isinstance(field, Mapping):
            inner = _field_of(field.get("type"), name, (*path, str(field.get("name"))))
            if inner is not None:
                return inner
    found = (_field_of(node[key], name, path) for key in ("type", "items", "values") if key in node)
    return next((f for f in found if f is not None), None)


def _schema_children(node: Mapping[str, Any]) -> Iterable[Any]:
    for key in ("type", "items", "values"):
        if key in node:
            yield node[key]
    for fld in node.get("fields") or ():
        if isinstance(fld, Mapping):
            yield fld


def keep_raw_millis(schema: Any) -> Any:
    """A copy of ``schema`` without the millisecond (and nanosecond) timestamp logical types.

    The binary encoding is the same; without the logical type fastavro reads the
    epoch-ms long as an int (instead of a datetime) and writes an int without a check.
    """
    if isinstance(schema, list):
        return [keep_raw_millis(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("type", "items", "values"):
            out[key] = keep_raw_millis(value)
        elif key == "fields" and isinstance(value, list):
            out[key] = [keep_raw_millis(fld) for fld in value]
        else:
            out[key] = value
    if out.get("type") == "long" and out.get("logicalType") in _KEEP_RAW_LOGICAL:
        del out["logicalType"]
    return out


def _any_type(schema: Any, test: Callable[[str | None, Mapping[str, Any]], bool]) -> bool:
    """Whether ``test(type, node)`` holds for a type anywhere in ``schema`` (a bare type
    name is a node of that type with nothing else)."""
    if isinstance(schema, list):
        return any(_any_type(item, test) for item in schema)
    if isinstance(schema, str):
        return test(schema, {})
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    if test(kind if isinstance(kind, str) else None, schema):
        return True
    return any(_any_type(child, test) for child in _schema_children(schema))


def _binary(kind: str | None, node: Mapping[str, Any]) -> bool:
    return kind in ("bytes", "fixed")


def _not_json_native(kind: str | None, node: Mapping[str, Any]) -> bool:
    logical = node.get("logicalType")
    raw_millis = kind == "long" and logical in _KEEP_RAW_LOGICAL
    return _binary(kind, node) or (logical is not None and not raw_millis)


def has_binary_fields(schema: Any) -> bool:
    """Whether ``schema`` has a ``bytes`` or ``fixed`` type anywhere (``decimal`` too)."""
    return _any_type(schema, _binary)


def needs_json_native(schema: Any) -> bool:
    """Whether records of ``schema`` may hold values that are not JSON-native."""
    return _any_type(schema, _not_json_native)


_SCALARS: Final = (str, int, float, bool, type(None))


def json_native(value: Any) -> Any:
    """``value`` with the non-JSON types fastavro returns converted (module docstring)."""
    cls = value.__class__
    if cls in _SCALARS:
        return value
    if cls is dict:
        return {k: json_native(v) for k, v in value.items()}
    if cls is list:
        return [json_native(v) for v in value]
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
        return [json_native(v) for v in value]
    return value

"""The Avro schema of window results: derived from the job, or the user's checked against it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import fastavro
import orjson
from fastavro.validation import validate

from window_operator.codecs.avro_schema import AvroSchemaError, load_schema_file
from window_operator.config import AggregationConfig, JobConfig
from window_operator.results import Kind

__all__ = ["Column", "check_user_schema", "column_of", "derive_result_schema", "unwritten_values"]

_LONG_OPS: Final = frozenset({"count", "count_distinct"})
_DOUBLE_OPS: Final = frozenset({"sum", "mean", "min", "max", "variance", "stddev", "median"})
_KIND_SYMBOLS: Final = [kind.value for kind in Kind]
_NAMESPACE: Final = "window_operator"
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: How the derived schema stores one aggregation's values (see derive_result_schema).
Column = Literal["long", "double", "map", "fit", "text"]


def column_of(agg: AggregationConfig) -> Column:
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


def _avro_type_of(column: Column, defined: set[str]) -> Any:
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
    aggregations: Sequence[AggregationConfig],
    *,
    job: str | None = None,
    per_partition: bool = False,
    time_bounds: bool = True,
) -> dict[str, Any]:
    """The Avro schema of the window results of a job with these aggregations.

    A ``WindowResult`` record (namespace ``window_operator``) with ``key``,
    ``window_start``/``window_end`` (``long``, ``timestamp-millis``; plain ``long``
    without ``time_bounds``, for count windows, and with ``per_partition``), with
    ``per_partition`` (windows bounded by one input partition's offsets) ``partition``
    (``long``), ``kind`` (enum),
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
        column = column_of(agg)
        fld: dict[str, Any] = {"name": agg.name, "type": _avro_type_of(column, defined)}
        if column == "text":
            fld["doc"] = f"JSON text of the {agg.op} value"
        fields.append(fld)
    schema: dict[str, Any] = {
        "type": "record",
        "name": "WindowResult",
        "namespace": _NAMESPACE,
        "fields": [
            *_window_fields(per_partition=per_partition, time_bounds=time_bounds),
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": _KIND_SYMBOLS}},
            {"name": "update_seq", "type": "long"},
            {"name": "values", "type": {"type": "record", "name": "Values", "fields": fields}},
        ],
    }
    if job is not None:
        schema["doc"] = f"Window results of job {job}"
    return schema


def _window_fields(*, per_partition: bool, time_bounds: bool) -> list[dict[str, Any]]:
    """``key``, the window's bounds and, for windows of one partition, ``partition``."""
    bound: dict[str, Any] = {"type": "long"}
    if time_bounds and not per_partition:  # offsets bound a partition's windows
        bound["logicalType"] = "timestamp-millis"
    fields: list[dict[str, Any]] = [
        {"name": "key", "type": "string"},
        {"name": "window_start", "type": bound},
        {"name": "window_end", "type": dict(bound)},
    ]
    if per_partition:
        fields.append({"name": "partition", "type": "long"})
    return fields


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


def check_user_schema(schema: Any, config: JobConfig, source: str) -> set[str]:
    """Check a user result schema against the job; return its JSON-text value fields."""
    top = _fields_of(schema)
    if not top:
        raise AvroSchemaError(f"{source}: the output schema must be an Avro record")
    produced = {"key", "window_start", "window_end", "kind", "update_seq", "values"}
    if config.windows_per_partition:
        produced.add("partition")
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
            if column_of(agg) == "text" and _is_string_type(types.get(agg.name)):
                json_text.add(agg.name)
    problems += _type_problems(schema, config)
    if problems:
        raise AvroSchemaError(
            f"{source}: the output schema does not fit the job: " + "; ".join(problems)
        )
    return json_text


def unwritten_values(config: JobConfig) -> list[str]:
    """What the job's own ``output.avro_schema`` leaves unwritten, each a warning:
    aggregations its ``values`` record has no field for (computed, never written), and
    ``values`` fields with a default that name no aggregation (always their default: a
    misspelt name). None without one, or with one that does not load (that is reported
    where the encoder loads it)."""
    path = config.output.avro_schema
    if config.output.format != "avro" or path is None:
        return []
    try:
        schema = load_schema_file(path)
    except AvroSchemaError:
        return []
    top = _fields_of(schema)
    values_field = next((f for f in top if f.get("name") == "values"), None)
    inner = _fields_of(_record_in(values_field.get("type"))) if values_field else []
    have = {f.get("name") for f in inner}
    names = [agg.name for agg in config.aggregations]
    out = []
    left_out = [name for name in names if name not in have]
    if left_out:
        out.append(
            f"output.avro_schema has no values field for aggregation(s) {', '.join(left_out)}: "
            "computed but never written"
        )
    stray = [str(f.get("name")) for f in inner if f.get("name") not in names and "default" in f]
    if stray:
        out.append(
            f"output.avro_schema values field(s) {', '.join(stray)} name no aggregation: "
            "always written as their default"
        )
    return out


#: Values each field of a window result takes (``None``: the value may be null), to
#: check a user schema's types against: a field whose type cannot hold one of them would
#: fail the job at its first result of that kind.
_RESULT_SAMPLES: Final[dict[str, list[Any]]] = {
    "key": ["k"],
    "window_start": [0, -(2**62)],
    "window_end": [0, 2**62],
    "partition": [0],
    "kind": [Kind.EARLY.value, Kind.ON_TIME.value, Kind.LATE.value],
    "update_seq": [0],
}
_VALUE_SAMPLES: Final[dict[Column, list[Any]]] = {
    "long": [0],
    "double": [0.5, None],
    "map": [{"p50": 0.5}, None],
    "fit": [{"slope": 0.5, "intercept": 1.0}, None],
}


def _type_problems(schema: Any, config: JobConfig) -> list[str]:
    """The fields of a user result schema whose type cannot hold what the job writes
    there (open-typed values, ``first``, ``collect`` and user ops, are not checked)."""
    try:
        expanded = fastavro.parse_schema(schema, expand=True)
    except Exception:  # noqa: BLE001 - an invalid schema is reported when it is parsed
        return []
    top = {f.get("name"): f.get("type") for f in _fields_of(expanded)}
    checks: list[tuple[str, Any, list[Any]]] = [
        (name, top[name], _RESULT_SAMPLES[name]) for name in _RESULT_SAMPLES if name in top
    ]
    inner = {f.get("name"): f.get("type") for f in _fields_of(_record_in(top.get("values")))}
    for agg in config.aggregations:
        samples = _VALUE_SAMPLES.get(column_of(agg))
        if samples is not None and agg.name in inner:
            checks.append((f"values.{agg.name}", inner[agg.name], samples))
    problems = []
    for name, avro_type, values in checks:
        bad = [v for v in values if not validate(v, avro_type, raise_errors=False)]
        if bad:
            what = "null" if bad[0] is None else repr(bad[0])
            shown = orjson.dumps(avro_type).decode()
            problems.append(f"{name} cannot hold {what} (its type: {shown})")
    return problems

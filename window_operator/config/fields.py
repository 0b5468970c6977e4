"""Field types of the job config: names, paths, optional durations and settings.

Each type is an ``Annotated`` pydantic type whose validator says what is allowed; the
models in the other modules of this package are built from them. :class:`FrozenModel`
is their common base.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Self

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from window_operator.config.errors import FieldProblems, Location, show
from window_operator.durations import MAX_DURATION_MS, DurationError, parse_duration_ms

__all__ = [
    "DEFAULT_STATE_DIR",
    "MAX_CONFIG_INT",
    "OFF",
    "RESERVED_OUTPUT_NAMES",
    "AggregationName",
    "FilePath",
    "FrozenModel",
    "InputModel",
    "JobName",
    "KafkaSetting",
    "NonEmptyStr",
    "OptionalPositiveDuration",
    "SparkSetting",
    "StrictPositiveInt",
    "TopicName",
    "check_avro_schema",
    "check_in_schema",
    "schema_lacks",
    "schema_not_key",
    "schema_not_number",
    "check_topic_name",
    "duration_ms_or",
    "is_valid_job_name",
    "none_to_empty_mapping",
    "positive_duration_ms",
]

#: Names an aggregation may not take: they are the other fields of a window result.
RESERVED_OUTPUT_NAMES = frozenset({"key", "window_start", "window_end", "kind", "update_seq"})

#: Where task state lives unless ``state.dir`` says otherwise (relative to the working dir).
DEFAULT_STATE_DIR = Path("./state")

#: The largest count or size a job may set: the largest duration (in ms), for the same
#: reason (counts and offsets are added to int64 values too).
MAX_CONFIG_INT = MAX_DURATION_MS

#: The YAML spelling of "disabled" (YAML 1.1 also reads a bare ``off`` as false).
OFF = "off"

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_JOB_NAME_MAX = 200  # leaves room for the "-windows"/"-errors" suffixes in a Kafka topic name
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class FrozenModel(BaseModel):
    """The base of every config model: frozen, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def is_valid_job_name(value: object) -> bool:
    """Whether ``value`` is a job name :data:`JobName` accepts."""
    return (
        isinstance(value, str)
        and _JOB_NAME.fullmatch(value) is not None
        and len(value) <= _JOB_NAME_MAX
    )


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _job_name(value: str) -> str:
    if not _JOB_NAME.fullmatch(value):
        raise ValueError(
            "must start with a letter or digit and contain only letters, digits, "
            f"'.', '_' and '-' (got {value!r})"
        )
    if len(value) > _JOB_NAME_MAX:
        raise ValueError(f"must be at most {_JOB_NAME_MAX} characters long")
    return value


def check_topic_name(value: str) -> str:
    """``value`` if it is a Kafka topic name; raises :class:`ValueError` saying what is."""
    if not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            f"must be a Kafka topic name: 1 to 249 letters, digits, '.', '_' or '-' (got {value!r})"
        )
    return value


def _aggregation_name(value: str) -> str:
    if value in RESERVED_OUTPUT_NAMES:
        raise ValueError(
            f"{value!r} is reserved for the window result; use another name "
            f"(reserved: {', '.join(sorted(RESERVED_OUTPUT_NAMES))})"
        )
    return value


def _non_empty_path(value: Path) -> Path:
    if not str(value).strip() or value == Path():
        raise ValueError("must be a non-empty path")
    if "\x00" in str(value):
        raise ValueError("must not contain a NUL character (no file system takes one)")
    return value


def none_to_empty_mapping(value: object) -> object:
    """A ``BeforeValidator`` for mapping fields: YAML ``null`` is the empty mapping."""
    return {} if value is None else value


def duration_ms_or(value: object, otherwise: str) -> int:
    """``value`` as a duration in ms, for a setting that also takes some words.

    A value that is neither fails with ``otherwise`` (those words: ``or off``) appended to
    the reason.
    """
    try:
        return parse_duration_ms(value)  # type: ignore[arg-type]  # bad types raise DurationError
    except DurationError as exc:
        raise DurationError(f"{exc}; {otherwise}") from None


def positive_duration_ms(value: object, *, otherwise: str, zero_hint: str) -> int:
    """:func:`duration_ms_or`, and a zero duration fails with ``zero_hint``."""
    ms = duration_ms_or(value, otherwise)
    if ms == 0:
        raise DurationError(f"{value!r} is not a positive duration; {zero_hint}")
    return ms


def _optional_positive_duration(value: object) -> object:
    # ``off`` in YAML 1.1 is the boolean false; accept both spellings of "disabled".
    if value is None or value is False or value == OFF:
        return None
    return positive_duration_ms(
        value, otherwise="or null/off to disable", zero_hint="use null/off to disable"
    )


def _kafka_setting(value: object) -> object:
    if isinstance(value, str | int | bool):
        return value
    raise ValueError(
        f"a librdkafka setting must be a string, an integer or a boolean (got {show(value)})"
    )


def _spark_setting(value: object) -> object:
    # Spark conf values are strings; accept plain YAML scalars and spell them as Spark does.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


NonEmptyStr = Annotated[str, AfterValidator(_non_empty)]
JobName = Annotated[str, AfterValidator(_job_name)]
TopicName = Annotated[str, AfterValidator(check_topic_name)]
AggregationName = Annotated[str, AfterValidator(_non_empty), AfterValidator(_aggregation_name)]
FilePath = Annotated[Path, AfterValidator(_non_empty_path)]
OptionalPositiveDuration = Annotated[int | None, BeforeValidator(_optional_positive_duration)]
#: A count or size: an integer from 1 to :data:`MAX_CONFIG_INT`.
StrictPositiveInt = Annotated[int, Strict(), Field(gt=0, le=MAX_CONFIG_INT)]
KafkaSetting = Annotated[str | int | bool, BeforeValidator(_kafka_setting)]
SparkSetting = Annotated[str, BeforeValidator(_spark_setting)]


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context
    if isinstance(context, Mapping) and context.get("base_dir") is not None:
        return Path(context["base_dir"])
    return Path.cwd()


def _resolve_existing_file(value: Path, info: ValidationInfo) -> Path:
    """Resolve ``value`` against the job file's directory and require that it exists."""
    path = value.expanduser()
    if not path.is_absolute():
        path = _base_dir(info) / path
    path = Path(os.path.abspath(path))
    if not path.exists():
        raise ValueError(
            f"file not found: {path} (relative paths are resolved against the directory "
            "of the job file)"
        )
    if not path.is_file():
        raise ValueError(f"not a file: {path}")
    return path


def check_avro_schema(
    section: str, value: Path | None, info: ValidationInfo, *, required: bool
) -> Path | None:
    """Validate ``<section>.avro_schema``: set exactly for ``format: avro``, an existing file.

    ``required`` says whether an avro ``<section>`` must name a schema. The path is
    returned absolute, resolved against the job file's directory.
    """
    fmt = info.data.get("format")
    if value is None:
        if required and fmt == "avro":
            raise ValueError(
                f"required when {section}.format is avro: the path of the Avro schema (.avsc), "
                "relative to the job file"
            )
        return None
    if fmt is not None and fmt != "avro":
        raise ValueError(f"only allowed when {section}.format is avro ({section}.format is {fmt})")
    return _resolve_existing_file(value, info)


def _check_record_schema(path: Path) -> None:
    """Records are decoded with the schema in ``path``: the job's decoder must take it,
    and it must be a record; raises :class:`ValueError` naming the file."""
    # imported here: the codecs import this package
    from window_operator.codecs.avro_input import AvroPayloadDecoder
    from window_operator.codecs.avro_schema import AvroSchemaError

    try:
        schema = AvroPayloadDecoder(path).schema
    except AvroSchemaError as exc:
        raise ValueError(str(exc)) from None
    if not (isinstance(schema, Mapping) and schema.get("type") == "record"):
        raise ValueError(f"{path}: the input schema must be an Avro record (got {show(schema)})")


#: Avro logical types of a long that is a point in time, and the unit their values are
#: read in: milli- and microseconds become epoch ms, nanoseconds stay a count of ns.
_TIMESTAMP_LOGICAL = {
    "timestamp-millis": "ms",
    "local-timestamp-millis": "ms",
    "timestamp-micros": "ms",
    "local-timestamp-micros": "ms",
    "timestamp-nanos": "ns",
    "local-timestamp-nanos": "ns",
}


def _timestamp_logical_type(schema_path: Path, field: str) -> str | None:
    """The timestamp logical type of record field ``field`` in the Avro schema (a union
    member's included); ``None`` when it has none, or the schema does not read (the
    decoder reports that)."""
    for kind in (_record_fields(schema_path) or {}).get(field, ()):
        if isinstance(kind, Mapping) and kind.get("logicalType") in _TIMESTAMP_LOGICAL:
            return str(kind["logicalType"])
    return None


def _record_fields(schema_path: Path) -> dict[str, list[object]] | None:
    """The record fields of the Avro schema (name: its types, a union's members without
    ``null``); ``None`` where the schema does not read (the decoder reports that)."""
    try:
        schema = orjson.loads(schema_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    fields = schema.get("fields") if isinstance(schema, Mapping) else None
    found: dict[str, list[object]] = {}
    for fld in fields if isinstance(fields, list) else ():
        if isinstance(fld, Mapping) and isinstance(fld.get("name"), str):
            kinds = fld.get("type")
            members = kinds if isinstance(kinds, list) else [kinds]
            found[fld["name"]] = [k for k in members if k != "null"]
    return found


def schema_lacks(schema_path: Path | None, name: str) -> str | None:
    """Why field ``name`` cannot be read from records of the Avro schema (``None``: it
    can, or there is no schema, or it does not read): a job reading a field the schema
    lacks would reject every record."""
    fields = None if schema_path is None else _record_fields(schema_path)
    if fields is None or name in fields:
        return None
    return (
        f"the Avro schema {schema_path} has no field {name!r} (it has "
        f"{', '.join(map(repr, fields)) or 'none'}): every record would lack it"
    )


def check_in_schema(info: ValidationInfo, names: Sequence[str]) -> None:
    """Every field of ``names`` is a field of the input's Avro schema, where it has one."""
    for name in names:
        if (problem := schema_lacks(info.data.get("avro_schema"), name)) is not None:
            raise ValueError(problem)


_NUMBERS = {"int", "long", "float", "double"}
#: Logical types the decoder turns into numbers, and into strings (ISO-8601 text).
_NUMBER_LOGICAL = {"decimal", *_TIMESTAMP_LOGICAL}
_STRING_LOGICAL = {"date", "time-millis", "time-micros", "uuid"}
#: The Avro types the decoder makes neither a number nor a string of.
_OTHER_TYPES = {"boolean", "bytes", "null", "record", "array", "map", "enum", "fixed"}


def _value_kind(kind: object) -> str | None:
    """What the decoder makes of an Avro type: ``"number"``, ``"string"``, ``"other"``
    (a record, array, map, boolean...), or ``None`` where it cannot tell here (a named
    type defined elsewhere in the schema)."""
    if isinstance(kind, Mapping):
        logical = kind.get("logicalType")
        if logical in _NUMBER_LOGICAL:
            return "number"
        if logical in _STRING_LOGICAL:
            return "string"
        kind = kind.get("type")
    if kind in _NUMBERS:
        return "number"
    if kind == "string":
        return "string"
    return "other" if kind in _OTHER_TYPES else None


def schema_not_number(schema_path: Path | None, name: str) -> str | None:
    """Why field ``name`` of the Avro schema cannot hold a number (``None``: it can, or
    there is no schema, or the schema does not say): a numeric operation over a field
    whose every type is decoded as a string or a non-number would reject every record
    as ``WRONG_TYPE``."""
    fields = None if schema_path is None else _record_fields(schema_path)
    members = (fields or {}).get(name, [])
    kinds = {_value_kind(k) for k in members}
    if not members or not kinds <= {"string", "other"}:
        return None
    return (
        f"the Avro schema {schema_path} gives field {name!r} no numeric type (it has "
        f"{' | '.join(sorted(_type_text(k) for k in members))}): every record would be "
        "rejected as WRONG_TYPE"
    )


#: The Avro types the decoder makes an object or an array of: no key can be one.
_COMPOSITE_TYPES = {"record", "array", "map"}


def schema_not_key(schema_path: Path | None, name: str) -> str | None:
    """Why field ``name`` of the Avro schema cannot be a key (``None``: it can, or the
    schema does not say): a field whose every type decodes to an object or an array
    would reject every record as ``BAD_KEY``."""
    fields = None if schema_path is None else _record_fields(schema_path)
    members = (fields or {}).get(name, [])
    composite = [
        k for k in members if (k.get("type") if isinstance(k, Mapping) else k) in _COMPOSITE_TYPES
    ]
    if not members or len(composite) < len(members):
        return None
    return (
        f"the Avro schema {schema_path} gives the key field {name!r} no type a key can be "
        f"(it has {' | '.join(sorted(_type_text(k) for k in members))}; a key is a string, "
        "a number or a boolean): every record would be rejected as BAD_KEY"
    )


def _type_text(kind: object) -> str:
    """An Avro type as a message names it: ``long``, ``int (date)``, ``record``."""
    if not isinstance(kind, Mapping):
        return str(kind)
    logical = kind.get("logicalType")
    return f"{kind.get('type')} ({logical})" if logical else str(kind.get("type"))


class InputModel(FrozenModel):
    """The base of ``input:`` and of a join side, which decode records alike.

    Both declare ``format``, ``avro_schema``, ``avro_wire``, ``timestamp``,
    ``timestamp_unit`` and ``fields`` among their own keys, each model in its documented
    key order (pydantic would put fields of a base first); this base checks
    ``avro_schema`` against ``format``, naming ``section`` in its problems.
    """

    #: The config section named in ``avro_schema`` problems.
    section: ClassVar[str]
    if TYPE_CHECKING:  # declared by each model, in its own key order
        format: Literal["json", "avro"]
        avro_wire: Literal["schemaless", "confluent"]
        timestamp: str | None
        timestamp_from: Literal["field", "kafka"]
        timestamp_unit: Literal["ms", "s", "us", "ns", "iso8601"]

    @model_validator(mode="after")
    def _event_time(self) -> Self:
        """The event time is a record field (``timestamp``, required then) or the Kafka
        record timestamp (``timestamp_from: kafka``: no field, and epoch ms)."""
        problems: list[tuple[Location, str]] = []
        if self.timestamp_from == "field" and self.timestamp is None:
            message = (
                "required: the record field that holds the event time (or timestamp_from: "
                "kafka, to take the Kafka record timestamp as the event time)"
            )
            problems.append((("timestamp",), message))
        if self.timestamp_from == "kafka" and self.timestamp is not None:
            message = (
                f"leave it out with timestamp_from: kafka (the Kafka record timestamp is "
                f"the event time, not the field {self.timestamp!r})"
            )
            problems.append((("timestamp",), message))
        if self.timestamp_from == "kafka" and self.timestamp_unit != "ms":
            message = "Kafka record timestamps are epoch milliseconds: leave it out, or ms"
            problems.append((("timestamp_unit",), message))
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def timestamp_field(self) -> str | None:
        """The event-time field, ``None`` when the Kafka record timestamp is the event time."""
        return self.timestamp if self.timestamp_from == "field" else None

    @field_validator("avro_schema", check_fields=False)
    @classmethod
    def _avro_schema(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        path = check_avro_schema(cls.section, value, info, required=True)
        if path is not None:
            _check_record_schema(path)
        return path

    @field_validator("key", "timestamp", "fields", check_fields=False)
    @classmethod
    def _in_schema(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> object:
        """The fields the job reads are the Avro schema's (a join's ``fields`` are
        carried as null where a record lacks them: not checked)."""
        if info.field_name == "fields" and cls.section.startswith("join"):
            return value
        names = (value,) if isinstance(value, str) else value or ()
        check_in_schema(info, names)
        if info.field_name == "key":
            for name in names:
                if (problem := schema_not_key(info.data.get("avro_schema"), name)) is not None:
                    raise ValueError(problem)
        return value

    @field_validator("timestamp_unit", check_fields=False)
    @classmethod
    def _timestamp_unit(cls, value: str, info: ValidationInfo) -> str:
        """An Avro timestamp logical type fixes the unit its values are read in, and the
        field's type must hold the unit's values (a number, or an ISO-8601 string)."""
        path, field = info.data.get("avro_schema"), info.data.get("timestamp")
        if path is None or field is None:
            return value
        members = (_record_fields(path) or {}).get(field, [])
        kinds = {_value_kind(k) for k in members}
        wanted = "string" if value == "iso8601" else "number"
        if members and kinds <= {"number", "string", "other"} and wanted not in kinds:
            raise ValueError(
                f"the Avro schema {path} gives the timestamp field {field!r} no type that "
                f"is read as {'an ISO-8601 string' if wanted == 'string' else 'a number'}, "
                f"as timestamp_unit {value} reads it (it has "
                f"{' | '.join(sorted(_type_text(k) for k in members))}): every record would be "
                "rejected as BAD_TIMESTAMP"
            )
        logical = _timestamp_logical_type(path, field)
        if logical is None or _TIMESTAMP_LOGICAL[logical] == value:
            return value
        unit = _TIMESTAMP_LOGICAL[logical]
        raise ValueError(
            f"the Avro schema gives field {field!r} the logical type {logical}, which is "
            f"read as epoch {'milliseconds' if unit == 'ms' else 'nanoseconds'}: "
            f"timestamp_unit must be {unit}{' (or left out)' if unit == 'ms' else ''}, "
            f"not {value}"
        )

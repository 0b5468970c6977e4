"""The root of a windowed-aggregation job: ``input``, ``window`` and ``aggregations``."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from window_operator.config.errors import QUOTE_BOOLEAN, FieldProblems, Location, show
from window_operator.config.fields import (
    AggregationName,
    FilePath,
    FrozenModel,
    InputModel,
    NonEmptyStr,
    TopicName,
    none_to_empty_mapping,
    schema_lacks,
    schema_not_number,
)
from window_operator.config.sections import JobSections
from window_operator.config.windows import (
    CountWindow,
    OffsetsWindow,
    SessionWindow,
    WindowConfig,
)
from window_operator.eventkey import KeyFormat

__all__ = ["AggregationConfig", "InputConfig", "JobConfig"]

#: The most fields ``input.key`` may list.
MAX_KEY_FIELDS = 16

#: Operations whose ``params.x`` names a second input field (linear regression's x).
_X_PARAM_OPS = frozenset({"linreg"})


def _key_fields(value: object) -> object:
    """``input.key``: a field name, or a list of them (a list of one is that name)."""
    if value is None or (isinstance(value, str) and value):
        return value
    if isinstance(value, str):
        raise ValueError("must not be empty (leave key out for one global key)")
    if isinstance(value, bool):
        raise ValueError(f"must be a field name (got {show(value)}: {QUOTE_BOOLEAN})")
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a field name or a list of field names (got {show(value)})")
    for index, name in enumerate(value):
        if not isinstance(name, str) or not name:
            raise ValueError(f"item {index} must be a field name (got {show(name)})")
    if not value:
        raise ValueError("list at least one field (or leave key out for one global key)")
    if len(value) > MAX_KEY_FIELDS:
        raise ValueError(f"at most {MAX_KEY_FIELDS} key fields (got {len(value)})")
    twice = sorted({f for f in value if value.count(f) > 1})
    if twice:
        raise ValueError(f"{', '.join(map(repr, twice))} listed twice")
    return value[0] if len(value) == 1 else tuple(value)


class InputConfig(InputModel):
    """``input:`` the topic events are read from and how an event is decoded.

    ``key`` is the grouping field, or a list of them (a list of one is that field);
    ``None`` puts every event under the one global key ``""``; ``key_from: kafka`` groups
    by the Kafka record key instead, read as ``key_format`` (see
    :mod:`window_operator.eventkey`). ``timestamp`` is the event-time
    field, read in ``timestamp_unit``; ``timestamp_from: kafka`` takes the Kafka record
    timestamp instead.
    ``fields`` lists the value fields to decode (``None``: the fields the aggregations
    reference, see :meth:`JobConfig.value_fields`). ``avro_schema`` is required exactly
    when ``format`` is ``avro``; it is resolved against the YAML file's directory and
    stored as an absolute path to an existing file.
    """

    topic: TopicName
    format: Literal["json", "avro"] = "json"
    avro_schema: FilePath | None = Field(default=None, validate_default=True)
    avro_wire: Literal["schemaless", "confluent"] = "schemaless"
    key: Annotated[NonEmptyStr | tuple[NonEmptyStr, ...] | None, BeforeValidator(_key_fields)] = (
        None
    )
    key_from: Literal["field", "kafka"] = "field"
    key_format: KeyFormat = "string"
    timestamp: NonEmptyStr | None = None
    timestamp_from: Literal["field", "kafka"] = "field"
    timestamp_unit: Literal["ms", "s", "us", "ns", "iso8601"] = Field(
        default="ms", validate_default=True
    )
    fields: tuple[NonEmptyStr, ...] | None = None

    section: ClassVar[str] = "input"

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The grouping fields: none, one or several."""
        if self.key is None:
            return ()
        return (self.key,) if isinstance(self.key, str) else self.key

    @property
    def kafka_key(self) -> bool:
        """Whether events group by their Kafka record key (``key_from: kafka``)."""
        return self.key_from == "kafka"

    @model_validator(mode="after")
    def _key_source(self) -> Self:
        """The Kafka record key replaces the key fields: ``key`` is left out with it."""
        if self.kafka_key and self.key is not None:
            message = (
                f"leave it out with key_from: kafka (the Kafka record key is the grouping "
                f"key, not {show(self.key)})"
            )
            raise FieldProblems([(("key",), message)])
        if not self.kafka_key and self.key_format != "string":
            message = (
                f"applies to key_from: kafka only (it says how the Kafka record key is "
                f"written); with key_from: field, leave it out (got {self.key_format})"
            )
            raise FieldProblems([(("key_format",), message)])
        return self


class AggregationConfig(FrozenModel):
    """One entry of ``aggregations:``: the result field ``name`` = ``op`` over ``field``.

    ``op`` is a builtin operation name or a dotted path to a class (``pkg.mod:Class`` or
    ``pkg.mod.Class``); it is not checked against the catalogue here. ``params`` is
    passed to the operation as keyword settings.
    """

    name: AggregationName
    op: NonEmptyStr
    field: NonEmptyStr | None = None
    params: Annotated[dict[str, Any], BeforeValidator(none_to_empty_mapping)] = Field(
        default_factory=dict
    )


class JobConfig(JobSections):
    """The root of a job file: one windowed aggregation from an input topic to an output.

    Sections are documented on their models; see the module docstring for conventions
    (durations in ms, frozen models, derived defaults).
    """

    input: InputConfig
    window: WindowConfig
    aggregations: tuple[AggregationConfig, ...]

    input_sections: ClassVar[tuple[str, ...]] = ("input",)

    def input_topic_fields(self) -> list[tuple[Location, str]]:
        """``input.topic``."""
        return [(("input", "topic"), self.input.topic)]

    @field_validator("aggregations")
    @classmethod
    def _unique_names(cls, value: tuple[AggregationConfig, ...]) -> tuple[AggregationConfig, ...]:
        # Checked here rather than with min_length, which pydantic also reports when
        # the only entry is invalid.
        if not value:
            raise ValueError("must list at least one aggregation")
        first: dict[str, int] = {}
        problems: list[tuple[Location, str]] = []
        for index, agg in enumerate(value):
            if agg.name in first:
                problems.append(
                    (
                        (index, "name"),
                        f"duplicate aggregation name {agg.name!r} (also used by "
                        f"aggregations.{first[agg.name]}); names must be unique",
                    )
                )
            else:
                first[agg.name] = index
        if problems:
            raise FieldProblems(problems)
        return value

    @model_validator(mode="after")
    def _fields_cover_aggregations(self) -> Self:
        """The fields the aggregations read are in ``input.fields`` where it is given,
        and in the Avro schema of an Avro input."""
        declared = self.input.fields
        problems: list[tuple[Location, str]] = []
        for index, agg in enumerate(self.aggregations):
            for loc, name in _referenced_fields(agg):
                where: Location = ("aggregations", index, *loc)
                if not name:
                    problems.append((where, "must not be empty: a field name"))
                elif declared is not None and name not in declared:
                    listed = ", ".join(declared)
                    problems.append((where, f"{name!r} is not one of input.fields ({listed})"))
                elif (lacks := schema_lacks(self.input.avro_schema, name)) is not None:
                    problems.append((where, lacks))
                elif (
                    _reads_number(agg, loc)
                    and (wrong := schema_not_number(self.input.avro_schema, name)) is not None
                ):
                    problems.append((where, f"{agg.op} reads a number: {wrong}"))
        if problems:
            raise FieldProblems(problems)
        return self

    @model_validator(mode="after")
    def _retention_size_of_time_windows(self) -> Self:
        if self.retention.size is not None and self.window.type not in ("tumbling", "hopping"):
            raise FieldProblems(
                [
                    (
                        ("retention", "size"),
                        "counts past windows of a time axis: it applies to tumbling and "
                        f"hopping windows, not to window.type {self.window.type}",
                    )
                ]
            )
        return self

    def ignored_settings(self) -> list[str]:
        """Lateness, LATE updates and retention by event time, given for count or offsets
        windows or tuple sessions: a window holds messages by their number or offsets,
        nothing is late and none expires by time. (``emit.early`` still sends EARLY
        results of open windows; ``watermark.idle_timeout`` and ``max_future`` still
        move and guard the job's watermark.)"""
        shape = self._held_by_arrival()
        if shape is None:
            return super().ignored_settings()
        given = [
            ("watermark", "allowed_lateness", self.watermark.model_fields_set),
            ("emit", "late", self.emit.model_fields_set),
            ("retention", "time", self.retention.model_fields_set),
        ]
        return [
            *super().ignored_settings(),
            *(
                f"{section}.{name} does not apply to {shape}"
                for section, name, fields_set in given
                if name in fields_set
            ),
        ]

    def input_models(self) -> list[tuple[str, InputModel]]:
        """``input``."""
        return [("input", self.input)]

    @property
    def by_arrival(self) -> bool:
        """Whether the windows hold messages in arrival order (count and offsets windows,
        tuple sessions): lateness, retention by time and late emission do not apply."""
        return self._held_by_arrival() is not None

    def _held_by_arrival(self) -> str | None:
        """The window shape, and what its windows hold, when that is messages in arrival
        order (by number or offsets) rather than event time."""
        window = self.window
        if isinstance(window, CountWindow):
            holds = (
                "a partition's offsets"
                if isinstance(window, OffsetsWindow)
                else "a key's messages by their number"
            )
            return (
                f"{window.type} windows (a window holds {holds}: none of them is late, and "
                "no window expires by event time)"
            )
        if isinstance(window, SessionWindow) and window.max_idle_messages is not None:
            return (
                "tuple sessions (window.max_idle_messages: a session holds a key's messages "
                f"until {window.max_idle_messages} offsets of its partition pass without it; "
                "none of them is late, and no session expires by event time)"
            )
        return None

    @property
    def windows_per_partition(self) -> bool:
        """Whether a window is bounded by one input partition's offsets (``offsets``
        windows, tuple sessions): state is keyed by partition and results name it."""
        window = self.window
        if isinstance(window, OffsetsWindow):
            return True
        return isinstance(window, SessionWindow) and window.max_idle_messages is not None

    @property
    def bounds_in_event_time(self) -> bool:
        """Whether ``window_start`` / ``window_end`` are event times (epoch ms): not for
        ``count`` windows (message numbers) nor windows bounded by offsets."""
        return not (isinstance(self.window, CountWindow) or self.windows_per_partition)

    def value_fields(self) -> tuple[str, ...]:
        """The value fields to decode from each event, in declaration order, without repeats.

        ``input.fields`` when given; otherwise every aggregation's ``field`` and, for
        linear regression (``op: linreg``), ``params.x`` when it is a field name.
        """
        if self.input.fields is not None:
            return tuple(dict.fromkeys(self.input.fields))
        names = [name for agg in self.aggregations for _, name in _referenced_fields(agg)]
        return tuple(dict.fromkeys(names))


def _reads_number(agg: AggregationConfig, loc: tuple[str, ...]) -> bool:
    """Whether the built-in operation of ``agg`` reads the field at ``loc`` as a number
    (``count`` with a field only counts non-null values; user-defined operations say
    so themselves when they are loaded)."""
    from window_operator.aggregations.base import VectorOp
    from window_operator.aggregations.registry import BUILTIN_OPS

    if loc == ("params", "x"):
        return True
    cls = BUILTIN_OPS.get(agg.op)
    if cls is None or agg.op == "count":
        return False
    return issubclass(cls, VectorOp) or bool(getattr(cls, "numeric", False))


def _referenced_fields(agg: AggregationConfig) -> list[tuple[tuple[str, ...], str]]:
    refs: list[tuple[tuple[str, ...], str]] = []
    if agg.field is not None:
        refs.append((("field",), agg.field))
    x = agg.params.get("x")
    if agg.op in _X_PARAM_OPS and isinstance(x, str):
        refs.append((("params", "x"), x))
    return refs

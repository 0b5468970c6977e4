"""The job configuration: one YAML file describes one windowed-aggregation job.

:func:`load_config` reads a YAML file and :func:`parse_config` validates an already
loaded mapping; both return a frozen :class:`JobConfig` or raise :class:`ConfigError`,
whose message lists every problem as ``<dotted.field.path>: <what is allowed>``.

Conventions of the models:

* Every model is frozen and rejects unknown keys, so a typo such as ``windw:`` is an
  error that names the key.
* Durations keep their YAML field names and hold **int milliseconds** (``window.size``
  is ``60000`` for ``60s``); read-only ``*_ms`` properties (``window.size_ms``,
  ``watermark.allowed_lateness_ms``, ``emit.early_ms`` ...) return the same numbers
  under a name that states the unit. See :mod:`window_operator.durations` for the
  accepted spellings.
* Optional sections (``watermark``, ``emit``, ``retention``, ``output``, ``state``,
  ``kafka``, ``spark``) may be absent or ``null``; defaults that depend on the job name
  (``input.topic``, ``output.topic``, ``output.errors_topic``, ``spark.checkpoint_dir``)
  are filled in by :class:`JobConfig`.
* Lists become tuples.
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from window_operator.durations import (
    Duration,
    DurationError,
    PositiveDuration,
    format_duration_ms,
    parse_duration_ms,
)

__all__ = [
    "DEFAULT_STATE_DIR",
    "RESERVED_OUTPUT_NAMES",
    "CountWindow",
    "JoinConfig",
    "JoinInputConfig",
    "JoinJobConfig",
    "OffsetsWindow",
    "SessionWindow",
    "load_any_config",
    "parse_any_config",
    "AggregationConfig",
    "ConfigError",
    "ConfigProblem",
    "EmitConfig",
    "HoppingWindow",
    "InputConfig",
    "JobConfig",
    "KafkaConfig",
    "LateEmit",
    "OutputConfig",
    "RetentionConfig",
    "SparkConfig",
    "StateConfig",
    "TumblingWindow",
    "WatermarkConfig",
    "WindowConfig",
    "load_config",
    "parse_config",
]

#: Names an aggregation may not take: they are the other fields of a window result.
RESERVED_OUTPUT_NAMES = frozenset({"key", "window_start", "window_end", "kind", "update_seq"})

#: Where task state lives unless ``state.dir`` says otherwise (relative to the working dir).
DEFAULT_STATE_DIR = Path("./state")

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_JOB_NAME_MAX = 200  # leaves room for the "-windows"/"-errors" suffixes in a Kafka topic name
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: Operations whose ``params.x`` names a second input field (linear regression's x).
_X_PARAM_OPS = frozenset({"linreg"})
_OFF = "off"


# ---------------------------------------------------------------------------------------
# Field types
# ---------------------------------------------------------------------------------------


class _FieldProblems(ValueError):
    """Problems found by a validator above the field they concern.

    Each problem carries a location relative to the validated value, so the error can
    name e.g. ``window.size`` although the check ran on the whole window.
    """

    def __init__(self, problems: Sequence[tuple[tuple[str | int, ...], str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{_dotted(loc)}: {msg}" for loc, msg in self.problems))


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


def _topic_name(value: str) -> str:
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
    return value


def _none_to_empty_mapping(value: object) -> object:
    return {} if value is None else value


def _optional_positive_duration(value: object) -> object:
    # ``off`` in YAML 1.1 is the boolean false; accept both spellings of "disabled".
    if value is None or value is False or value == _OFF:
        return None
    try:
        ms = parse_duration_ms(value)  # type: ignore[arg-type]  # bad types raise DurationError
    except DurationError as exc:
        raise DurationError(f"{exc}; or null/off to disable") from None
    if ms == 0:
        raise DurationError(f"{value!r} is not a positive duration; use null/off to disable")
    return ms


def _kafka_setting(value: object) -> object:
    if isinstance(value, str | int | bool):
        return value
    raise ValueError(
        f"a librdkafka setting must be a string, an integer or a boolean (got {_show(value)})"
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
TopicName = Annotated[str, AfterValidator(_topic_name)]
AggregationName = Annotated[str, AfterValidator(_non_empty), AfterValidator(_aggregation_name)]
FilePath = Annotated[Path, AfterValidator(_non_empty_path)]
OptionalPositiveDuration = Annotated[int | None, BeforeValidator(_optional_positive_duration)]
StrictPositiveInt = Annotated[int, Strict(), Field(gt=0)]
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


def _check_avro_schema(
    section: str, value: Path | None, info: ValidationInfo, *, required: bool
) -> Path | None:
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


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------


class InputConfig(_Frozen):
    """``input:`` the topic events are read from and how an event is decoded.

    ``key`` is the grouping field; ``None`` puts every event under the one global key
    ``""``. ``timestamp`` is the event-time field, read in ``timestamp_unit``.
    ``fields`` lists the value fields to decode (``None``: the fields the aggregations
    reference, see :meth:`JobConfig.value_fields`). ``avro_schema`` is required exactly
    when ``format`` is ``avro``; it is resolved against the YAML file's directory and
    stored as an absolute path to an existing file.
    """

    topic: TopicName
    format: Literal["json", "avro"] = "json"
    avro_schema: FilePath | None = Field(default=None, validate_default=True)
    avro_wire: Literal["schemaless", "confluent"] = "schemaless"
    key: NonEmptyStr | None = None
    timestamp: NonEmptyStr
    timestamp_unit: Literal["ms", "s", "us", "ns", "iso8601"] = "ms"
    fields: tuple[NonEmptyStr, ...] | None = None

    @field_validator("avro_schema")
    @classmethod
    def _avro_schema(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return _check_avro_schema("input", value, info, required=True)


class TumblingWindow(_Frozen):
    """``window: {type: tumbling, size}``: back-to-back windows ``size`` ms long.

    :attr:`step` equals :attr:`size`, so consumers can treat every window as hopping.
    """

    type: Literal["tumbling"] = "tumbling"
    size: PositiveDuration

    @property
    def step(self) -> int:
        """The distance between window starts in ms: the size, windows do not overlap."""
        return self.size

    @property
    def size_ms(self) -> int:
        """The window length in milliseconds."""
        return self.size

    @property
    def step_ms(self) -> int:
        """The distance between window starts in milliseconds (== ``size_ms``)."""
        return self.size


class HoppingWindow(_Frozen):
    """``window: {type: hopping, size, step}``: windows ``size`` ms long every ``step`` ms.

    ``size`` must be a positive multiple of ``step``; each window spans
    ``size // step`` frames.
    """

    type: Literal["hopping"] = "hopping"
    size: PositiveDuration
    step: PositiveDuration

    @property
    def size_ms(self) -> int:
        """The window length in milliseconds."""
        return self.size

    @property
    def step_ms(self) -> int:
        """The distance between window starts in milliseconds."""
        return self.step

    @model_validator(mode="after")
    def _size_multiple_of_step(self) -> Self:
        if self.size % self.step:
            below = self.size // self.step * self.step
            hint = [format_duration_ms(s) for s in (below, below + self.step) if s > 0]
            raise _FieldProblems(
                [
                    (
                        ("size",),
                        "must be a positive multiple of window.step (got size "
                        f"{format_duration_ms(self.size)}, step {format_duration_ms(self.step)}"
                        f"; e.g. size {' or '.join(hint)})",
                    )
                ]
            )
        return self


class SessionWindow(_Frozen):
    """``window: {type: session, gap}`` or ``{type: session, max_idle_messages}``.

    Time sessions (``gap``, ms): an event's interval is ``[ts, ts + gap]``; events whose
    intervals overlap belong to one session (Jet). Tuple sessions
    (``max_idle_messages``): a key's session ends after that many messages of its
    partition without the key (Samza). Exactly one of the two is set.
    """

    type: Literal["session"] = "session"
    gap: OptionalPositiveDuration = None
    max_idle_messages: StrictPositiveInt | None = None

    @model_validator(mode="after")
    def _one_termination_policy(self) -> Self:
        if (self.gap is None) == (self.max_idle_messages is None):
            raise _FieldProblems(
                [
                    (
                        ("gap",),
                        "set exactly one of window.gap (a duration) or window.max_idle_messages",
                    )
                ]
            )
        return self


def _count_step_default(data: Any) -> Any:
    if isinstance(data, Mapping) and data.get("step") is None and "size" in data:
        return {**data, "step": data["size"]}
    return data


class CountWindow(_Frozen):
    """``window: {type: count, size, step}``: per-key windows over message counts.

    A window holds ``size`` consecutive messages of one key and a new one starts every
    ``step`` messages of that key (``step`` defaults to ``size``: tumbling). ``size``
    must be a multiple of ``step``.
    """

    type: Literal["count"] = "count"
    size: StrictPositiveInt
    step: StrictPositiveInt

    @model_validator(mode="before")
    @classmethod
    def _default_step(cls, data: Any) -> Any:
        return _count_step_default(data)

    @model_validator(mode="after")
    def _size_multiple_of_step(self) -> Self:
        if self.size % self.step:
            raise _FieldProblems(
                [
                    (
                        ("size",),
                        f"must be a multiple of window.step ({self.size} vs {self.step})",
                    )
                ]
            )
        return self


class OffsetsWindow(CountWindow):
    """``window: {type: offsets, size, step}``: windows over a partition's offsets (Samza).

    The window key is the start offset (a multiple of ``step``); a window covers
    ``[start, start + size)`` offsets of one partition and is full (ON_TIME) once the
    partition has delivered an offset at or past its end (offsets may have gaps, so
    messages are not counted). Offsets are ordered, so there are no late arrivals;
    replays are recognised."""

    type: Literal["offsets"] = "offsets"  # type: ignore[assignment]


#: ``window:``: the window shape, chosen by its ``type`` key.
WindowConfig = Annotated[
    TumblingWindow | HoppingWindow | SessionWindow | CountWindow | OffsetsWindow,
    Field(discriminator="type"),
]


class AggregationConfig(_Frozen):
    """One entry of ``aggregations:``: the result field ``name`` = ``op`` over ``field``.

    ``op`` is a builtin operation name or a dotted path to a class (``pkg.mod:Class`` or
    ``pkg.mod.Class``); it is not checked against the catalogue here. ``params`` is
    passed to the operation as keyword settings.
    """

    name: AggregationName
    op: NonEmptyStr
    field: NonEmptyStr | None = None
    params: Annotated[dict[str, Any], BeforeValidator(_none_to_empty_mapping)] = Field(
        default_factory=dict
    )


class WatermarkConfig(_Frozen):
    """``watermark:``: how event time advances.

    ``allowed_lateness`` (ms) bounds out-of-orderness: the watermark is the maximum event
    time seen minus it. ``idle_timeout`` (ms) lets an input partition that has been idle
    that long stop holding the watermark back; ``None`` means it holds it back forever.
    ``max_future`` (ms, default one day; ``off`` = no limit) guards against far-future
    event times: an event dated more than this ahead of its record's arrival time (the
    Kafka record timestamp; ``wall_ms`` in ``simulate``) is rejected as
    ``FUTURE_TIMESTAMP`` and never moves the watermark.
    """

    allowed_lateness: Duration = 0
    idle_timeout: OptionalPositiveDuration = None
    max_future: OptionalPositiveDuration = 86_400_000

    @property
    def allowed_lateness_ms(self) -> int:
        """``allowed_lateness`` in milliseconds."""
        return self.allowed_lateness

    @property
    def idle_timeout_ms(self) -> int | None:
        """``idle_timeout`` in milliseconds, ``None`` when idle partitions are waited for."""
        return self.idle_timeout


def _late_emit(value: object) -> object:
    if value is False or value == _OFF:
        return {"mode": "off", "period_ms": 0}
    if value == "per_arrival":
        return {"mode": "per_arrival", "period_ms": 0}
    if isinstance(value, Mapping | LateEmit):
        return value
    try:
        ms = parse_duration_ms(value)  # type: ignore[arg-type]  # bad types raise DurationError
    except DurationError as exc:
        raise DurationError(f"{exc}; or per_arrival, or off") from None
    if ms == 0:
        raise DurationError(
            f"{value!r} is not a positive duration; use per_arrival to re-emit on every late event"
        )
    return {"mode": "period", "period_ms": ms}


class LateEmit(_Frozen):
    """The late-arrival emission policy: how past windows changed by late events re-emit.

    ``mode`` ``period``: changed windows are re-emitted once per ``period_ms``;
    ``per_arrival``: on every late event; ``off``: never (``period_ms`` is 0 then).
    """

    mode: Literal["period", "per_arrival", "off"]
    period_ms: int = Field(ge=0)

    @model_validator(mode="after")
    def _period_matches_mode(self) -> Self:
        if self.mode == "period" and self.period_ms <= 0:
            raise ValueError("period_ms must be positive when mode is period")
        if self.mode != "period" and self.period_ms != 0:
            raise ValueError(f"period_ms must be 0 when mode is {self.mode}")
        return self


class EmitConfig(_Frozen):
    """``emit:``: when results are written besides the on-time one at the window end.

    ``early`` (ms) is a wall-clock period for EARLY results of open windows, ``None``
    (YAML ``null``/``off``) disables them. ``late`` is a duration (late re-emissions batched
    per period, default 10 s), ``per_arrival`` or ``off``, normalised to :class:`LateEmit`.
    """

    early: OptionalPositiveDuration = None
    late: Annotated[LateEmit, BeforeValidator(_late_emit)] = LateEmit(
        mode="period", period_ms=10_000
    )

    @property
    def early_ms(self) -> int | None:
        """The EARLY emission period in milliseconds, ``None`` when disabled."""
        return self.early

    @property
    def late_mode(self) -> Literal["period", "per_arrival", "off"]:
        """How late updates are re-emitted: ``period``, ``per_arrival`` or ``off``."""
        return self.late.mode

    @property
    def late_period_ms(self) -> int:
        """The late re-emission period in milliseconds (0 unless the mode is ``period``)."""
        return self.late.period_ms


class RetentionConfig(_Frozen):
    """``retention:``: how long past windows stay updatable.

    ``time`` (ms, default one hour) after its end a window is dropped; events for dropped
    windows go to the errors topic. ``size`` additionally bounds how many past windows
    (window steps) are kept.
    """

    time: Duration = 3_600_000
    size: StrictPositiveInt | None = None

    @property
    def time_ms(self) -> int:
        """``time`` in milliseconds."""
        return self.time


class OutputConfig(_Frozen):
    """``output:``: where window results and rejected events are written.

    ``topic`` defaults to ``<job>-windows`` and ``errors_topic`` to ``<job>-errors``.
    ``avro_schema`` (only with ``format: avro``) is resolved like
    :attr:`InputConfig.avro_schema`; without it a schema is derived from the job.
    """

    topic: TopicName
    format: Literal["json", "avro"] = "json"
    avro_schema: FilePath | None = None
    errors_topic: TopicName

    @field_validator("avro_schema")
    @classmethod
    def _avro_schema(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return _check_avro_schema("output", value, info, required=False)


class StateConfig(_Frozen):
    """``state:``: ``dir`` holds the RocksDB state, relative to the working directory."""

    dir: FilePath = DEFAULT_STATE_DIR


class KafkaConfig(_Frozen):
    """``kafka:``: broker address and extra librdkafka settings.

    ``bootstrap_servers`` ``None`` means the ``KAFKA_BOOTSTRAP_SERVERS`` environment
    variable at run time. ``consumer``/``producer`` are passed to librdkafka as given.
    """

    bootstrap_servers: NonEmptyStr | None = None
    consumer: Annotated[dict[str, KafkaSetting], BeforeValidator(_none_to_empty_mapping)] = Field(
        default_factory=dict
    )
    producer: Annotated[dict[str, KafkaSetting], BeforeValidator(_none_to_empty_mapping)] = Field(
        default_factory=dict
    )


def _spark_trigger(value: object) -> object:
    if value == "available_now":
        return value
    try:
        return parse_duration_ms(value)  # type: ignore[arg-type]  # bad types raise DurationError
    except DurationError as exc:
        raise DurationError(f"{exc}; or available_now") from None


class SparkConfig(_Frozen):
    """``spark:``: how the Spark Structured Streaming query runs.

    ``master`` ``None`` lets the driver pick (``local[*]`` when nothing else sets it).
    ``trigger`` is the processing-time trigger interval in ms (default 5 s) or
    ``"available_now"`` (process what is there, then stop). ``checkpoint_dir`` defaults
    to ``<state.dir>/<job>/spark-checkpoint``. ``conf`` is extra Spark configuration.
    """

    master: NonEmptyStr | None = None
    trigger: Annotated[int | Literal["available_now"], BeforeValidator(_spark_trigger)] = 5_000
    max_offsets_per_trigger: StrictPositiveInt | None = None
    checkpoint_dir: FilePath
    conf: Annotated[dict[str, SparkSetting], BeforeValidator(_none_to_empty_mapping)] = Field(
        default_factory=dict
    )

    @field_validator("trigger")
    @classmethod
    def _positive_trigger(cls, value: int | str) -> int | str:
        if value == 0:
            raise ValueError("must be a positive duration (e.g. 5s) or available_now")
        return value

    @property
    def available_now(self) -> bool:
        """Whether the query processes the available input once and stops."""
        return self.trigger == "available_now"

    @property
    def trigger_ms(self) -> int | None:
        """The trigger interval in milliseconds, ``None`` for ``available_now``."""
        return self.trigger if isinstance(self.trigger, int) else None


_OPTIONAL_SECTIONS = ("watermark", "emit", "retention", "output", "state", "kafka", "spark")


def _with_default(section: Mapping[Any, Any], key: str, value: object) -> dict[Any, Any]:
    if section.get(key) is None:
        return {**section, key: value}
    return dict(section)


def _fill_defaults(data: Any, *, input_sections: Sequence[str]) -> Any:
    """Fill absent optional sections and the defaults that depend on the job name."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for section in _OPTIONAL_SECTIONS:
        if out.get(section) is None:
            out[section] = {}
    job = out.get("job")
    # An invalid job name is reported on its own, not again through every name
    # derived from it; the placeholder never escapes since validation fails.
    valid = isinstance(job, str) and _JOB_NAME.fullmatch(job) and len(job) <= _JOB_NAME_MAX
    name = job if valid and isinstance(job, str) else "job"
    for section in input_sections:
        if isinstance(out.get(section), Mapping):
            out[section] = _with_default(out[section], "topic", f"{name}-input")
    if isinstance(out["output"], Mapping):
        output = _with_default(out["output"], "topic", f"{name}-windows")
        out["output"] = _with_default(output, "errors_topic", f"{name}-errors")
    state_dir: object = DEFAULT_STATE_DIR
    if isinstance(out["state"], Mapping) and isinstance(out["state"].get("dir"), str | Path):
        state_dir = out["state"]["dir"]
    if isinstance(out["spark"], Mapping) and isinstance(state_dir, str | Path):
        checkpoint = Path(state_dir) / name / "spark-checkpoint"
        out["spark"] = _with_default(out["spark"], "checkpoint_dir", checkpoint)
    return out


class JobConfig(_Frozen):
    """The root of a job file: one windowed aggregation from an input topic to an output.

    Sections are documented on their models; see the module docstring for conventions
    (durations in ms, frozen models, derived defaults).
    """

    job: JobName
    input: InputConfig
    window: WindowConfig
    aggregations: tuple[AggregationConfig, ...]
    watermark: WatermarkConfig
    emit: EmitConfig
    retention: RetentionConfig
    output: OutputConfig
    state: StateConfig
    kafka: KafkaConfig
    spark: SparkConfig

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Fill absent sections and the defaults that depend on the job name."""
        return _fill_defaults(data, input_sections=("input",))

    @field_validator("aggregations")
    @classmethod
    def _unique_names(cls, value: tuple[AggregationConfig, ...]) -> tuple[AggregationConfig, ...]:
        # Checked here rather than with min_length, which pydantic also reports when
        # the only entry is invalid.
        if not value:
            raise ValueError("must list at least one aggregation")
        first: dict[str, int] = {}
        problems: list[tuple[tuple[str | int, ...], str]] = []
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
            raise _FieldProblems(problems)
        return value

    @model_validator(mode="after")
    def _fields_cover_aggregations(self) -> Self:
        declared = self.input.fields
        if declared is None:
            return self
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for index, agg in enumerate(self.aggregations):
            for loc, name in _referenced_fields(agg):
                if name not in declared:
                    problems.append(
                        (
                            ("aggregations", index, *loc),
                            f"{name!r} is not one of input.fields ({', '.join(declared)})",
                        )
                    )
        if problems:
            raise _FieldProblems(problems)
        return self

    def value_fields(self) -> tuple[str, ...]:
        """The value fields to decode from each event, in declaration order, without repeats.

        ``input.fields`` when given; otherwise every aggregation's ``field`` and, for
        linear regression (``op: linreg``), ``params.x`` when it is a field name.
        """
        if self.input.fields is not None:
            return tuple(dict.fromkeys(self.input.fields))
        names = [name for agg in self.aggregations for _, name in _referenced_fields(agg)]
        return tuple(dict.fromkeys(names))


def _referenced_fields(agg: AggregationConfig) -> list[tuple[tuple[str, ...], str]]:
    refs: list[tuple[tuple[str, ...], str]] = []
    if agg.field is not None:
        refs.append((("field",), agg.field))
    x = agg.params.get("x")
    if agg.op in _X_PARAM_OPS and isinstance(x, str):
        refs.append((("params", "x"), x))
    return refs


def _signed_duration(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "+-":
            ms = parse_duration_ms(text[1:])
            return -ms if text[0] == "-" else ms
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return parse_duration_ms(value)  # type: ignore[arg-type]  # bad types raise DurationError


#: A duration that may be negative: ``-2m``, ``+5m``, ``30s``.
SignedDuration = Annotated[int, BeforeValidator(_signed_duration)]


class JoinInputConfig(_Frozen):
    """One side of a join: ``join.left`` or ``join.right``.

    ``name`` identifies the side (``source`` in ``simulate`` input lines, and the key of
    the side in join results); ``topic`` defaults to ``name``. ``fields`` limits the
    fields carried into results (default: the whole record).
    """

    name: NonEmptyStr
    topic: TopicName | None = None
    format: Literal["json", "avro"] = "json"
    avro_schema: FilePath | None = Field(default=None, validate_default=True)
    avro_wire: Literal["schemaless", "confluent"] = "schemaless"
    timestamp: NonEmptyStr
    timestamp_unit: Literal["ms", "s", "us", "ns", "iso8601"] = "ms"
    fields: tuple[NonEmptyStr, ...] | None = None

    @field_validator("avro_schema")
    @classmethod
    def _avro_schema(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return _check_avro_schema("join", value, info, required=True)

    @property
    def topic_name(self) -> str:
        """The topic to read (``topic``, or ``name`` when unset)."""
        return self.topic or self.name


class JoinConfig(_Frozen):
    """``join:`` a windowed stream-stream join of ``left`` and ``right`` on equal fields.

    The time condition is one of: ``range`` (``RANGE d PRECEDING`` over the left
    stream: ``0 <= right.ts - left.ts <= d``), ``between: [lo, hi]`` (``lo <= right.ts -
    left.ts <= hi``, signed durations like ``-2m``), or ``rows`` (``ROWS n PRECEDING``: a
    right message joins the ``n`` most recent left messages with its join key, in
    arrival order). ``kind`` inner, left or full (outer rows are emitted once the
    watermark proves no match can come). ``store`` picks the Message Store key layout
    (``auto`` follows the Samza seed's matrix).
    """

    left: JoinInputConfig
    right: JoinInputConfig
    on: tuple[NonEmptyStr, ...] = ()
    kind: Literal["inner", "left", "full"] = "inner"
    range: Duration | None = None
    between: tuple[SignedDuration, SignedDuration] | None = None
    rows: StrictPositiveInt | None = None
    store: Literal["auto", "ts_offset", "fields_ts_offset", "ts_fields_offset"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare ``on:`` key as the boolean true: take it as ``on``.
        if isinstance(data, Mapping) and True in data and "on" not in data:
            return {("on" if k is True else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _one_condition(self) -> Self:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        given = [n for n in ("range", "between", "rows") if getattr(self, n) is not None]
        if len(given) != 1:
            problems.append(
                (("range",), "set exactly one of join.range, join.between or join.rows")
            )
        if self.between is not None and self.between[0] > self.between[1]:
            problems.append((("between",), "the lower bound must not exceed the upper bound"))
        if self.left.name == self.right.name:
            problems.append((("right", "name"), "must differ from join.left.name"))
        if self.rows is not None and self.kind != "inner":
            problems.append((("kind",), "outer joins need a time condition (range or between)"))
        if problems:
            raise _FieldProblems(problems)
        return self

    @property
    def bounds(self) -> tuple[int, int] | None:
        """``(lo, hi)`` of ``right.ts - left.ts`` for time joins, ``None`` for rows joins."""
        if self.range is not None:
            return (0, self.range)
        if self.between is not None:
            return (self.between[0], self.between[1])
        return None


class JoinJobConfig(_Frozen):
    """The root of a join job file: ``join:`` instead of ``input``/``window``/``aggregations``."""

    job: JobName
    join: JoinConfig
    watermark: WatermarkConfig
    emit: EmitConfig
    retention: RetentionConfig
    output: OutputConfig
    state: StateConfig
    kafka: KafkaConfig
    spark: SparkConfig

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Fill absent sections and the defaults that depend on the job name."""
        return _fill_defaults(data, input_sections=())


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem of a job config: ``path`` is the dotted field path (``""``: the file)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(Exception):
    """A job config that cannot be used; ``str()`` lists every problem, one per line.

    The first line is ``invalid job config <source>:``, then ``  - <path>: <message>``
    for each entry of :attr:`problems`.
    """

    def __init__(self, source: str | None, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        header = f"invalid job config {source}:" if source else "invalid job config:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str | None, tuple[ConfigProblem, ...]]]:
        return (ConfigError, (self.source, self.problems))


_TYPE_MESSAGES = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping",
    "mapping_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "path_type": "must be a path",
}


def _dotted(loc: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in loc)


def _show(value: object) -> str:
    """A short YAML-flavoured rendering of an input value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "...'"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _strip_type(tp: Any) -> Any:
    """Drop ``Annotated`` wrappers and a ``| None``."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if get_origin(tp) in (Union, types.UnionType):
            args = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp


def _tagged_variants(tp: Any) -> dict[str, type[BaseModel]]:
    """The variants of a discriminated union of models, by their ``type`` tag."""
    if get_origin(tp) not in (Union, types.UnionType):
        return {}
    variants: dict[str, type[BaseModel]] = {}
    for arg in get_args(tp):
        if isinstance(arg, type) and issubclass(arg, BaseModel) and "type" in arg.model_fields:
            for tag in get_args(arg.model_fields["type"].annotation):
                variants[str(tag)] = arg
    return variants


def _walk(loc: Sequence[str | int]) -> tuple[tuple[str | int, ...], Any]:
    """Follow a pydantic error location through the models.

    Returns the location without discriminated-union tags (``window.hopping.size`` ->
    ``window.size``) and the type found there (``None`` when it cannot be followed).
    """
    clean: list[str | int] = []
    tp: Any = JobConfig
    for part in loc:
        tp = _strip_type(tp)
        variants = _tagged_variants(tp)
        if isinstance(part, str) and part in variants:
            tp = variants[part]
            continue
        clean.append(part)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            tp = field.annotation if field is not None else None
        elif get_origin(tp) in (tuple, list) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            tp = None
    return tuple(clean), _strip_type(tp)


def _allowed_values(tp: Any, expected: object) -> list[str]:
    if get_origin(tp) is Literal:
        return [str(arg) for arg in get_args(tp)]
    return re.findall(r"'([^']*)'", str(expected))


def _translate(error: ErrorDetails) -> list[ConfigProblem]:
    """Turn one pydantic error into problems that say what is allowed."""
    kind = error["type"]
    raw_loc = tuple(error["loc"])
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    loc, tp = _walk(raw_loc)

    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        if isinstance(cause, _FieldProblems):
            return [
                ConfigProblem(_dotted(_walk(raw_loc + sub)[0]), msg) for sub, msg in cause.problems
            ]
        return [ConfigProblem(_dotted(loc), str(cause) if cause is not None else error["msg"])]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        discriminator = str(ctx.get("discriminator", "type")).strip("'\"")
        tags = list(_tagged_variants(tp)) or _allowed_values(None, ctx.get("expected_tags"))
        path = _dotted((*loc, discriminator))
        if kind == "union_tag_not_found":
            return [ConfigProblem(path, f"required: one of {', '.join(tags)}")]
        return [
            ConfigProblem(path, f"must be one of {', '.join(tags)} (got {_show(ctx.get('tag'))})")
        ]
    if kind == "extra_forbidden":
        parent = _walk(raw_loc[:-1])[1]
        message = "unknown key"
        if isinstance(parent, type) and issubclass(parent, BaseModel):
            keys = list(parent.model_fields)
            message += f" (allowed keys: {', '.join(keys)})"
            close = difflib.get_close_matches(str(raw_loc[-1]), keys, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        return [ConfigProblem(_dotted(loc), message)]
    if kind == "missing":
        return [ConfigProblem(_dotted(loc), "required key is missing")]
    if kind == "literal_error":
        allowed = _allowed_values(tp, ctx.get("expected"))
        message = f"must be one of {', '.join(allowed)} (got {_show(value)})"
        return [ConfigProblem(_dotted(loc), message)]
    if kind in ("too_short", "string_too_short"):
        minimum = ctx.get("min_length", 1)
        message = "must not be empty" if minimum == 1 else f"must have at least {minimum} items"
        return [ConfigProblem(_dotted(loc), message)]
    if kind == "greater_than":
        return [
            ConfigProblem(
                _dotted(loc), f"must be greater than {ctx.get('gt')} (got {_show(value)})"
            )
        ]
    if kind == "greater_than_equal":
        return [
            ConfigProblem(_dotted(loc), f"must be at least {ctx.get('ge')} (got {_show(value)})")
        ]
    if kind in _TYPE_MESSAGES:
        return [ConfigProblem(_dotted(loc), f"{_TYPE_MESSAGES[kind]} (got {_show(value)})")]
    message = error["msg"]
    return [ConfigProblem(_dotted(loc), f"{message[:1].lower()}{message[1:]} (got {_show(value)})")]


def _problems(exc: ValidationError) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors():
        for problem in _translate(error):
            if problem not in problems:
                problems.append(problem)
    return problems


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key repeated in one YAML mapping (PyYAML would silently keep the last value)."""


class _JobYamlLoader(yaml.SafeLoader):
    """The safe loader, except that a key repeated in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Hashable, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports unhashable keys
            if key in seen:
                raise _DuplicateKeyError(
                    None,
                    None,
                    f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> ConfigProblem:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(exc, _DuplicateKeyError):
            return ConfigProblem("", f"{where}{exc.problem}")
        what = exc.problem or exc.context or "cannot be parsed"
        if exc.problem and exc.context:
            what += f" ({exc.context})"
        return ConfigProblem("", f"{where}YAML syntax error: {what}")
    return ConfigProblem("", f"YAML syntax error: {exc}")


def load_config(path: str | Path) -> JobConfig:
    """Read and validate the job file at ``path``.

    Relative paths inside the file (``avro_schema``) are resolved against the file's
    directory. Raises :class:`ConfigError` when the file is missing or unreadable, is not
    YAML, is not a mapping, or does not describe a valid job.
    """
    data, base_dir, source = _read_document(path)
    return parse_config(data, base_dir=base_dir, source=source)


def _read_document(path: str | Path) -> tuple[Any, Path, str]:
    source = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(source, [ConfigProblem("", f"file not found: {file}")]) from exc
    except IsADirectoryError as exc:
        raise ConfigError(source, [ConfigProblem("", "is a directory, not a YAML file")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [ConfigProblem("", f"not UTF-8 text: {exc}")]) from exc
    except OSError as exc:
        raise ConfigError(
            source, [ConfigProblem("", f"cannot read: {exc.strerror or exc}")]
        ) from exc
    try:
        data = yaml.load(text, Loader=_JobYamlLoader)  # noqa: S506  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc)]) from exc
    if data is None:
        raise ConfigError(source, [ConfigProblem("", "the file is empty: " + _expected_document())])
    return data, file.parent, source


def _expected_document() -> str:
    required = [name for name, field in JobConfig.model_fields.items() if field.is_required()]
    required = [n for n in required if n not in _OPTIONAL_SECTIONS]
    return f"expected a mapping with the keys {', '.join(required)} and optionally " + ", ".join(
        _OPTIONAL_SECTIONS
    )


def parse_any_config(
    data: Mapping[str, Any], *, base_dir: Path, source: str | None = None
) -> JobConfig | JoinJobConfig:
    """Like :func:`parse_config`, but a document with a ``join:`` section is a join job."""
    if isinstance(data, Mapping) and "join" in data:
        try:
            return JoinJobConfig.model_validate(data, context={"base_dir": Path(base_dir)})
        except ValidationError as exc:
            raise ConfigError(source, _problems(exc)) from exc
    return parse_config(data, base_dir=base_dir, source=source)


def load_any_config(path: str | Path) -> JobConfig | JoinJobConfig:
    """Like :func:`load_config`, but a file with a ``join:`` section is a join job."""
    data, base_dir, source = _read_document(path)
    return parse_any_config(data, base_dir=base_dir, source=source)


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path, source: str | None = None
) -> JobConfig:
    """Validate an already loaded job document.

    ``base_dir`` is the directory relative ``avro_schema`` paths are resolved against
    (the YAML file's directory). ``source`` names the document in error messages.
    Raises :class:`ConfigError` listing every problem.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            [ConfigProblem("", f"{_expected_document()} (got {_show(data)})")],
        )
    try:
        return JobConfig.model_validate(data, context={"base_dir": Path(base_dir)})
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc)) from exc

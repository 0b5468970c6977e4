"""The root of a join job: ``join:`` instead of ``input``, ``window`` and ``aggregations``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from window_operator.config.errors import FieldProblems, Location
from window_operator.config.fields import (
    FilePath,
    FrozenModel,
    InputModel,
    NonEmptyStr,
    StrictPositiveInt,
    TopicName,
    check_topic_name,
)
from window_operator.config.sections import JobSections
from window_operator.durations import Duration, DurationError, parse_duration_ms

__all__ = [
    "JoinConfig",
    "JoinInputConfig",
    "JoinJobConfig",
    "JoinLeftConfig",
    "JoinRightConfig",
    "SignedDuration",
]


def _signed_duration(value: object) -> object:
    sign, magnitude = 1, value
    if isinstance(value, str) and value.strip()[:1] in ("+", "-"):
        sign, magnitude = (-1 if value.strip()[0] == "-" else 1), value.strip()[1:]
    elif isinstance(value, int) and not isinstance(value, bool) and value < 0:
        sign, magnitude = -1, -value
    try:
        return sign * parse_duration_ms(magnitude)  # type: ignore[arg-type]  # bad types raise
    except DurationError as exc:
        unreadable = f"{magnitude!r} is not a duration"
        if magnitude is value or not str(exc).startswith(unreadable):
            raise  # a bound too long is told by its size
        # text that is no duration is shown as written, sign included
        raise DurationError(f"{value!r}{str(exc).removeprefix(repr(magnitude))}") from None


#: A duration that may be negative: ``-2m``, ``+5m``, ``30s``.
SignedDuration = Annotated[int, BeforeValidator(_signed_duration)]


#: Why the keys of ``input:`` that set the grouping key are unknown in ``join:`` and its
#: sides (see ``config.translate``).
_JOIN_KEY_HINTS: dict[str, str] = dict.fromkeys(
    ("key", "key_from", "key_format"),
    "a join keys both sides by the fields of join.on, read from each record's value",
)


class JoinInputConfig(InputModel):
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
    timestamp: NonEmptyStr | None = None
    timestamp_from: Literal["field", "kafka"] = "field"
    timestamp_unit: Literal["ms", "s", "us", "ns", "iso8601"] = Field(
        default="ms", validate_default=True
    )
    fields: tuple[NonEmptyStr, ...] | None = None

    section: ClassVar[str] = "join"
    #: why a key of ``input:`` is not one of a join side (see ``config.translate``)
    unknown_key_hints: ClassVar[dict[str, str]] = _JOIN_KEY_HINTS

    @model_validator(mode="after")
    def _name_is_a_topic(self) -> Self:
        """Without ``topic`` the name is the topic too: it must be a topic name."""
        if self.topic is None:
            try:
                check_topic_name(self.name)
            except ValueError as exc:
                message = f"is the topic too when {self.section}.topic is not set: {exc}"
                raise FieldProblems([(("name",), message)]) from None
        return self

    @property
    def topic_name(self) -> str:
        """The topic to read (``topic``, or ``name`` when unset)."""
        return self.topic or self.name


class JoinLeftConfig(JoinInputConfig):
    """``join.left``: a :class:`JoinInputConfig` whose problems name ``join.left``."""

    section: ClassVar[str] = "join.left"


class JoinRightConfig(JoinInputConfig):
    """``join.right``: a :class:`JoinInputConfig` whose problems name ``join.right``."""

    section: ClassVar[str] = "join.right"


class JoinConfig(FrozenModel):
    """``join:`` a windowed stream-stream join of ``left`` and ``right`` on equal fields.

    The time condition is one of: ``range`` (``RANGE d PRECEDING`` over the left
    stream: ``0 <= right.ts - left.ts <= d``), ``between: [lo, hi]`` (``lo <= right.ts -
    left.ts <= hi``, signed durations like ``-2m``), or ``rows`` (``ROWS n PRECEDING``: a
    right message joins the ``n`` most recent left messages with its join key, in
    arrival order). ``kind`` inner, left or full (outer rows are emitted once the
    watermark proves no match can come). ``store`` picks the Message Store key layout
    (``auto`` follows the Samza seed's matrix).
    """

    left: JoinLeftConfig
    right: JoinRightConfig
    on: tuple[NonEmptyStr, ...] = ()
    kind: Literal["inner", "left", "full"] = "inner"
    range: Duration | None = None
    between: tuple[SignedDuration, SignedDuration] | None = None
    rows: StrictPositiveInt | None = None
    store: Literal["auto", "ts_offset", "fields_ts_offset", "ts_fields_offset"] = "auto"

    unknown_key_hints: ClassVar[dict[str, str]] = _JOIN_KEY_HINTS

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: object) -> object:
        # YAML 1.1 reads a bare ``on:`` key as the boolean true: take it as ``on``. (The
        # job file's loader keeps such keys as their text; this serves a document a
        # library user loaded with PyYAML.)
        if isinstance(data, Mapping) and True in data and "on" not in data:
            return {("on" if k is True else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _one_condition(self) -> Self:
        problems: list[tuple[Location, str]] = []
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
        twice = sorted({f for f in self.on if self.on.count(f) > 1})
        if twice:
            problems.append((("on",), f"{', '.join(map(repr, twice))} listed twice"))
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def bounds(self) -> tuple[int, int] | None:
        """``(lo, hi)`` of ``right.ts - left.ts`` for time joins, ``None`` for rows joins."""
        if self.range is not None:
            return (0, self.range)
        if self.between is not None:
            return (self.between[0], self.between[1])
        return None


class JoinJobConfig(JobSections):
    """The root of a join job file: ``join:`` instead of ``input``/``window``/``aggregations``."""

    join: JoinConfig

    #: why a key of an aggregation job is not one of a join job
    unknown_key_hints: ClassVar[dict[str, str]] = {
        "window": "a join job has no window: join.range, join.between or join.rows bound "
        "which messages pair (to window its results, run an aggregation job over "
        "output.topic)",
        "aggregations": "a join job has no aggregations: it writes the pairs (to aggregate "
        "them, run an aggregation job over output.topic)",
        "input": "a join reads two inputs: join.left and join.right",
    }

    def input_topic_fields(self) -> list[tuple[Location, str]]:
        """Each side's topic (where it is set: its ``name`` is the topic without ``topic``)."""
        sides = (("left", self.join.left), ("right", self.join.right))
        return [
            (("join", side, "name" if cfg.topic is None else "topic"), cfg.topic_name)
            for side, cfg in sides
        ]

    def ignored_settings(self) -> list[str]:
        """The ``emit`` section, given for a join: it emits as soon as results are known."""
        return [
            *super().ignored_settings(),
            *(
                f"emit.{name} does not apply to joins (a match is written as soon as both "
                "its rows are there, a late one as it arrives)"
                for name in sorted(self.emit.model_fields_set)
            ),
        ]

    def input_models(self) -> list[tuple[str, InputModel]]:
        """The two sides."""
        return [("join.left", self.join.left), ("join.right", self.join.right)]

    @model_validator(mode="after")
    def _no_retention_size(self) -> Self:
        if self.retention.size is not None:
            message = "does not apply to joins: their messages are kept for retention.time"
            raise FieldProblems([(("retention", "size"), message)])
        return self

    @model_validator(mode="after")
    def _json_results(self) -> Self:
        # a join result carries its inputs' records, whose fields no schema fixes
        if self.output.format != "json":
            problems: list[tuple[Location, str]] = [
                (
                    ("output", "format"),
                    "a join writes its results as JSON (each carries its input records as "
                    "they are): use json, or leave it out",
                )
            ]
            raise FieldProblems(problems)
        return self

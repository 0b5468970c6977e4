"""``window:``: the window shapes, chosen by the section's ``type`` key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from window_operator.config.errors import FieldProblems
from window_operator.config.fields import (
    MAX_CONFIG_INT,
    OFF,
    FrozenModel,
    StrictPositiveInt,
    positive_duration_ms,
)
from window_operator.durations import PositiveDuration, format_duration_ms

__all__ = [
    "MAX_WINDOW_STEPS",
    "CountWindow",
    "HoppingWindow",
    "OffsetsWindow",
    "SessionWindow",
    "TumblingWindow",
    "WindowConfig",
]


#: The most steps a hopping window spans: every event falls into that many windows, and
#: every step fires one window per key (a day in steps of a second is 86,400).
MAX_WINDOW_STEPS = 1_000_000


def _check_steps(steps: int, what: str) -> None:
    if steps > MAX_WINDOW_STEPS:
        raise FieldProblems(
            [
                (
                    ("size",),
                    f"spans {steps} {what}, at most {MAX_WINDOW_STEPS:,} (every event is "
                    "in that many windows): make window.step longer",
                )
            ]
        )


class TumblingWindow(FrozenModel):
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


class HoppingWindow(FrozenModel):
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
        if self.step > self.size:
            got = f"got size {format_duration_ms(self.size)}, step {format_duration_ms(self.step)}"
            raise FieldProblems(
                [
                    (
                        ("step",),
                        f"must not be longer than window.size ({got}): step is how often a "
                        "window starts, size how long it lasts",
                    )
                ]
            )
        _check_steps(self.size // self.step, f"{format_duration_ms(self.step)} steps")
        if self.size % self.step:
            below = self.size // self.step * self.step
            hint = [format_duration_ms(s) for s in (below, below + self.step) if s > 0]
            raise FieldProblems(
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


def _session_gap(value: object) -> object:
    """``window.gap``: a positive duration; left out, null or off (YAML 1.1's false) for
    tuple sessions, which set ``max_idle_messages`` instead."""
    if value is None or value is False or value == OFF:
        return None
    return positive_duration_ms(
        value,
        otherwise="or leave gap out for tuple sessions (max_idle_messages)",
        zero_hint="a session's gap must be longer than 0",
    )


class SessionWindow(FrozenModel):
    """``window: {type: session, gap}`` or ``{type: session, max_idle_messages}``.

    Time sessions (``gap``, ms): an event's interval is ``[ts, ts + gap]``; events whose
    intervals overlap belong to one session (Jet). Tuple sessions
    (``max_idle_messages``): a key's session ends after that many messages of its
    partition without the key (Samza). Exactly one of the two is set.
    """

    type: Literal["session"] = "session"
    gap: Annotated[int | None, BeforeValidator(_session_gap)] = None
    max_idle_messages: StrictPositiveInt | None = None

    @model_validator(mode="after")
    def _one_termination_policy(self) -> Self:
        if (self.gap is None) == (self.max_idle_messages is None):
            raise FieldProblems(
                [
                    (
                        ("gap",),
                        "set exactly one of window.gap (a duration) or window.max_idle_messages",
                    )
                ]
            )
        return self


def _count_step_default(data: object) -> object:
    if isinstance(data, Mapping) and data.get("step") is None and "size" in data:
        size = data["size"]
        valid = type(size) is int and 0 < size <= MAX_CONFIG_INT
        # an invalid size is reported once, not again through the step it would give
        return {**data, "step": size if valid else 1}
    return data


class CountWindow(FrozenModel):
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
    def _default_step(cls, data: object) -> object:
        return _count_step_default(data)

    @model_validator(mode="after")
    def _size_multiple_of_step(self) -> Self:
        if self.step > self.size:
            raise FieldProblems(
                [
                    (
                        ("step",),
                        f"must not be larger than window.size ({self.step} vs {self.size}): "
                        "step is how often a window starts, size how many it holds",
                    )
                ]
            )
        _check_steps(self.size // self.step, f"steps of {self.step}")
        if self.size % self.step:
            raise FieldProblems(
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

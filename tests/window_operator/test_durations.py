"""Durations: parsing, formatting and the pydantic duration types."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from window_operator.durations import (
    MAX_DURATION_MS,
    Duration,
    DurationError,
    PositiveDuration,
    format_duration_ms,
    parse_duration_ms,
)
from window_operator.errors import show


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (0, 0),
        (250, 250),
        (1500.0, 1500),
        ("0s", 0),
        ("250", 250),
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        ("1h30m", 5_400_000),
        ("1h 30m", 5_400_000),
        (" 1m 30s ", 90_000),
        ("5 s", 5_000),
        ("1.5s", 1_500),
        (".5s", 500),
        ("0.25m", 15_000),
        ("1d2h3m4s5ms", 93_784_005),
        ("1s500ms", 1_500),
    ],
)
def test_parse_duration(text: int | float | str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("5x", "use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d"),
        ("", "use a number with a unit"),
        ("s", "use a number with a unit"),
        ("1h30", "use a number with a unit"),
        ("1 h x", "use a number with a unit"),
        ("5S", "use a number with a unit"),
        ("-5s", "cannot be negative"),
        (-1, "cannot be negative"),
        ("0.5ms", "not a whole number of milliseconds"),
        (1.5, "not a whole number of milliseconds"),
        (float("inf"), "use a number with a unit"),
        (True, "use a number with a unit"),
        ([1], "use a number with a unit"),
        (f"{MAX_DURATION_MS + 1}ms", "too long"),
        # before: read as 5 s and 5 ms (\d took any script's digits)
        ("\uff15s", "use a number with a unit"),
        ("\u0665", "use a number with a unit"),
        ("1h1h", "it gives h twice"),  # before: 2h
        ("1s 2m 3s", "it gives s twice"),
    ],
)
def test_parse_duration_rejects(value: Any, reason: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration_ms(value)
    assert reason in str(info.value)
    # the value as YAML writes it (``true``, ``a list``), where Python's spelling was shown
    assert str(info.value).startswith(show(value))
    assert isinstance(info.value, ValueError)


def test_duration_error_message_is_exact() -> None:
    with pytest.raises(DurationError) as info:
        parse_duration_ms("5x")
    assert str(info.value) == (
        "'5x' is not a duration: use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d"
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (1, "1ms"),
        (250, "250ms"),
        (1_000, "1s"),
        (1_500, "1s500ms"),
        (60_000, "1m"),
        (90_000, "1m30s"),
        (3_600_000, "1h"),
        (5_400_000, "1h30m"),
        (86_400_000, "1d"),
        (86_400_001, "1d1ms"),
        (93_784_005, "1d2h3m4s5ms"),
    ],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text


@pytest.mark.parametrize("bad", [-1, True, 1.0])
def test_format_duration_rejects_non_durations(bad: Any) -> None:
    with pytest.raises(ValueError, match="non-negative int of milliseconds"):
        format_duration_ms(bad)


@given(st.integers(min_value=0, max_value=MAX_DURATION_MS))
def test_format_then_parse_round_trips(ms: int) -> None:
    text = format_duration_ms(ms)
    assert parse_duration_ms(text) == ms
    # Greedy decomposition: each unit appears at most once, largest first.
    assert format_duration_ms(parse_duration_ms(text)) == text


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["ms", "s", "m", "h", "d"])),
        min_size=1,
        max_size=5,
        unique_by=lambda part: part[1],  # each unit once, in any order
    )
)
def test_parse_sums_parts(parts: list[tuple[int, str]]) -> None:
    unit_ms = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    text = " ".join(f"{n}{unit}" for n, unit in parts)
    assert parse_duration_ms(text) == sum(n * unit_ms[unit] for n, unit in parts)


class _Durations(BaseModel):
    any: Duration = 0
    positive: PositiveDuration = 1


def test_pydantic_duration_types() -> None:
    model = _Durations.model_validate({"any": "0s", "positive": "1m"})
    assert (model.any, model.positive) == (0, 60_000)
    with pytest.raises(ValidationError, match="is not a positive duration"):
        _Durations.model_validate({"positive": "0s"})
    with pytest.raises(ValidationError, match="'5x' is not a duration"):
        _Durations.model_validate({"any": "5x"})
    with pytest.raises(ValidationError, match="is not a duration"):
        _Durations.model_validate({"any": None})

"""Durations in job configs: ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h30m"`` <-> milliseconds.

Every duration in the package is an ``int`` number of milliseconds. In YAML a duration is
written either as a non-negative integer (milliseconds) or as a string of one or more
``<number><unit>`` parts, units ``ms``, ``s``, ``m``, ``h`` and ``d`` (whitespace allowed
between parts, fractions allowed as long as the total is a whole number of milliseconds):
``"1.5s"`` is 1500, ``"1h 30m"`` is 5400000. A string of digits alone is milliseconds too.

:data:`Duration` and :data:`PositiveDuration` are pydantic field types that accept those
forms and store the milliseconds.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated

from pydantic import BeforeValidator

from window_operator.errors import WindowOperatorError, show

__all__ = [
    "MAX_DURATION_MS",
    "Duration",
    "DurationError",
    "PositiveDuration",
    "format_duration_ms",
    "parse_duration_ms",
]

#: The largest duration accepted (and the largest count or size a job sets): durations
#: are added to int64 epoch-millisecond event times, whose ends of time are +-2**62, so a
#: few of them added must not overflow. 2**53 ms is about 285,000 years.
MAX_DURATION_MS = 2**53

_HINT = "use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d"

# Largest unit first: format_duration_ms decomposes greedily in this order.
_UNITS_MS: dict[str, int] = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}

# "ms" must be tried before "m" (the regex alternation takes the first match). ASCII:
# \d would take any script's digits ("５s" was 5 s).
_PART = re.compile(r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h|d)\s*", re.ASCII)
_DIGITS = re.compile(r"\s*\d+\s*", re.ASCII)


class DurationError(WindowOperatorError, ValueError):
    """A value that is not a valid duration; the message says which forms are accepted."""


def parse_duration_ms(value: int | float | str) -> int:
    """Return the duration ``value`` in whole milliseconds.

    ``value`` is a non-negative integer of milliseconds (a float is accepted when it is
    integral), or a string such as ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h30m"``,
    ``"1.5s"`` or ``"2d"``. Raises :class:`DurationError` for anything else, for
    negative durations and for fractions of a millisecond.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"{show(value)} is not a duration: {_HINT}")
    if isinstance(value, int):
        return _checked(value, value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DurationError(f"{show(value)} is not a duration: {_HINT}")
        return _checked(value, Fraction(value))
    if _DIGITS.fullmatch(value):
        return _checked(value, int(value))
    return _checked(value, _parse_parts(value))


def _parse_parts(text: str) -> Fraction:
    total = Fraction(0)
    pos = 0
    seen: set[str] = set()
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            break
        if match["unit"] in seen:  # "1h1h": a slip, most likely
            raise DurationError(f"{text!r} is not a duration: it gives {match['unit']} twice")
        seen.add(match["unit"])
        total += Fraction(match["number"]) * _UNITS_MS[match["unit"]]
        pos = match.end()
    if pos == 0 or pos != len(text):
        if text.strip().startswith("-"):
            raise DurationError(f"{text!r} is not a duration: durations cannot be negative")
        raise DurationError(f"{text!r} is not a duration: {_HINT}")
    return total


def _checked(original: object, ms: int | Fraction) -> int:
    if ms < 0:
        raise DurationError(f"{original!r} is not a duration: durations cannot be negative")
    if isinstance(ms, Fraction):
        if ms.denominator != 1:
            raise DurationError(
                f"{original!r} is not a duration: it is not a whole number of milliseconds"
            )
        ms = ms.numerator
    if ms > MAX_DURATION_MS:
        most = f"at most {MAX_DURATION_MS}ms"
        raise DurationError(f"{_short(original)} is too long a duration ({most})")
    return ms


def _short(value: object) -> str:
    """``repr(value)``, its middle left out when long (a number of many digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-6:]} ({len(text)} characters)"


def format_duration_ms(ms: int) -> str:
    """Render ``ms`` milliseconds in the largest units that represent it exactly.

    Units are taken greedily from days down to milliseconds and zero parts are left
    out: 60000 -> ``"1m"``, 90000 -> ``"1m30s"``, 250 -> ``"250ms"``, 0 -> ``"0s"``.
    :func:`parse_duration_ms` reads the result back to ``ms``.
    """
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValueError(f"a duration is a non-negative int of milliseconds (got {ms!r})")
    if ms == 0:
        return "0s"
    parts: list[str] = []
    rest = ms
    for unit, unit_ms in _UNITS_MS.items():
        count, rest = divmod(rest, unit_ms)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _duration(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"{show(value)} is not a duration: {_HINT}")
    return parse_duration_ms(value)


def _positive_duration(value: object) -> int:
    ms = _duration(value)
    if ms == 0:
        raise DurationError(f"{value!r} is not a positive duration: it must be longer than 0")
    return ms


#: A pydantic field type: a non-negative duration stored as int milliseconds.
Duration = Annotated[int, BeforeValidator(_duration)]

#: A pydantic field type: a duration greater than zero, stored as int milliseconds.
PositiveDuration = Annotated[int, BeforeValidator(_positive_duration)]

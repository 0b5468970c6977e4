"""Event times from numbers in a unit (``s``, ``ms``, ``us``, ``ns``), in whole ms.

A fractional number counts as the decimal it was written as, floored to the
millisecond: ``1.001`` s is 1001 ms although the double nearest to 1.001 is a little
below it, and ``-0.5`` ms is -1 ms. The decimal is the shortest one that reads back as
the same double (what JSON writers print); multiplying the double instead would land
one millisecond early whenever the product rounds just below a whole number.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal
from typing import Literal

import numpy as np

from window_operator.arrays import FloatArray

__all__ = ["NumericUnit", "floats_to_ms", "iso_ms", "number_to_ms"]

NumericUnit = Literal["ms", "s", "us", "ns"]

#: The power of ten that turns a number of the unit into milliseconds.
_EXPONENT: dict[str, int] = {"ms": 0, "s": 3, "us": -3, "ns": -6}
_POWERS = {0: 1, 3: 1_000, 6: 1_000_000}
#: A product this many units in the last place from a whole number is decided exactly.
_NEAR_ULPS = 4


def number_to_ms(raw: int | float, unit: NumericUnit) -> int:
    """``raw`` (a finite number of ``unit``) in whole milliseconds, floored."""
    exp = _EXPONENT[unit]
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, int):
        scale = _POWERS[abs(exp)]
        return raw * scale if exp >= 0 else raw // scale
    if exp == 0:
        return math.floor(raw)
    y = raw * 10.0**exp if exp > 0 else raw / 10.0**-exp
    floor = math.floor(y)
    near = _NEAR_ULPS * math.ulp(y)
    if y - floor > near and floor + 1 - y > near:
        return floor
    exact = Decimal(repr(raw)).scaleb(exp).to_integral_value(rounding=ROUND_FLOOR)
    return int(exact)


def floats_to_ms(values: FloatArray, unit: Literal["ms", "s"]) -> FloatArray:
    """:func:`number_to_ms` of finite doubles whose results stay within 2^53 ms, as
    whole-number doubles (the few products near a whole number are decided one by one)."""
    if unit == "ms":
        out: FloatArray = np.floor(values)
        return out
    y = values * 1000.0
    out = np.floor(y)
    near = _NEAR_ULPS * np.spacing(np.abs(y))
    doubt = ((y - out <= near) | (out + 1 - y <= near)) & (values != np.floor(values))
    for i in np.flatnonzero(doubt).tolist():
        out[i] = number_to_ms(float(values[i]), "s")
    return out


def iso_ms(ms: int) -> str:
    """Epoch ``ms`` as an ISO-8601 UTC time, for messages (beyond what a date holds: said)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return "past the year 9999" if ms > 0 else "before the year 1"

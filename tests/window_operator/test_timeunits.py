"""Event times from numbers of a unit: the decimal as written, floored to the ms."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

import numpy as np
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from window_operator.codecs import ColumnarJsonDecoder
from window_operator.events import RecordDecoder
from window_operator.rejections import RecordRejected
from window_operator.timeunits import NumericUnit, floats_to_ms, number_to_ms

EXPONENT = {"ms": 0, "s": 3, "us": -3, "ns": -6}


def oracle(text: str, unit: NumericUnit) -> int:
    """Milliseconds of the decimal ``text``, floored, in exact arithmetic."""
    exact = Decimal(text).scaleb(EXPONENT[unit]).to_integral_value(rounding=ROUND_FLOOR)
    return int(exact)


units = st.sampled_from(["ms", "s", "us", "ns"])
#: Decimals as a JSON writer prints them: up to 15 significant digits, so that the
#: shortest repr of their double is the same decimal.
decimals = st.builds(
    lambda units_, digits, scale: (
        f"{Decimal(units_).scaleb(-digits):.{digits}f}" if scale else str(units_)
    ),
    st.integers(-(10**15) + 1, 10**15 - 1),
    st.integers(0, 9),
    st.booleans(),
)


@given(decimals, units)
@example("1.001", "s")
@example("1.005", "s")
@example("-17033838.363", "s")
@example("2305843009213.693", "s")
@example("-0.5", "ms")
@example("1000999.9999", "us")
def test_a_number_counts_as_the_decimal_it_was_written_as(text: str, unit: NumericUnit) -> None:
    value = float(text)
    if Decimal(repr(value)) != Decimal(text):
        return  # more digits than a double keeps: not the decimal its double stands for
    assert number_to_ms(value, unit) == oracle(text, unit)
    if "." not in text:
        assert number_to_ms(int(text), unit) == oracle(text, unit)


@given(st.lists(decimals, min_size=1, max_size=50), st.sampled_from(["ms", "s"]))
def test_the_column_conversion_equals_the_one_by_one(texts: list[str], unit: str) -> None:
    values = np.array([float(t) for t in texts])
    ms = values * (1000.0 if unit == "s" else 1.0)
    if np.abs(ms).max() >= 2**53:
        return
    got = floats_to_ms(values, "s" if unit == "s" else "ms")
    assert got.tolist() == [float(number_to_ms(float(t), unit)) for t in texts]  # type: ignore[arg-type]


def test_fractional_seconds_are_not_a_millisecond_early_on_either_decode_path() -> None:
    decoder = RecordDecoder(key_field="k", timestamp_field="ts", timestamp_unit="s")
    stamps = [1.001, 1.003, 1.005, -17033838.363, 1700000000.123, 2.5]
    want = [1001, 1003, 1005, -17033838363, 1700000000123, 2500]
    payloads = [orjson.dumps({"k": "a", "ts": t}) for t in stamps]
    exact = decoder.decode_records([orjson.loads(p) for p in payloads])
    assert exact.batch.ts.tolist() == want
    fast = ColumnarJsonDecoder(decoder).decode(payloads)
    assert fast is not None
    assert fast.ts.tolist() == want


def test_iso8601_times_need_a_zone_and_take_either_z() -> None:
    decoder = RecordDecoder(key_field=None, timestamp_field="ts", timestamp_unit="iso8601")
    t0 = 1_700_000_000_000
    assert decoder.timestamp_ms("2023-11-14T22:13:20Z") == t0
    assert decoder.timestamp_ms("2023-11-14t22:13:20.123z") == t0 + 123
    assert decoder.timestamp_ms("2023-11-14T23:13:20.0005+01:00") == t0
    with pytest.raises(RecordRejected, match="has no time zone"):
        decoder.timestamp_ms("2023-11-14T22:13:20")
    with pytest.raises(RecordRejected, match="is a date without a time of day"):
        decoder.timestamp_ms("2023-11-14Z")
    assert decoder.timestamp_ms("0001-01-01T00:00:00.001Z") == -62_135_596_799_999
    with pytest.raises(RecordRejected, match="not an ISO-8601 time"):
        decoder.timestamp_ms("14/11/2023 22:13")

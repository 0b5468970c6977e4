"""The record decoder's grouping key: one field, several, or none."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from window_operator.events import RecordDecoder
from window_operator.rejections import RecordRejected
from window_operator.results import ErrorCode

ONE = RecordDecoder(key_field="k", timestamp_field="ts")
TWO = RecordDecoder(key_field=("country", "year"), timestamp_field="ts")

key_value = st.one_of(
    st.text(max_size=6),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


def text_of(value: Any) -> str:
    """A key field's text, as one key field makes it (the README's rules)."""
    return ONE.key_of({"k": value})


@given(key_value, key_value)
def test_several_key_fields_make_the_json_array_of_their_texts(a: Any, b: Any) -> None:
    """Each field reads as it would alone; the array keeps them apart, whatever they hold
    (commas, quotes): two keys are equal exactly when every field's text is."""
    key = TWO.key_of({"country": a, "year": b, "ts": 1})
    assert orjson.loads(key) == [text_of(a), text_of(b)]
    assert key == orjson.dumps([text_of(a), text_of(b)]).decode()


def test_a_key_field_and_its_order_make_the_key() -> None:
    assert TWO.key_of({"country": "US", "year": 2024}) == '["US","2024"]'
    assert TWO.key_of({"country": "US", "year": "2024"}) == '["US","2024"]'  # as one field
    assert TWO.key_of({"country": "a,b", "year": "c"}) != TWO.key_of(
        {"country": "a", "year": "b,c"}
    )
    assert RecordDecoder(key_field=None, timestamp_field="ts").key_of({"k": 1}) == ""


@pytest.mark.parametrize(
    ("record", "code", "reason"),
    [
        ({"year": 1}, ErrorCode.MISSING_KEY, "missing key field 'country'"),
        ({"country": "US", "year": None}, ErrorCode.MISSING_KEY, "key field 'year' is null"),
        ({"country": [1], "year": 1}, ErrorCode.BAD_KEY, "key field 'country' must be a string"),
        ({"country": "US", "year": float("inf")}, ErrorCode.BAD_KEY, "key field 'year' is inf"),
        ({"country": "\ud800", "year": 1}, ErrorCode.BAD_KEY, "'country' is not valid Unicode"),
        ({"country": "x" * 2000, "year": "y" * 2100}, ErrorCode.BAD_KEY,
         "key fields 'country', 'year' make a key of 4107 bytes; the limit is 4096"),
    ],
)  # fmt: skip
def test_each_key_field_is_judged_by_name(
    record: dict[str, Any], code: ErrorCode, reason: str
) -> None:
    with pytest.raises(RecordRejected) as caught:
        TWO.key_of(record)
    assert caught.value.code is code and reason in caught.value.reason


def test_key_or_none_is_the_key_or_none_for_what_the_job_rejects() -> None:
    assert TWO.key_or_none({"country": "US", "year": 2024}) == '["US","2024"]'
    assert TWO.key_or_none({"country": "US"}) is None  # MISSING_KEY
    assert TWO.key_or_none([1, 2]) is None  # not an object


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("1700000000000", "a number written as text is not read: write it as a JSON number"),
        ("2023-11-14T22:13:20Z", "for ISO-8601 times, set the job's timestamp_unit: iso8601"),
        ("soon", ""),
    ],
)
def test_a_time_written_as_text_in_a_job_that_reads_numbers_says_what_it_needs(
    raw: str, hint: str
) -> None:
    decoder = RecordDecoder(key_field="k", timestamp_field="ts")
    with pytest.raises(RecordRejected) as caught:
        decoder.time_of({"k": "a", "ts": raw})
    assert caught.value.code is ErrorCode.BAD_TIMESTAMP
    reason = caught.value.reason
    assert reason.startswith(f"timestamp field 'ts' must be a number (ms), got string \"{raw}\"")
    assert reason.endswith(f" ({hint})" if hint else f'"{raw}"')

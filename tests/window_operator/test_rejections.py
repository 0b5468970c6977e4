"""How a rejection's reason shows a value, and the raw bytes of a rejected record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from window_operator.rejections import MISSING, raw_of, show


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "null"),
        (True, "boolean true"),
        ("é", 'string "é"'),
        ([1, {"a": float("nan")}], 'array [1,{"a":NaN}]'),  # orjson wrote null there
        ({"x": float("-inf")}, 'object {"x":-Infinity}'),
        ("\ud800x", 'string "\\ud800x"'),  # escaped: the reason must encode as UTF-8
        (10**30, "int 1000000000000000000000000000000"),
        (10**5000, "int ..."),  # more digits than Python converts
        ("x" * 100, 'string "' + "x" * 56 + "..."),
        (MISSING, "missing"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_show(value: object, shown: str) -> None:
    assert show(value) == shown
    show(value).encode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda children: (
        st.lists(children, max_size=40) | st.dictionaries(st.text(max_size=30), children)
    ),
    max_leaves=200,
)


def whole_then_cut(value: Any) -> str:
    """What a reason showed when the whole value was written out first."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


@given(JSON_VALUES.filter(lambda v: isinstance(v, str | list | dict)))
def test_a_value_shows_as_if_written_out_whole(value: Any) -> None:
    assert show(value).split(" ", 1)[1] == whole_then_cut(value)


def test_a_large_value_is_not_written_out_to_be_cut() -> None:
    """Only what the reason shows is written out: what lies past it is never read (an
    object JSON cannot write there, nesting past the recursion limit)."""
    assert show([1] * 100 + [object()]) == "array [" + "1," * 28 + "..."
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert show(deep) == "array " + "[" * 57 + "..."
    # a lone surrogate past what is shown does not escape what is shown (it did: the
    # whole text had to encode as UTF-8); one that is shown still does
    assert show("é" + "x" * 100 + "\ud800") == 'string "é' + "x" * 55 + "..."
    assert show("é\ud800") == 'string "\\u00e9\\ud800"'
    big = {"rows": [{"id": i, "name": "x" * 100} for i in range(200_000)]}
    assert show(big) == "object " + whole_then_cut({"rows": big["rows"][:2]})


def test_raw_of_is_json_when_it_can_be() -> None:
    assert raw_of({"a": 1}) == b'{"a":1}'
    assert raw_of({1: "not a JSON key"}) == b"{1: 'not a JSON key'}"
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert raw_of(deep) == b"<a list nested too deeply to show>"

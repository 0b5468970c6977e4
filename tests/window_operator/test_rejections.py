"""How a rejection's reason shows a value, and the raw bytes of a rejected record."""

from __future__ import annotations

import pytest

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


def test_raw_of_is_json_when_it_can_be() -> None:
    assert raw_of({"a": 1}) == b'{"a":1}'
    assert raw_of({1: "not a JSON key"}) == b"{1: 'not a JSON key'}"
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert raw_of(deep) == b"<a list nested too deeply to show>"

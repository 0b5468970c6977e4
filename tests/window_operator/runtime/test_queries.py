"""The query helpers of ``inspect``: join keys given on the command line."""

from __future__ import annotations

import pytest

from window_operator.runtime.queries import parse_join_key


@pytest.mark.parametrize(
    ("text", "fields", "expected"),
    [
        ("3", 1, 3),
        ('"a"', 1, "a"),
        ("plain text", 1, "plain text"),
        ('[1, "x"]', 2, (1, "x")),
        ("[1, 2]", 1, "[1, 2]"),  # a list is a key of several fields only
        ("1.5", 1, "1.5"),
        ("true", 1, "true"),
        ("null", 1, "null"),
        ('{"a": 1}', 1, '{"a": 1}'),
    ],
)
def test_a_join_key_is_json_of_the_key_type_or_else_the_text(
    text: str, fields: int, expected: object
) -> None:
    key = parse_join_key(text, fields)
    assert key == expected
    assert type(key) is type(expected)

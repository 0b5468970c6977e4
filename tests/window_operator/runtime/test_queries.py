"""The query helpers of ``inspect``: join keys given on the command line."""

from __future__ import annotations

import pytest

from window_operator.runtime.queries import parse_join_key


@pytest.mark.parametrize(
    ("text", "on", "expected"),
    [
        ("3", ["id"], 3),
        ('"a"', ["id"], "a"),
        ("plain text", ["id"], "plain text"),
        ('[1, "x"]', ["id", "n"], (1, "x")),
        ("[1, 2]", ["id"], "[1, 2]"),  # a list of another length is text
        ("1.5", ["id"], "1.5"),
        ("true", ["id"], "true"),
        ("null", ["id"], "null"),
        ('{"a": 1}', ["id"], '{"a": 1}'),  # an object of other fields is text
        # as inspect prints a key, and as read prints a result's
        ("[3]", ["id"], 3),
        ('{"id": 3}', ["id"], 3),
        ('{"n": "x", "id": 1}', ["id", "n"], (1, "x")),
        ('[["a"]]', ["id"], '[["a"]]'),
        # a cross join (no on fields): its one key, as inspect prints it (it raised)
        ("[]", [], ()),
        ("{}", [], ()),
    ],
)
def test_a_join_key_is_json_of_the_key_type_or_else_the_text(
    text: str, on: list[str], expected: object
) -> None:
    key = parse_join_key(text, on)
    assert key == expected
    assert type(key) is type(expected)

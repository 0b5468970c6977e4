"""Compact JSON bytes: the same text as orjson, at the memory cost of its size."""

from __future__ import annotations

import tracemalloc

import orjson

from window_operator.jsonbytes import json_bytes


def test_the_text_is_orjsons() -> None:
    value = {"b": [0.5, None, "é"], "a": 1}
    assert json_bytes(value) == orjson.dumps(value)
    assert json_bytes(value, orjson.OPT_SORT_KEYS) == orjson.dumps(
        value, option=orjson.OPT_SORT_KEYS
    )


def test_ten_thousand_short_values_hold_their_size_not_4_kib_each() -> None:
    tracemalloc.start()
    try:
        kept = [json_bytes([0.5]) for _ in range(10_000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 10_000
    assert held < 2_000_000  # orjson's own results: about 40 MB

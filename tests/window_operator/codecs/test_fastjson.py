"""The columnar JSON path decodes exactly like the per-record decoder, or declines."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from window_operator.codecs.fastjson import ColumnarJsonDecoder, _values
from window_operator.events import RecordDecoder

DECODER = RecordDecoder(key_field="k", timestamp_field="ts", numeric_fields=["v"])

clean_event = st.fixed_dictionaries(
    {
        "k": st.one_of(st.text(max_size=8), st.integers(-(10**6), 10**6)),
        "ts": st.one_of(st.integers(-(2**40), 2**40), st.floats(-1e12, 1e12)),
        "v": st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6)),
    },
    optional={"extra": st.lists(st.integers(-(2**62), 2**62), max_size=2)},
)
dirty_event: Any = st.one_of(
    clean_event,
    st.fixed_dictionaries({"k": st.none(), "ts": st.integers(0, 10**6), "v": st.just(1)}),
    st.fixed_dictionaries({"k": st.just("a"), "ts": st.text(max_size=3), "v": st.just(1)}),
    st.fixed_dictionaries({"k": st.just("a"), "ts": st.integers(0, 10**6), "v": st.none()}),
    st.fixed_dictionaries({"k": st.just("a"), "ts": st.integers(0, 10**6)}),
    st.fixed_dictionaries({"k": st.just("a"), "ts": st.integers(0, 10**6), "v": st.text()}),
    st.fixed_dictionaries({"k": st.booleans(), "ts": st.integers(0, 10**6), "v": st.just(1)}),
    st.lists(st.integers(-(2**62), 2**62), max_size=2),
)


def lines_of(events: list[Any]) -> list[bytes]:
    return [orjson.dumps(e) for e in events]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(clean_event, dirty_event), min_size=1, max_size=30))
def test_fast_path_equals_the_exact_path_or_declines(events: list[Any]) -> None:
    lines = lines_of(events)
    fast = ColumnarJsonDecoder(DECODER, absent_fields=("partition",)).decode(lines)
    exact = DECODER.decode_records([orjson.loads(line) for line in lines])
    if fast is None:
        return
    assert exact.errors == []  # the fast path only accepts chunks with nothing to reject
    assert fast.keys == exact.batch.keys
    assert fast.ts.tolist() == exact.batch.ts.tolist()
    np.testing.assert_array_equal(fast.numeric["v"], exact.batch.numeric["v"])


@settings(max_examples=50, deadline=None)
@given(st.lists(clean_event, min_size=1, max_size=30))
def test_clean_chunks_take_the_fast_path(events: list[Any]) -> None:
    # keys all strings or all ints (one Arrow type per chunk)
    for e in events:
        e["k"] = str(e["k"])
    assert ColumnarJsonDecoder(DECODER).decode(lines_of(events)) is not None


def test_declines_broken_json_and_meta_fields() -> None:
    dec = ColumnarJsonDecoder(DECODER, absent_fields=("partition",))
    assert dec.decode([b'{"k":"a","ts":1,"v":1}', b'{"k":"a","ts":']) is None
    assert dec.decode([b'{"k":"a","ts":1,"v":1,"partition":2}']) is None
    assert dec.decode([b'{"k":"a","ts":1,"v":1}']) is not None


def test_columns_are_read_from_every_chunk_at_their_offset() -> None:
    ints = pa.chunked_array([[1, 2, 3], [4, 5], []], pa.int64())
    assert _values(ints.slice(1, 3)).tolist() == [2, 3, 4]
    assert _values(ints).tolist() == ints.to_numpy().tolist()
    floats = pa.chunked_array([[0.5], [-1.25, 3.0]], pa.float64())
    np.testing.assert_array_equal(_values(floats), floats.to_numpy())
    assert _values(pa.chunked_array([], pa.float64())).tolist() == []


COMPOSITE = RecordDecoder(key_field=("c", "k"), timestamp_field="ts", numeric_fields=["v"])
key_value = st.one_of(st.text(max_size=6, alphabet='ab"\\,[é'), st.integers(-(10**6), 10**6))
composite_event: Any = st.one_of(
    st.fixed_dictionaries(
        {"c": key_value, "k": key_value, "ts": st.integers(0, 10**6), "v": st.integers(-5, 5)}
    ),  # fmt: skip
    st.fixed_dictionaries({"c": st.none(), "k": key_value, "ts": st.just(1), "v": st.just(1)}),
    st.fixed_dictionaries({"k": key_value, "ts": st.just(1), "v": st.just(1)}),
    st.fixed_dictionaries({"c": st.booleans(), "k": key_value, "ts": st.just(1), "v": st.just(1)}),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(composite_event, min_size=1, max_size=20))
def test_composite_keys_fast_path_equals_the_exact_path_or_declines(events: list[Any]) -> None:
    lines = lines_of(events)
    fast = ColumnarJsonDecoder(COMPOSITE).decode(lines)
    exact = COMPOSITE.decode_records([orjson.loads(line) for line in lines])
    if fast is None:
        return
    assert exact.errors == []
    assert fast.keys == exact.batch.keys
    assert all(
        orjson.loads(k) == [str(e["c"]), str(e["k"])]
        for k, e in zip(fast.keys, events, strict=True)
    )


def test_composite_keys_of_strings_and_integers_take_the_fast_path() -> None:
    lines = [b'{"c":"US","k":7,"ts":1,"v":1}', b'{"c":"DE","k":2024,"ts":2,"v":1}']
    batch = ColumnarJsonDecoder(COMPOSITE).decode(lines)
    assert batch is not None and batch.keys == ['["US","7"]', '["DE","2024"]']


def test_a_key_field_read_as_a_value_or_the_time_too_is_left_to_the_exact_path() -> None:
    """One field cannot be two Arrow columns: such a job decodes record by record."""
    as_value = RecordDecoder(key_field="v", timestamp_field="ts", numeric_fields=["v"])
    as_time = RecordDecoder(key_field=("c", "ts"), timestamp_field="ts")
    assert not ColumnarJsonDecoder(as_value).enabled
    assert not ColumnarJsonDecoder(as_time).enabled
    assert not ColumnarJsonDecoder(DECODER, absent_fields=("k",)).enabled
    assert ColumnarJsonDecoder(DECODER, absent_fields=("partition",)).enabled

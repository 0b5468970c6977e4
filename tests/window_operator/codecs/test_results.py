"""Result encoders and decoders (JSON, Avro derived or user schema) and result keys."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import orjson
import pytest
from codeckit import SMALL_JOB, small_config, write_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from window_operator.codecs import (
    AvroResultDecoder,
    AvroResultEncoder,
    AvroSchemaError,
    JsonResultEncoder,
    decode_result_key,
    decode_result_value,
    derive_result_schema,
    result_decoder_for,
    result_encoder_for,
    result_key,
)
from window_operator.codecs.result_json import dumps_json
from window_operator.config import JobConfig, parse_config
from window_operator.job import build_runtime
from window_operator.policies import END_OF_TIME
from window_operator.results import Kind, ResultBatch
from window_operator.timewindows import WindowedAggregator

# The user-defined op of the all-ops job is imported by dotted path ("udf_example:...");
OpenAgg = Callable[..., WindowedAggregator]


# ---------------------------------------------------------------------------------------
# Output: window results
# ---------------------------------------------------------------------------------------

ALL_OPS: list[dict[str, Any]] = [
    {"name": "n", "op": "count"},
    {"name": "n_v", "op": "count", "field": "v"},
    {"name": "total", "op": "sum", "field": "v"},
    {"name": "avg", "op": "mean", "field": "v"},
    {"name": "lo", "op": "min", "field": "v"},
    {"name": "hi", "op": "max", "field": "v"},
    {"name": "var", "op": "variance", "field": "v"},
    {"name": "sd", "op": "stddev", "field": "v"},
    {"name": "med", "op": "median", "field": "v"},
    {"name": "p90", "op": "percentile", "field": "v", "params": {"q": 0.9}},
    {"name": "pcts", "op": "percentile", "field": "v", "params": {"q": [0.5, 0.99]}},
    {"name": "trend", "op": "linreg", "field": "v"},
    {"name": "trend_x", "op": "linreg", "field": "v", "params": {"x": "x"}},
    {"name": "pages", "op": "count_distinct", "field": "page"},
    {"name": "first_tag", "op": "first", "field": "tag"},
    {"name": "last_tag", "op": "last", "field": "tag"},
    {"name": "tags", "op": "collect", "field": "tag"},
    {"name": "product", "op": "udf_example:ProductOp", "field": "w"},
]


def all_ops_config(tmp_path: Path, **output: Any) -> JobConfig:
    return parse_config(
        {
            "job": "all-ops",
            "input": {"key": "k", "timestamp": "ts"},
            "window": {"type": "tumbling", "size": "10s"},
            "aggregations": ALL_OPS,
            "output": output or None,
        },
        base_dir=tmp_path,
    )


def all_ops_results(open_agg: OpenAgg, config: JobConfig) -> list[ResultBatch]:
    """Real result batches of the all-ops job (values from the operations' finish)."""
    agg = open_agg(build_runtime(config))
    events = [
        {"k": "a", "ts": 1_000, "v": 2.0, "x": 1.0, "page": "/p", "tag": {"t": 1}, "w": 2},
        {"k": "a", "ts": 2_000, "v": 4.5, "x": 2.0, "page": "/q", "tag": "two", "w": 3},
        {"k": "a", "ts": 3_000, "v": None, "x": 3.0, "page": "/p", "tag": None, "w": 0.5},
        {"k": "a", "ts": 4_000, "v": 7.25, "x": 4.5, "page": 3, "tag": [1, "x"], "w": 1},
        {"k": "b", "ts": 5_000, "v": None, "x": None, "page": None, "tag": None, "w": 1},
        {"k": "a", "ts": 12_000, "v": 1.0, "x": 0.0, "page": "/p", "tag": True, "w": 4},
    ]
    agg.add_batch(events)
    agg.timeout(END_OF_TIME)
    batches = agg.take_result_batches()
    assert sum(len(b) for b in batches) == 3
    return batches


def test_derived_schema_types_every_op() -> None:
    config = parse_config(
        {
            "job": "all-ops",
            "input": {"key": "k", "timestamp": "ts"},
            "window": {"type": "tumbling", "size": "10s"},
            "aggregations": ALL_OPS,
        },
        base_dir=Path("."),
    )
    schema = derive_result_schema(config.aggregations, job=config.job)
    top = {f["name"]: f["type"] for f in schema["fields"]}
    assert schema["name"] == "WindowResult"
    assert list(top) == ["key", "window_start", "window_end", "kind", "update_seq", "values"]
    assert top["window_start"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert top["kind"]["symbols"] == ["EARLY", "ON_TIME", "LATE", "RETRACT"]
    values = {f["name"]: f["type"] for f in top["values"]["fields"]}
    assert list(values) == [a["name"] for a in ALL_OPS]
    nullable_double = ["null", "double"]
    json_text = ["null", "string"]
    assert values["n"] == values["n_v"] == values["pages"] == "long"
    for name in ("total", "avg", "lo", "hi", "var", "sd", "med", "p90"):
        assert values[name] == nullable_double, name
    assert values["pcts"] == ["null", {"type": "map", "values": "double"}]
    assert values["trend"][1]["name"] == "LinearFit"
    assert [f["name"] for f in values["trend"][1]["fields"]] == ["slope", "intercept"]
    assert values["trend_x"] == ["null", "LinearFit"]  # the named type is defined once
    for name in ("first_tag", "last_tag", "tags", "product"):
        assert values[name] == json_text, name
    fastavro.parse_schema(schema)


def test_result_round_trip_every_op_json_and_avro(open_agg: OpenAgg, tmp_path: Path) -> None:
    json_cfg = all_ops_config(tmp_path)
    avro_cfg = all_ops_config(tmp_path, format="avro")
    batches = all_ops_results(open_agg, json_cfg)
    expected = [r.to_dict() for b in batches for r in b.to_results()]
    by_window = {(d["key"], d["window_start"]): d["values"] for d in expected}
    # The events exercise real values of every type, including nulls.
    a0 = by_window[("a", 0)]
    assert a0["n"] == 4 and a0["n_v"] == 3 and a0["pages"] == 3
    assert a0["pcts"] is not None and set(a0["pcts"]) == {"p50", "p99"}
    assert set(a0["trend"]) == {"slope", "intercept"}
    assert a0["first_tag"] == {"t": 1} and a0["last_tag"] == [1, "x"]
    assert a0["tags"] == [{"t": 1}, "two", None, [1, "x"]]
    b0 = by_window[("b", 0)]
    assert b0["total"] is None and b0["trend"] is None and b0["pcts"] is None

    for config in (json_cfg, avro_cfg):
        encoder = result_encoder_for(config)
        decoder = result_decoder_for(config)
        assert encoder.format == config.output.format
        records = [rec for b in batches for rec in encoder.encode_batch(b)]
        assert len(records) == len(expected)
        for (key, value), want in zip(records, expected, strict=True):
            window = (want["key"], want["window_start"], want["window_end"], None)
            assert decode_result_key(key) == window
            assert value is not None
            assert decoder.decode(value) == want, config.output.format
            if config.output.format == "json":
                assert value == orjson.dumps(want)
    avro = AvroResultEncoder(avro_cfg)
    value = avro.encode_batch(batches[0])[0][1]
    assert value is not None and not value.startswith(b"{")  # binary Avro, not JSON
    assert avro.json_text_fields == {"first_tag", "last_tag", "tags", "product"}


def test_columnar_avro_values_equal_fastavro_bytes(tmp_path: Path) -> None:
    """The derived-schema writer is byte-identical to fastavro, on both of its paths."""
    rng = np.random.default_rng(7)
    n = 200
    i64 = np.iinfo(np.int64)
    extremes = [0, -1, 1, 63, 64, -65, 2**31, i64.max, i64.min]
    longs = extremes + rng.integers(i64.min, i64.max, n - len(extremes), dtype=np.int64).tolist()
    doubles: list[Any] = [None, float("nan"), float("inf"), -float("inf"), -0.0, 1e-300]
    doubles += rng.normal(0, 1e6, n - len(doubles)).tolist()
    texts: list[Any] = [None, "ü€😀", [1, {"a": None}], {"z": 1, "a": [True]}, "x" * 3000, 1.5]
    texts += [None if i % 3 else f"t{i}" for i in range(n - len(texts))]
    maps: list[Any] = [None, {}, {"p50": 1.0, "p99": float("inf")}]
    maps += [{"p50": float(i), "p99": i * 2.5} for i in range(n - len(maps))]
    fits: list[Any] = [None] + [{"slope": i / 7, "intercept": -i * 1e9} for i in range(n - 1)]
    values: dict[str, list[Any]] = {}
    for agg in ALL_OPS:
        op = agg["op"]
        if op in ("count", "count_distinct"):
            values[agg["name"]] = [v & i64.max for v in longs] if agg["name"] == "n" else longs
        elif op == "linreg":
            values[agg["name"]] = fits
        elif op == "percentile" and isinstance(agg.get("params", {}).get("q"), list):
            values[agg["name"]] = maps
        elif op in ("first", "last", "collect") or ":" in op:
            values[agg["name"]] = texts
        else:
            values[agg["name"]] = doubles
    keys = ["", "a", "ü" * 700, *(f"key-{i}" for i in range(n - 3))]
    starts = np.asarray(longs, dtype=np.int64)
    batch = ResultBatch(
        kind=Kind.LATE,
        keys=keys,
        window_start=starts,
        window_end=starts[::-1].copy(),
        update_seq=np.asarray([v & i64.max for v in longs[::-1]], dtype=np.int64),
        values=values,
    )
    encoder = AvroResultEncoder(all_ops_config(tmp_path, format="avro"), confluent_schema_id=9)
    parsed = fastavro.parse_schema(encoder.schema)
    header = b"\x00\x00\x00\x00\x09"

    def fastavro_bytes(row: dict[str, Any]) -> bytes:
        row["values"] = {
            name: orjson.dumps(v).decode()
            if name in encoder.json_text_fields and v is not None
            else v
            for name, v in row["values"].items()
        }
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        return header + out.getvalue()

    small = ResultBatch(
        batch.kind,
        keys[2:12],
        batch.window_start[2:12],
        batch.window_end[2:12],
        batch.update_seq[2:12],
        {k: v[2:12] for k, v in values.items()},
    )
    for part in (batch, small):  # the vectorized and the per-row integer paths
        got = [value for _, value in encoder.encode_batch(part)]
        want = [fastavro_bytes(r.to_dict()) for r in part.to_results()]
        assert got == want


def result_batch(
    kind: Kind, keys: list[str], starts: list[int], **values: list[Any]
) -> ResultBatch:
    return ResultBatch(
        kind=kind,
        keys=keys,
        window_start=np.asarray(starts, dtype=np.int64),
        window_end=np.asarray(starts, dtype=np.int64) + 10_000,
        update_seq=np.arange(len(keys), dtype=np.int64),
        values=dict(values),
    )


def test_retract_is_a_tombstone_under_the_window_key(tmp_path: Path) -> None:
    batch = result_batch(Kind.RETRACT, ["a", "b"], [0, 10_000], n=[0, 0], avg=[None, None])
    for encoder in (JsonResultEncoder(), AvroResultEncoder(small_config(tmp_path, format="avro"))):
        records = encoder.encode_batch(batch)
        assert records == [
            (result_key("a", 0, 10_000), None),
            (result_key("b", 10_000, 20_000), None),
        ]
        assert decode_result_value(records[0][1], encoder.decoder()) is None


def test_kafka_key_is_stable_per_window_and_format(tmp_path: Path) -> None:
    early = result_batch(
        Kind.EARLY, ["a", 'q"ü'], [0, 0], n=[1, 1], avg=[1.0, None], tags=[[1], []]
    )
    on_time = result_batch(Kind.ON_TIME, ["a"], [0], n=[5], avg=[2.5], tags=[[1, 2]])
    late = result_batch(Kind.LATE, ["a"], [0], n=[6], avg=[3.0], tags=[[1, 2, 3]])
    avro = AvroResultEncoder(small_config(tmp_path, format="avro"))
    keys = set()
    for encoder in (JsonResultEncoder(), avro):
        keys.add(encoder.encode_batch(early)[0][0])
        keys.add(encoder.encode_batch(on_time)[0][0])
        keys.add(encoder.encode_batch(late)[0][0])
    assert keys == {b'{"key":"a","window_start":0,"window_end":10000}'}
    odd_key = JsonResultEncoder().encode_batch(early)[1][0]
    assert odd_key == '{"key":"q\\"ü","window_start":0,"window_end":10000}'.encode()
    assert decode_result_key(odd_key) == ('q"ü', 0, 10_000, None)
    # The values differ by kind and update; the key does not.
    decoded = [avro.decoder().decode(avro.encode_batch(b)[0][1]) for b in (early, on_time, late)]
    assert [d["kind"] for d in decoded if d] == ["EARLY", "ON_TIME", "LATE"]
    assert [d["values"]["n"] for d in decoded if d] == [1, 5, 6]


def test_json_result_value_document(tmp_path: Path) -> None:
    batch = result_batch(
        Kind.LATE, ["a"], [20_000], n=[2], avg=[float("nan")], tags=[[{"z": 1}, None]]
    )
    ((key, value),) = JsonResultEncoder().encode_batch(batch)
    assert value == (
        b'{"key":"a","window_start":20000,"window_end":30000,"kind":"LATE","update_seq":0,'
        b'"values":{"n":2,"avg":null,"tags":[{"z":1},null]}}'
    )
    assert decode_result_value(value) == orjson.loads(value)


def offsets_config(tmp_path: Path, **output: Any) -> JobConfig:
    window = {"type": "offsets", "size": 100}
    doc = {**SMALL_JOB, "window": window, "output": output or None}
    return parse_config(doc, base_dir=tmp_path)


def test_windows_of_one_partition_name_it_in_key_and_value(tmp_path: Path) -> None:
    """Two partitions give key ``a`` a window [0, 100): two windows, two Kafka keys."""
    batch = result_batch(Kind.ON_TIME, ["a", "a"], [0, 0], n=[3, 1], avg=[1.0, 2.0], tags=[[], []])
    batch.window_end = batch.window_start + 100
    batch.partition = np.asarray([0, 7], dtype=np.int64)
    results = batch.to_results()
    assert [r.partition for r in results] == [0, 7]
    assert list(results[1].to_dict()) == [
        "key", "window_start", "window_end", "partition", "kind", "update_seq", "values"
    ]  # fmt: skip
    json_records = JsonResultEncoder().encode_batch(batch)
    assert [k for k, _ in json_records] == [
        b'{"key":"a","window_start":0,"window_end":100,"partition":0}',
        b'{"key":"a","window_start":0,"window_end":100,"partition":7}',
    ]
    assert [k for k, _ in json_records] == [result_key("a", 0, 100, p) for p in (0, 7)]
    assert [decode_result_key(k).partition for k, _ in json_records] == [0, 7]
    assert [v for _, v in json_records] == [orjson.dumps(r.to_dict()) for r in results]
    avro = AvroResultEncoder(offsets_config(tmp_path, format="avro"))
    fields = [f["name"] for f in avro.schema["fields"]]
    assert fields[:4] == ["key", "window_start", "window_end", "partition"]
    assert avro.schema["fields"][1]["type"] == {"type": "long"}  # offsets, not times
    avro_records = avro.encode_batch(batch)
    assert [k for k, _ in avro_records] == [k for k, _ in json_records]
    decoder = avro.decoder()
    assert [decoder.decode(v) for _, v in avro_records] == [r.to_dict() for r in results]
    parsed = fastavro.parse_schema(avro.schema)
    for (_, value), r in zip(avro_records, results, strict=True):
        row = r.to_dict()
        row["values"]["tags"] = orjson.dumps(row["values"]["tags"]).decode()
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        assert value == out.getvalue()  # the columnar writer, byte for byte
    retract = replace(batch, kind=Kind.RETRACT)
    assert avro.encode_batch(retract) == [(k, None) for k, _ in json_records]
    batch.partition = None
    with pytest.raises(ValueError, match="names no partition"):
        avro.encode_batch(batch)


@pytest.mark.parametrize(
    ("window", "bounds"),
    [
        ({"type": "tumbling", "size": "10s"}, {"type": "long", "logicalType": "timestamp-millis"}),
        ({"type": "session", "gap": "10s"}, {"type": "long", "logicalType": "timestamp-millis"}),
        ({"type": "count", "size": 10}, {"type": "long"}),  # message numbers, not times
        ({"type": "session", "max_idle_messages": 3}, {"type": "long"}),  # offsets
    ],
)
def test_derived_window_bounds_are_times_only_for_time_windows(
    tmp_path: Path, window: dict[str, Any], bounds: dict[str, str]
) -> None:
    doc = {**SMALL_JOB, "window": window, "output": {"format": "avro"}}
    schema = AvroResultEncoder(parse_config(doc, base_dir=tmp_path)).schema
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert fields["window_start"] == fields["window_end"] == bounds
    assert ("partition" in fields) == ("max_idle_messages" in window)


def test_a_user_schema_may_carry_the_partition(tmp_path: Path) -> None:
    aggs = offsets_config(tmp_path).aggregations
    schema = derive_result_schema(aggs, per_partition=True)
    schema["fields"].append({"name": "note", "type": "string", "default": ""})
    path = write_schema(tmp_path, schema)
    config = offsets_config(tmp_path, format="avro", avro_schema=str(path))
    encoder = AvroResultEncoder(config)
    batch = result_batch(Kind.ON_TIME, ["a"], [0], n=[3], avg=[1.0], tags=[["x"]])
    batch.partition = np.asarray([4], dtype=np.int64)
    ((_, value),) = encoder.encode_batch(batch)
    got = encoder.decoder().decode(value)
    assert got is not None and got["partition"] == 4 and got["note"] == ""
    # a time-window job produces no partition: a schema that requires one does not fit
    with pytest.raises(AvroSchemaError, match="partition"):
        AvroResultEncoder(small_config(tmp_path, format="avro", avro_schema=str(path)))


def test_avro_confluent_result_values(tmp_path: Path) -> None:
    config = small_config(tmp_path, format="avro")
    encoder = AvroResultEncoder(config, confluent_schema_id=513)
    batch = result_batch(
        Kind.ON_TIME, ["a", "b"], [0, 0], n=[1, 2], avg=[0.5, None], tags=[[], ["x"]]
    )
    records = encoder.encode_batch(batch)
    for _, value in records:
        assert value is not None and value[:5] == b"\x00\x00\x00\x02\x01"
    decoder = encoder.decoder()
    assert [decoder.decode(v) for _, v in records] == [r.to_dict() for r in batch.to_results()]
    first = records[1][1]
    assert first is not None
    # result_encoder_for writes schemaless values: its decoder reads the body alone.
    assert AvroResultDecoder.for_config(config).decode(first[5:]) == (
        batch.to_results()[1].to_dict()
    )
    # Without json_text_fields the open-typed values stay JSON text.
    raw = AvroResultDecoder(encoder.schema_json).decode(first[5:])
    assert raw is not None and raw["values"]["tags"] == '["x"]'
    with pytest.raises(ValueError, match="magic byte"):
        AvroResultDecoder(encoder.schema_json, confluent=True).decode(b"\x01" + first[1:])


def test_user_output_schema_is_used_as_is(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "MyResult",
        "namespace": "com.example",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "window_end", "type": "long"},
            {"name": "kind", "type": "string"},
            {"name": "source", "type": "string", "default": "window-operator"},
            {
                "name": "values",
                "type": {
                    "type": "record",
                    "name": "MyValues",
                    "fields": [
                        {"name": "n", "type": "long"},
                        {"name": "avg", "type": ["null", "double"]},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                    ],
                },
            },
        ],
    }
    write_schema(tmp_path, schema, "result.avsc")
    config = small_config(tmp_path, format="avro", avro_schema="result.avsc")
    encoder = result_encoder_for(config)
    assert isinstance(encoder, AvroResultEncoder)
    assert orjson.loads(encoder.schema_json) == schema
    assert encoder.json_text_fields == frozenset()  # tags is an array here, not JSON text
    batch = result_batch(Kind.ON_TIME, ["a"], [0], n=[3], avg=[1.5], tags=[["x", "y"]])
    ((key, value),) = encoder.encode_batch(batch)
    assert key == result_key("a", 0, 10_000)
    assert result_decoder_for(config).decode(value) == {
        "key": "a",
        "window_start": 0,
        "window_end": 10_000,
        "kind": "ON_TIME",
        "source": "window-operator",
        "values": {"n": 3, "avg": 1.5, "tags": ["x", "y"]},
    }


def test_user_output_schema_that_does_not_fit_the_job(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "region", "type": "string"},
            {
                "name": "values",
                "type": {
                    "type": "record",
                    "name": "V",
                    "fields": [{"name": "p99", "type": "double"}],
                },
            },
        ],
    }
    write_schema(tmp_path, schema, "result.avsc")
    config = small_config(tmp_path, format="avro", avro_schema="result.avsc")
    with pytest.raises(AvroSchemaError, match="region") as info:
        AvroResultEncoder(config)
    assert "p99" in str(info.value)


def test_aggregation_names_must_be_avro_names_for_avro_output(tmp_path: Path) -> None:
    config = parse_config(
        {
            **SMALL_JOB,
            "aggregations": [{"name": "p95-latency", "op": "count"}],
            "output": {"format": "avro"},
        },
        base_dir=tmp_path,
    )
    with pytest.raises(AvroSchemaError, match="'p95-latency'"):
        result_encoder_for(config)
    json_config = parse_config(
        {**SMALL_JOB, "aggregations": [{"name": "p95-latency", "op": "count"}]}, base_dir=tmp_path
    )
    assert isinstance(result_encoder_for(json_config), JsonResultEncoder)


# ---------------------------------------------------------------------------------------
# Error records
# ---------------------------------------------------------------------------------------


_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
_VALUES = st.one_of(
    _SCALARS,
    st.integers(2**64, 2**70),  # beyond orjson: the stdlib fallback
    st.text(max_size=4, alphabet=',"[]{} ab\u00e9'),
    st.lists(_SCALARS, max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.text(max_size=5, alphabet='ab,"\u00e9\\'), min_size=0, max_size=6),
    st.sampled_from([Kind.EARLY, Kind.ON_TIME, Kind.LATE]),
    st.lists(st.sampled_from(["n", "avg", "m\u00e9an", 'q"']), unique=True, max_size=3),
    st.data(),
)
def test_json_values_equal_orjson_of_each_result(
    keys: list[str], kind: Kind, names: list[str], data: st.DataObject
) -> None:
    """The columnar JSON encoder writes exactly what orjson (or its fallback) writes of
    each result's document, whatever the value types (the oracle: one dumps per row)."""
    column = st.lists(data.draw(st.sampled_from([_SCALARS, _VALUES])),
                      min_size=len(keys), max_size=len(keys))  # fmt: skip
    values = {name: data.draw(column) for name in names}
    starts = np.arange(len(keys), dtype=np.int64) * 10_000 - 5_000
    batch = ResultBatch(
        kind, keys, starts, starts + 10_000, np.arange(len(keys), dtype=np.int64), values
    )
    got = JsonResultEncoder().encode_batch(batch)
    expected = [
        (result_key(r.key, r.window_start, r.window_end), dumps_json(r.to_dict()))
        for r in batch.to_results()
    ]
    assert got == expected
